"""The victim of the columnar kill -9 test: writes big Arrow batches into every store kind until killed.

``python columnar_child.py <dir> <batches> <keys> <max_s>``: opens one store
per kind (2 partitions each) in ``<dir>`` and, from the smallest batch id any
partition has applied + 1 (a restart replays what some partitions may already
hold), writes batch b into every store through ``PartitionedWriter.write_table``
with its partitions in parallel threads and rows staged through ADBC (each
partition gets ~keys/2 rows, above ``ADBC_MIN_ROWS``). What batch b leaves is
``expected(kind, b, keys)``: the test compares every partition with it.

Every loop is bounded in count and time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec  # noqa: E402
from stores.engine import open_partition  # noqa: E402
from stores.engine.writer import PartitionedWriter  # noqa: E402
from stores.iqv2.position import Position  # noqa: E402

TOPIC = "src"
PARTITIONS = 2
WINDOW_MS = 1000
DELETE_EVERY = 7  # in batch b, key k is deleted (a tombstone, for the versioned store) when k % 7 == b % 7


def specs() -> list[StoreSpec]:
    key, values = Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT), Column("pad", SqlType.VARCHAR))
    common = {"partitions": PARTITIONS, "source_topics": (TOPIC,)}
    return [
        StoreSpec("kv", StoreKind.KEY_VALUE, key, values, **common),
        StoreSpec("tkv", StoreKind.TIMESTAMPED_KEY_VALUE, key, values, **common),
        StoreSpec("win", StoreKind.WINDOW, key, values, window_size_ms=WINDOW_MS, **common),
        StoreSpec("ses", StoreKind.SESSION, key, values, gap_ms=WINDOW_MS, **common),
        StoreSpec("ver", StoreKind.VERSIONED, key, values, **common),
    ]


def path(root: Path, spec: StoreSpec, p: int) -> Path:
    return root / f"{spec.name}-{p}.db"


def deleted(b: int, keys: int) -> np.ndarray:
    return np.arange(keys) % DELETE_EVERY == b % DELETE_EVERY


def table(spec: StoreSpec, b: int, keys: int) -> pa.Table:
    """Batch b: every key set to value b (keys of ``deleted(b)`` deleted), in a random order."""
    k = np.random.default_rng(b).permutation(keys).astype(np.int64)
    dead = deleted(b, keys)[k]
    cols = {"k": pa.array(k), "v0": pa.array(np.full(keys, b, dtype=np.int64)),
            "v1": pa.array(["x" * 48] * keys), "ts": pa.array(np.full(keys, b, dtype=np.int64)),
            "del": pa.array(dead)}
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        cols["ws"] = pa.array(np.zeros(keys, dtype=np.int64))
        cols["we"] = pa.array(np.full(keys, WINDOW_MS if spec.kind is StoreKind.WINDOW else 10, dtype=np.int64))
    return pa.table(cols)


def main(root: Path, batches: int, keys: int, max_s: float) -> None:
    ws, opened = {}, []
    for spec in specs():
        stores = {p: open_partition(spec, p, path(root, spec, p), synchronous="NORMAL") for p in range(PARTITIONS)}
        opened += stores.values()
        ws[spec.name] = PartitionedWriter(spec, stores, threads=2, parallel_min_rows=0)
    start = min(w.last_batch_id() or 0 for w in ws.values())
    print("started", flush=True)
    deadline = time.monotonic() + max_s
    for b in range(start + 1, start + batches + 1):
        for spec in specs():
            ws[spec.name].write_table(b, table(spec, b, keys), Position.from_map({TOPIC: {0: b}}))
        print(f"batch {b}", flush=True)
        if time.monotonic() > deadline:
            break
    for store in opened:
        store.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
