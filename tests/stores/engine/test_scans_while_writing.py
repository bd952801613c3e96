"""An Arrow scan in the process that writes the file keeps its snapshot while batches go by (sqlite_scans.py).

The failure this guards against: the ADBC driver's copy of SQLite and Python's ``sqlite3`` in one process do
not see each other's locks, so the writer checkpointed and restarted the WAL under an ADBC scan's snapshot and
the scan read ``database disk image is malformed`` (or other rows than its snapshot's).
"""

from __future__ import annotations

from pathlib import Path

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.arrow_reads import ArrowQuery, ArrowRows
from stores.engine.change import Change
from stores.engine.sqlite_scans import writing_here
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import RangeQuery

SPEC = StoreSpec("w", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                 (Column("v", SqlType.VARCHAR),), partitions=1)
KEYS = 20_000


def _write(store, i: int) -> None:  # type: ignore[no-untyped-def]
    store.apply_batch(i, [Change(k, (f"{i:04d}" + "x" * 60,)) for k in range(KEYS)],
                      Position.from_map({"t": {0: i}}))


def _scan(store) -> tuple[Position, ArrowRows]:  # type: ignore[no-untyped-def]
    r = store.query(ArrowQuery(RangeQuery(), batch_rows=500), PositionBound.unbounded())
    qr = r.partition_results[0] if hasattr(r, "partition_results") else r
    assert qr.is_success, qr.failure_message
    return qr.position, qr.result


def test_a_scan_in_the_writing_process_keeps_its_snapshot_while_the_wal_is_checkpointed_and_restarted(
        tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store = open_partition(SPEC, 0, path, synchronous="OFF")
    reader = None
    try:
        _write(store, 0)
        assert writing_here(path)
        reader = open_partition(SPEC, 0, path, read_only=True)  # a reader of the same file in the same process
        scans = []
        for s in (store, reader):
            position, rows = _scan(s)
            batches = rows.batches()
            first = next(batches)
            scans.append((position, first, batches))
        for i in range(1, 25):  # ~2.5 MB a batch: the WAL passes the autocheckpoint and starts over, many times
            _write(store, i)
        for position, first, batches in scans:
            assert position == Position.from_map({"t": {0: 0}})
            values = first.column("v").to_pylist()
            for b in batches:
                values += b.column("v").to_pylist()
            assert len(values) == KEYS
            assert {v[:4] for v in values} == {"0000"}  # every row of the scan's snapshot, none of a later batch
        _, rows = _scan(store)
        assert {v[:4] for b in rows.batches() for v in b.column("v").to_pylist()} == {"0024"}
    finally:
        if reader is not None:
            reader.close()
        store.close()
    assert not writing_here(path)
