"""A versioned store's changes: which version is current after each batch, read against the store itself.

A versioned record holds new versions (``k``, ``ts`` = valid_from, ``del`` = tombstone, values). Whether a version
changes a key's current row depends on the versions the store already holds (a late, out-of-order version does
not; a tombstone newer than it keeps the key gone), so a record alone cannot say. The feed reads, for the keys a
run of batches touched, each key's latest version and the partition's last batch id in ONE snapshot (``s``):

- batches after ``s`` are folded onto those versions exactly as the store's merge applies them (the newest
  valid_from wins; of two versions with one valid_from the later one): exact per batch;
- batches up to ``s`` are already in the store: a key's state at ``s`` is its state at the last of these batches
  that touched it, so it is sent there, and a batch before a key's last touch is not a whole answer
  (``complete`` False) until that touch has been sent. This only happens while the feed is behind the store
  (a catch-up); a feed keeping up reads each record before or just after its batch commits (``s`` = b - 1 or b).

The feed never reads a store ahead of the changelog (records are written before the commit), so ``s`` behind
the run means the partition has not committed yet (wait) and ``s`` past it means more records must be read first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..engine.base import PartitionStore
from ..engine.batch import DELETED, KEY, TS, value_name
from .rows import RowMaker

__all__ = ["VersionRun", "Resolved", "NotReady", "NeedMore", "read_latest", "record_versions", "resolve"]

Version = tuple[Any, bool, Any]  # (valid_from, tombstone, stored values)
KEYS_PER_STATEMENT = 500


def record_versions(maker: RowMaker, rows: pa.Table) -> list[tuple[Any, Any, bool, tuple[Any, ...]]]:
    """``(key, valid_from, tombstone, stored values)`` of a versioned record's rows, in record order."""
    n = len(rows)
    if n == 0:
        return []
    keys = rows.column(KEY).to_pylist()
    ts = rows.column(TS).to_pylist()
    dels = rows.column(DELETED).to_pylist() if DELETED in rows.column_names else [False] * n
    vals = [rows.column(value_name(i)).to_pylist() for i in range(maker.n)]
    return [(keys[i], ts[i], bool(dels[i]), tuple(c[i] for c in vals)) for i in range(n)]


def read_latest(store: PartitionStore, n_values: int, keys: Sequence[Any]) -> tuple[int, dict[Any, Version]]:
    """(the partition's last batch id, -1 for none; each of ``keys``' latest version), from ONE snapshot."""
    v = "".join(f", v{i}" for i in range(n_values))
    statements: list[tuple[str, Sequence[Any]]] = [("SELECT last_batch_id FROM meta", ())]
    for i in range(0, len(keys), KEYS_PER_STATEMENT):
        chunk = list(keys[i:i + KEYS_PER_STATEMENT])
        statements.append((f"SELECT k, vf, tomb{v} FROM ver WHERE vt IS NULL AND k IN ({', '.join('?' * len(chunk))})",
                           chunk))
    _position, rows = store.snapshot_many(statements)
    last = rows[0][0]
    return (-1 if last is None else last), {r[0]: (r[1], bool(r[2]), tuple(r[3:3 + n_values])) for r in rows[1:]}


@dataclass(frozen=True)
class VersionRun:
    """Consecutive batches of one versioned store: ``versions[i][p]`` the versions batch ``batch_ids[i]`` wrote
    to partition ``p``."""

    batch_ids: tuple[int, ...]
    versions: tuple[Mapping[int, list[tuple[Any, Any, bool, tuple[Any, ...]]]], ...]


@dataclass(frozen=True)
class Resolved:
    """Per batch of the run: ``changes[i][p]`` = key → its new row (None: gone), and whether it is complete."""

    changes: tuple[dict[int, dict[Any, Any]], ...]
    complete: tuple[bool, ...]


@dataclass(frozen=True)
class NotReady:
    """Partition ``partition`` has not committed the batch before the run yet: read it again a little later."""

    partition: int
    at: int


@dataclass(frozen=True)
class NeedMore:
    """Partition ``partition`` has committed up to ``at``, past the run: read the records up to it first."""

    partition: int
    at: int


def _state(maker: RowMaker, key: Any, version: Version | None) -> Any:
    if version is None or version[1]:
        return None
    return maker.row(key, version[2], version[0])


def resolve(maker: RowMaker, run: VersionRun, partitions: Sequence[int],
            latest: Callable[[int, list[Any]], tuple[int, dict[Any, Version]]]) -> Resolved | NotReady | NeedMore:
    """Each batch's changes of the run (see the module doc); ``latest(p, keys)`` is ``read_latest`` on ``p``."""
    ids = run.batch_ids
    first, last = ids[0], ids[-1]
    changes: list[dict[int, dict[Any, Any]]] = [{} for _ in ids]
    complete = [True] * len(ids)
    for p in partitions:
        touched = [[v[0] for v in run.versions[i].get(p, ())] for i in range(len(ids))]
        keys = list(dict.fromkeys(k for ks in touched for k in ks))
        if not keys:
            continue
        s, base = latest(p, keys)
        if s < first - 1:
            return NotReady(p, s)
        if s > last:
            return NeedMore(p, s)
        done = [i for i, b in enumerate(ids) if b <= s]
        last_touch: dict[Any, int] = {}
        for i in done:
            for k in touched[i]:
                last_touch[k] = i
        reach = -1  # the furthest last touch of any key touched so far: batches before it are not whole answers
        for i in done:
            for k in touched[i]:
                reach = max(reach, last_touch[k])
            if reach > i:
                complete[i] = False
        for k, i in last_touch.items():
            changes[i].setdefault(p, {})[k] = _state(maker, k, base.get(k))
        current: dict[Any, Version | None] = dict(base)
        for i, b in enumerate(ids):
            if b <= s:
                continue
            out = changes[i].setdefault(p, {})
            for k, vf, tomb, vals in run.versions[i].get(p, ()):
                cur = current.get(k)
                if cur is None or vf >= cur[0]:
                    current[k] = (vf, tomb, vals)
                    out[k] = _state(maker, k, current[k])
    return Resolved(tuple(changes), tuple(complete))
