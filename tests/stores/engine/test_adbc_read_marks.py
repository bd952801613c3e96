"""A reader process's Arrow scan that starts as another process checkpoints is tried again, not failed.

The race (arrow_reads.READ_MARK_RACE): the ADBC connections read the -shm
read-only, so SQLite cannot set a WAL read mark for them; when a checkpoint
in the writing process has just moved every mark past the WAL-index header
the reader read, SQLite says "attempt to write a readonly database". It
failed a query of tests/gateway/test_readonly.py in CI once. Here the marks
are moved by hand in the real -shm file while a writer in another process
holds the store open, which is exactly the state the race leaves: the scan
waits it out when it passes, and says so when it does not.
"""

from __future__ import annotations

import mmap
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.arrow_reads import READ_MARK_RACE, ArrowQuery
from stores.iqv2.position import PositionBound
from stores.iqv2.query import RangeQuery

ROOT = Path(__file__).resolve().parents[3]
SPEC = StoreSpec("m", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                 (Column("v", SqlType.BIGINT),), partitions=1)
ROWS = 200
WRITER = textwrap.dedent(f"""
    import sys
    from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
    from stores.engine import open_partition
    from stores.engine.change import Change
    from stores.iqv2.position import Position
    spec = StoreSpec("m", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("v", SqlType.BIGINT),), partitions=1)
    store = open_partition(spec, 0, sys.argv[1])
    for i in range(3):  # small batches: their pages stay in the WAL (no autocheckpoint), so readers need a mark
        store.apply_batch(i, [Change(k, (i,)) for k in range({ROWS})], Position.from_map({{"t": {{0: i}}}}))
    print("ready", flush=True)
    sys.stdin.readline()  # held open (the -shm's writer) until the test ends
    store.close()
""")
# The WAL-index (https://sqlite.org/walformat.html): two header copies of 48 bytes, mxFrame at offset 16 of each;
# then nBackfill (offset 96) and the read marks aReadMark[0..4] (offset 100); native byte order.
MX_FRAME, N_BACKFILL, READ_MARKS = 16, 96, 100


@pytest.fixture()
def held(tmp_path: Path) -> Iterator[Path]:
    """A store file a writer in another process holds open, its last batches still in the WAL."""
    path = tmp_path / "p.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.communicate(timeout=30)
        yield path
    finally:
        proc.communicate("exit\n", timeout=60)


def _marks(path: Path, *, past_the_wal: bool) -> None:
    """Every read mark past the WAL's last frame (the race's state), or mark 1 at it (what a checkpoint sets)."""
    with open(f"{path}-shm", "r+b") as f, mmap.mmap(f.fileno(), 4096) as shm:
        mx, backfill = struct.unpack_from("=I", shm, MX_FRAME)[0], struct.unpack_from("=I", shm, N_BACKFILL)[0]
        assert mx > backfill, (mx, backfill)  # frames only in the WAL: a reader must take a mark to see them
        for i in range(1, 5):
            struct.pack_into("=I", shm, READ_MARKS + 4 * i, mx + 1000 + i if past_the_wal else (mx if i == 1 else 0xFFFFFFFF))


def _scan(store) -> tuple[bool, str, int]:  # type: ignore[no-untyped-def]
    """(succeeded, failure message, rows)."""
    r = store.query(ArrowQuery(RangeQuery(), batch_rows=64), PositionBound.unbounded())
    qr = r.partition_results[0] if hasattr(r, "partition_results") else r
    if not qr.is_success:
        return False, qr.failure_message or "", 0
    return True, "", sum(b.num_rows for b in qr.result.batches())


def test_a_scan_that_starts_in_the_race_waits_for_it_to_pass(held: Path) -> None:
    reader = open_partition(SPEC, 0, held, read_only=True)
    try:
        assert _scan(reader) == (True, "", ROWS)  # the ADBC connection and its anchor open
        _marks(held, past_the_wal=True)
        heal = threading.Timer(0.01, _marks, (held,), {"past_the_wal": False})  # the checkpoint's marks land
        heal.start()
        t0 = time.monotonic()
        assert _scan(reader) == (True, "", ROWS)
        heal.join()
        assert time.monotonic() - t0 >= 0.01  # it was in the race (it cannot have been answered before it passed)
    finally:
        reader.close()


def test_a_race_that_does_not_pass_is_the_store_error_after_a_bounded_wait(held: Path) -> None:
    reader = open_partition(SPEC, 0, held, read_only=True)
    try:
        assert _scan(reader) == (True, "", ROWS)
        _marks(held, past_the_wal=True)
        t0 = time.monotonic()
        ok, message, _ = _scan(reader)
        waited = time.monotonic() - t0
        assert not ok and READ_MARK_RACE in message, message
        assert waited >= 0.4  # tried again for ~0.5 s before saying so (bounded: the test's own timeout)
        assert reader.arrow_scans_in_flight == 0  # the connection went back
        _marks(held, past_the_wal=False)
        assert _scan(reader) == (True, "", ROWS)  # and it reads again once the marks are right
    finally:
        reader.close()
