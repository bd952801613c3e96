"""A store partition's recent past: what each batch changed, kept so the partition can be read as of an earlier
Position it held (issue 47, "one statement, one moment").

Why: a statement over several stores must read them all at ONE input Position, and stores fed by different
streaming queries commit their batches at different times. Instead of making the leading store wait, the gateway
reads it as of the lagging store's Position (Materialize-style snapshot reads); asof.py answers such reads from
what this module keeps.

What is kept, in the partition's own file and in the batch's own transaction (so a reader's snapshot always
sees a batch's rows, its Position and its history together):

- ``<table>_undo (b, <the table's primary key>, ex, <its other columns>)``, primary key ``(b, <key>)``: the
  before-image of every row batch ``b`` changes (``ex`` 1: the row as it was; ``ex`` 0: it did not exist).
  ``b`` is the ``meta.version`` the partition had before the batch. Keyed by ``b`` first, so a batch's rows
  are appended at the end of the B-tree in key order and pruning deletes a range at its start;
- ``history (b, batch_id, committed_ms, before_*, after_*)``: per batch the meta row (version, last batch id,
  Position, observed stream time) before and after it.

How rows are captured: set-based, one ``INSERT … SELECT`` per kind before its merge (plus, for versioned stores,
each new version's predecessor and the rows the retention delete removes), not SQLite triggers. Measured on
upserts of 10% of a table's keys (CPU, medians; benchmarks/bench_history.py reproduces it): triggers add
75-105% to the merge SQL (30% for triggers that do nothing: SQLite runs a sub-program per row), the set-based
capture 50-55% (half the seek into the table, half the append to the undo table). So whatever changes a row of a kind's table must
capture it first (``PartitionStore.capture`` / ``capture_where``); the differential tests
(tests/stores/engine/test_history.py) read every kept state back and fail when a change is not captured.

Which history is valid: the records form a chain ``b, b+1, …`` ending at the current ``meta.version``; a reader
trusts only the unbroken chain back from the current version (``chain``), so history left by a writer that did
not keep any (an older version, or history switched off) can never be misread.

Retention (``Retention``): the last ``batches`` batches and at least every batch committed in the last ``ms``
milliseconds; pruned in the batch's own transaction. Defaults 16 batches / 10 s; per store from
``StoreSpec.options`` (``history_batches``, ``history_ms``) or ``open_partition(history=…)``; 0 / 0 keeps none.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Retention", "Record", "HISTORY_TABLE", "DEFAULT_BATCHES", "DEFAULT_MS", "undo_table", "migrate", "clear",
           "capture_sql", "capture_where_sql", "record", "prune", "chain"]

HISTORY_TABLE = "history"
DEFAULT_BATCHES = 16
DEFAULT_MS = 10_000

_HISTORY_DDL = (
    f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (b INTEGER PRIMARY KEY, batch_id INTEGER, committed_ms INTEGER NOT NULL,"
    " before_version INTEGER NOT NULL, before_last_batch_id INTEGER, before_position TEXT NOT NULL,"
    " before_observed_ts INTEGER, after_version INTEGER NOT NULL, after_last_batch_id INTEGER,"
    " after_position TEXT NOT NULL, after_observed_ts INTEGER)"
)


class Retention(NamedTuple):
    """How much history a partition keeps: the last ``batches`` batches and at least ``ms`` milliseconds."""

    batches: int = DEFAULT_BATCHES
    ms: int = DEFAULT_MS

    @property
    def enabled(self) -> bool:
        return self.batches > 0 or self.ms > 0

    @classmethod
    def of(cls, options: Mapping[str, Any] | None, override: Retention | None = None) -> Retention:
        """``override``, else the store's options (``history_batches``, ``history_ms``), else the defaults."""
        if override is not None:
            out = cls(*override)
        else:
            opts = options or {}
            out = cls(opts.get("history_batches", DEFAULT_BATCHES), opts.get("history_ms", DEFAULT_MS))
        for name, v in zip(cls._fields, out):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"history {name} must be a non-negative integer, got {v!r}")
        return out


class Record(NamedTuple):
    """One batch's entry in ``history``: the meta row before it (the state as of ``b``) and the Position after."""

    b: int
    before_version: int
    before_last_batch_id: int | None
    before_position: str
    before_observed_ts: int | None
    after_position: str


def undo_table(table: str) -> str:
    return f"{table}_undo"


