"""What keeping a store partition's recent past costs (issue 47): batches applied with history vs without.

Two stores of the same kind, filled alike, one keeping history (the default: 16 batches / 10 s) and one not
(``Retention(0, 0)``, the baseline), get the same batches through ``PartitionedWriter.write_table`` (the ingest
path: checks, encoding, partitioning, staging, the merge, the commit), alternately, so a machine that slows
down meanwhile slows both. Figures are medians per batch after the history is full (pruning included):

- a key-value store whose batches touch many keys (full: 1M keys, 100k random keys a batch, 5% deletes;
  ``--quick``: 100k / 10k): CPU time per batch, goal <= 1.15x; and wall time, which includes the commit;
- the same store with small batches (100 keys): the fixed cost per batch (three small statements);
- a versioned store (every record a new version, its predecessor mended, retention deletes);
- reads as of the batch before the current one against the current state: KeyQuery p50 and a full RangeQuery;
- why the capture is set-based (history.py): the merge SQL alone against it with the set-based capture and with
  SQLite triggers capturing the same rows, on plain ``sqlite3`` (no staging, no commit).

CPU time (``time.process_time``: every thread of this process) is the headline because on a shared machine
the wall time of the same batch varies by half; SQLite does all the work in this process.

    python -m benchmarks.bench_history [--quick]
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import Figure, percentile, scratch_dir, time_calls
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import PartitionStore, Retention, open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery

__all__ = ["run"]

US = 1e6
UNBOUNDED = PositionBound.unbounded()


def _spec(kind: StoreKind) -> StoreSpec:
    extra: dict[str, Any] = {"history_retention_ms": 3_600_000} if kind is StoreKind.VERSIONED else {}
    return StoreSpec("h", kind, Column("k", SqlType.BIGINT), (Column("n", SqlType.BIGINT), Column("s", SqlType.VARCHAR)),
                     partitions=1, source_topics=("t",), **extra)


def _table(keys: list[int], b: int, deletes: bool = True, ts: int | None = None) -> pa.Table:
    cols: dict[str, Any] = {"k": pa.array(keys, pa.int64()), "v0": pa.array([k * 2 + b for k in keys], pa.int64()),
                            "v1": pa.array([f"value {k} of batch {b}" for k in keys]),
                            "del": pa.array([deletes and k % 20 == 0 for k in keys])}
    if ts is not None:
        cols["ts"] = pa.array([ts] * len(keys), pa.int64())
    return pa.table(cols)


class _Pair:
    """The two stores (with history, without), filled alike, each in its own file."""

    def __init__(self, root: Path, kind: StoreKind, n: int) -> None:
        self.kind = kind
        self.stores: dict[str, PartitionStore] = {}
        self.writers: dict[str, PartitionedWriter] = {}
        spec = _spec(kind)
        for name, retention in (("with", None), ("without", Retention(0, 0))):
            store = open_partition(spec, 0, root / f"{kind.value}-{name}.db", synchronous="NORMAL", history=retention)
            self.stores[name], self.writers[name] = store, PartitionedWriter(spec, {0: store}, threads=1)
        self.batch = 0
        step = 200_000
        for lo in range(0, n, step):
            self.apply(_table(list(range(lo, min(n, lo + step))), 0, deletes=False, ts=self._ts()))

    def _ts(self) -> int | None:
        return 1_700_000_000_000 + self.batch if self.kind is StoreKind.VERSIONED else None

    def apply(self, table: pa.Table, times: dict[str, list[tuple[float, float]]] | None = None) -> None:
        """One batch into both stores, the order alternating; (cpu, wall) seconds per store into ``times``."""
        self.batch += 1
        order = ("with", "without") if self.batch % 2 else ("without", "with")
        for name in order:
            c0, w0 = time.process_time(), time.perf_counter()
            self.writers[name].write_table(self.batch, table, Position.from_map({"t": {0: self.batch * 1000}}))
            if times is not None:
                times.setdefault(name, []).append((time.process_time() - c0, time.perf_counter() - w0))

    def measure(self, batches: int, make: Callable[[int], pa.Table]) -> tuple[dict[str, float], dict[str, float]]:
        """Medians of (cpu, wall) per batch over ``batches`` after 18 untimed ones (the history is full then)."""
        for _ in range(18):
            self.apply(make(self.batch))
        times: dict[str, list[tuple[float, float]]] = {}
        for _ in range(batches):
            self.apply(make(self.batch), times)
        cpu = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
        wall = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
        return cpu, wall

    def close(self) -> None:
        for s in self.stores.values():
            s.close()


def _write_figures(what: str, cpu: dict[str, float], wall: dict[str, float], goal: str, note: str) -> list[Figure]:
    ratio = cpu["with"] / cpu["without"]
    met = ratio <= 1.15 if goal else None
    return [Figure(f"{what}, CPU per batch", cpu["with"] * 1e3, "ms", cpu["without"] * 1e3, "no history", goal, met,
                   note),
            Figure(f"{what}, wall per batch", wall["with"] * 1e3, "ms", wall["without"] * 1e3, "no history", "",
                   None, "includes the commit (synchronous=NORMAL)")]


_CAPTURES = {
    "set-based": "INSERT INTO u SELECT 1, s.k, t.k IS NOT NULL, t.ts, t.v0, t.v1 FROM temp.s s LEFT JOIN kv t"
                 " ON t.k = s.k WHERE true ORDER BY s.rowid ON CONFLICT DO NOTHING",
    "triggers": "".join(
        f"CREATE TEMP TRIGGER t{i} {when} ON main.kv BEGIN INSERT INTO u VALUES ((SELECT version FROM meta), {r}.k,"
        f" {ex}) ON CONFLICT DO NOTHING; END;"
        for i, (when, r, ex) in enumerate((("AFTER INSERT", "NEW", "0, NULL, NULL, NULL"),
                                           ("BEFORE UPDATE", "OLD", "1, OLD.ts, OLD.v0, OLD.v1"),
                                           ("BEFORE DELETE", "OLD", "1, OLD.ts, OLD.v0, OLD.v1")))),
}


def _capture_designs(root: Path, n: int, touched: int, rounds: int) -> list[Figure]:
    """CPU of the kv merge SQL alone, with the set-based capture before it, and with triggers capturing."""
    c = sqlite3.connect(root / "designs.db", isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY, version INTEGER)")
    c.execute("INSERT INTO meta VALUES (0, 1)")
    c.execute("CREATE TABLE kv (k INTEGER NOT NULL PRIMARY KEY, ts INTEGER, v0 INTEGER, v1 TEXT) WITHOUT ROWID")
    c.execute("CREATE TABLE u (b INTEGER NOT NULL, k INTEGER NOT NULL, ex INTEGER NOT NULL, ts INTEGER, v0 INTEGER,"
              " v1 TEXT, PRIMARY KEY (b, k)) WITHOUT ROWID")
    c.execute("CREATE TEMP TABLE s (k, ts, v0, v1, del)")
    c.execute("WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < ?)"
              " INSERT INTO kv SELECT x, 0, x, 'value ' || x FROM g", (n - 1,))
    rng = random.Random(7)
    times: dict[str, list[float]] = {}
    for r in range(rounds):
        keys = sorted({rng.randrange(n + n // 10) for _ in range(touched)})
        c.execute("DELETE FROM temp.s")
        c.executemany("INSERT INTO temp.s VALUES (?, ?, ?, ?, ?)",
                      [(k, r, k + r, f"value {k} {r}", int(k % 20 == 0)) for k in keys])
        for design in ("merge only", *_CAPTURES):
            if design == "triggers":
                c.executescript(_CAPTURES[design])
            c.execute("BEGIN IMMEDIATE")
            t = time.process_time()
            if design == "set-based":
                c.execute(_CAPTURES[design])
            c.execute("INSERT INTO kv SELECT k, ts, v0, v1 FROM temp.s WHERE del = 0 ORDER BY rowid"
                      " ON CONFLICT (k) DO UPDATE SET ts = excluded.ts, v0 = excluded.v0, v1 = excluded.v1")
            c.execute("DELETE FROM kv WHERE k IN (SELECT k FROM temp.s WHERE del = 1)")
            times.setdefault(design, []).append(time.process_time() - t)
            c.execute("ROLLBACK")  # every design merges the same rows into the same table
            if design == "triggers":
                for i in range(3):
                    c.execute(f"DROP TRIGGER temp.t{i}")
    c.close()
    base = statistics.median(times["merge only"]) * 1e3
    return [Figure(f"kv merge SQL of {touched:,} keys with {design} capture", statistics.median(times[design]) * 1e3,
                   "ms", base, "the merge SQL alone", note="plain sqlite3, CPU, rolled back; history.py's choice")
            for design in _CAPTURES]


def run(quick: bool) -> list[Figure]:
    n = 100_000 if quick else 1_000_000
    touched = n // 10
    timed = 8 if quick else 12
    root = scratch_dir("bench-history-")
    rng = random.Random(47)
    figures: list[Figure] = []

    kv = _Pair(root, StoreKind.KEY_VALUE, n)
    many = lambda b: _table([rng.randrange(n + n // 10) for _ in range(touched)], b)  # noqa: E731
    cpu, wall = kv.measure(timed, many)
    figures += _write_figures(f"kv batch of {touched:,} random keys into {n:,}", cpu, wall, "<= 1.15x",
                              "PartitionedWriter.write_table; 5% deletes, 10% new keys")
    mb = {name: sum(Path(f"{s.path}{x}").stat().st_size for x in ("", "-wal") if Path(f"{s.path}{x}").exists()) / 2**20
          for name, s in kv.stores.items()}
    figures.append(Figure("kv file size, 16 batches of history", mb["with"], "MB", mb["without"], "no history",
                          note=f"{n:,} keys; each kept batch holds the before-image of {touched:,} rows"))
    small = lambda b: _table([rng.randrange(n) for _ in range(100)], b)  # noqa: E731
    cpu, wall = kv.measure(timed * 4, small)
    figures += _write_figures(f"kv batch of 100 keys into {n:,}", cpu, wall, "", "the fixed cost of a batch")

    store = kv.stores["with"]
    previous = Position.from_map({"t": {0: (kv.batch - 1) * 1000}})
    keys = [rng.randrange(n) for _ in range(4096)]
    it = iter(range(10**12))
    calls = 2_000 if quick else 10_000
    now_us = percentile(time_calls(lambda: store.query(KeyQuery.with_key(keys[next(it) & 4095]), UNBOUNDED),
                                   calls, max_seconds=10), 50) * US
    asof_us = percentile(time_calls(lambda: store.query(KeyQuery.with_key(keys[next(it) & 4095]), UNBOUNDED,
                                                        snapshot=previous), calls, max_seconds=10), 50) * US
    figures.append(Figure("KeyQuery p50 as of the previous batch", asof_us, "us", now_us, "KeyQuery p50, current",
                          note="one batch of small batches back; a transaction of its own and a view"))

    def scan(snapshot: Position | None) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            rows = len(store.query(RangeQuery.with_no_bounds(), UNBOUNDED, snapshot=snapshot).result.remaining_rows())
            best = min(best, time.perf_counter() - t)
        return rows / best

    figures.append(Figure("RangeQuery rows/s as of the previous batch", scan(previous), "rows/s", scan(None),
                          "RangeQuery rows/s, current", note=f"{n:,} keys, every row checked against the history"))
    kv.close()

    ver = _Pair(root, StoreKind.VERSIONED, n // 4)
    versions = lambda b: _table(sorted(rng.sample(range(n // 4), touched // 4)), b, ts=ver._ts())  # noqa: E731
    cpu, wall = ver.measure(max(4, timed // 2), versions)
    figures += _write_figures(f"versioned batch of {touched // 4:,} new versions into {n // 4:,} keys", cpu, wall, "",
                              "each new version's predecessor is mended too")
    ver.close()
    return figures + _capture_designs(root, n, touched, 5 if quick else 9)


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