def migrate(c: sqlite3.Connection, table: str, retention: Retention) -> None:
    """Create the history tables of ``table`` if missing (a file made before them gets them when a writer opens it;
    idempotent), in the caller's transaction; with retention off, drop what an earlier writer kept."""
    cols = c.execute(f"PRAGMA main.table_info({table})").fetchall()  # (cid, name, type, notnull, default, pk)
    key = sorted((col for col in cols if col[5]), key=lambda col: col[5])
    rest = [col for col in cols if not col[5]]
    decls = [f"{col[1]} {col[2]} NOT NULL" for col in key] + ["ex INTEGER NOT NULL"] + [f"{col[1]} {col[2]}" for col in rest]
    c.execute(f"CREATE TABLE IF NOT EXISTS {undo_table(table)} (b INTEGER NOT NULL, {', '.join(decls)},"
              f" PRIMARY KEY (b, {', '.join(col[1] for col in key)})) WITHOUT ROWID")
    c.execute(_HISTORY_DDL)
    if not retention.enabled:
        clear(c, table)


def clear(c: sqlite3.Connection, table: str) -> None:
    """Forget all history (a reset, or history switched off), in the caller's transaction."""
    c.execute(f"DELETE FROM {undo_table(table)}")
    c.execute(f"DELETE FROM {HISTORY_TABLE}")


def capture_sql(table: str, key: Sequence[str], staged_key: Sequence[str], rest: Sequence[str], src: str) -> str:
    """The before-image of every row the staged rows ``src`` name (``staged_key`` → the table's ``key``), in
    staging order; the first image of a row in a batch wins (the row as it was before the batch).
    Parameter: the batch's ``b``."""
    on = " AND ".join(f"t.{k} = s.{s}" for k, s in zip(key, staged_key))
    return (f"INSERT INTO {undo_table(table)} (b, {', '.join(key)}, ex{''.join(f', {r}' for r in rest)})"
            f" SELECT ?, {', '.join(f's.{s}' for s in staged_key)}, t.{key[0]} IS NOT NULL"
            f"{''.join(f', t.{r}' for r in rest)} FROM {src} s LEFT JOIN {table} t ON {on}"
            " WHERE true ORDER BY s.rowid ON CONFLICT DO NOTHING")


def capture_where_sql(table: str, key: Sequence[str], rest: Sequence[str], where: str) -> str:
    """The before-image of every row of ``table`` matching ``where`` (a delete's own condition), taken just before
    the delete; rows this batch already changed keep their earlier image. Parameters: ``b``, then ``where``'s."""
    return (f"INSERT INTO {undo_table(table)} (b, {', '.join(key)}, ex{''.join(f', {r}' for r in rest)})"
            f" SELECT ?, {', '.join(key)}, 1{''.join(f', {r}' for r in rest)} FROM {table} WHERE {where}"
            " ON CONFLICT DO NOTHING")


def record(c: sqlite3.Connection, b: int, batch_id: int, before: Sequence[Any], after: Sequence[Any]) -> None:
    """The batch's ``history`` row: ``before``/``after`` are (version, last_batch_id, position JSON, observed_ts)."""
    c.execute(f"INSERT INTO {HISTORY_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              (b, batch_id, time.time_ns() // 1_000_000, *before, *after))


def prune(c: sqlite3.Connection, table: str, retention: Retention) -> None:
    """Drop the history of batches that are neither among the last ``retention.batches`` nor younger than
    ``retention.ms``, in the batch's own transaction (a range at the start of each B-tree)."""
    keep_from: int | None = None
    if retention.batches > 0:
        nth = c.execute(f"SELECT b FROM {HISTORY_TABLE} ORDER BY b DESC LIMIT 1 OFFSET ?",
                        (retention.batches - 1,)).fetchone()
        if nth is None:
            return  # fewer than ``batches`` kept: nothing to drop
        keep_from = nth[0]
    if retention.ms > 0:
        since = time.time_ns() // 1_000_000 - retention.ms
        young = c.execute(f"SELECT min(b) FROM {HISTORY_TABLE} WHERE committed_ms >= ?", (since,)).fetchone()[0]
        if young is not None:
            keep_from = young if keep_from is None else min(keep_from, young)
        elif keep_from is None:
            keep_from = c.execute("SELECT version FROM meta").fetchone()[0]  # nothing young: keep none
    if keep_from is None:
        return
    c.execute(f"DELETE FROM {undo_table(table)} WHERE b < ?", (keep_from,))
    c.execute(f"DELETE FROM {HISTORY_TABLE} WHERE b < ?", (keep_from,))


def chain(c: sqlite3.Connection, version: int) -> list[Record]:
    """The kept batches, newest first, as far back as they form an unbroken chain ending at ``version`` (the
    current ``meta.version``), read in the caller's transaction. A file without history tables keeps none."""
    try:
        rows = c.execute(f"SELECT b, before_version, before_last_batch_id, before_position, before_observed_ts,"
                         f" after_version, after_position FROM main.{HISTORY_TABLE} WHERE b < ? ORDER BY b DESC",
                         (version,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    out: list[Record] = []
    expect = version
    for b, bv, blast, bpos, bobs, av, apos in rows:
        if av != expect or b != expect - 1 or bv != b:
            break
        out.append(Record(b, bv, blast, bpos, bobs, apos))
        expect = b
    return out
