"""An Arrow scan's stream has one owner at a time (issue 43): a close that arrives while another thread is inside
the driver's read is carried out by that thread when the read returns, never under it.

The crash this prevents: DuckDB reads a relation's batches on its worker threads; a statement ended early (the
row limit) closed its scans from the request's thread while a worker was inside ``get_next`` of the ADBC SQLite
driver, which then read freed memory and took the serving process down (SIGSEGV, or glibc's
``__pthread_tpp_change_priority`` assertion).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.arrow_reads import ArrowRows

ROOT = Path(__file__).resolve().parents[3]
SPEC = StoreSpec("t", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False), (Column("v", SqlType.DOUBLE),),
                 partitions=1)


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + n), pa.int64()), pa.array([0.5] * n)], names=["key", "v0"])


class _Driver:
    """Stands in for the driver's record batch stream (not our code): a read that blocks until told to return,
    and a record of what happened to the stream, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.inside = threading.Event()
        self.go_on = threading.Event()
        self._n = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        self._n += 1
        if self._n == 3:  # the third read blocks, as a read of a large page run does
            self.events.append("read begins")
            self.inside.set()
            assert self.go_on.wait(10)
            self.events.append("read returns")
        if self._n > 4:
            raise StopIteration
        return _batch(self._n * 10, 3)

    def close(self) -> None:
        self.events.append("stream closed")

    def release(self) -> None:
        self.events.append("transaction ended")


def test_a_close_during_a_read_is_carried_out_by_the_reader_after_the_read() -> None:
    driver = _Driver()
    rows = ArrowRows(SPEC, ("key", "v0"), driver, driver.release)
    got: list[int] = []

    def read() -> None:
        for b in rows.batches():
            got.append(b.num_rows)

    reader = threading.Thread(target=read)
    reader.start()
    assert driver.inside.wait(10)
    rows.close()  # the request's thread ends the statement while the reader is inside the driver
    assert driver.events == ["read begins"]  # nothing was closed under the read
    driver.go_on.set()
    reader.join(10)
    assert not reader.is_alive()
    assert driver.events == ["read begins", "read returns", "stream closed", "transaction ended"]
    assert got == [2, 3]  # the witness row sliced off the first; no batch handed out after the close was asked


def test_a_close_between_reads_ends_the_stream_at_once_and_once() -> None:
    driver = _Driver()
    rows = ArrowRows(SPEC, ("key", "v0"), driver, driver.release)
    it = rows.batches()
    next(it)
    rows.close()
    rows.close()
    assert driver.events == ["stream closed", "transaction ended"]
    assert list(it) == []


CRASH = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from gateway.engine.config import GatewayConfig
    from gateway.engine import Gateway
    from gateway.http.renderers import render_arrow
    from gateway.engine.errors import RowLimitExceeded
    from tests.gateway.gwfixtures import make_app, REVENUE
    from stores.engine.change import Change
    from stores.iqv2.position import Position

    app = make_app(Path({state!r}), (REVENUE,))
    app.start()
    n = 200_000
    app.writer("revenue").write_batch(0, [Change(f"c{{i:06d}}", (float(i), i)) for i in range(n)],
                                      Position.from_map({{"orders": {{0: n - 1}}}}))
    gw = Gateway(app, config=GatewayConfig(max_rows=1000))
    for _ in range(8):
        try:
            render_arrow(gw.sql("SELECT * FROM revenue", arrow=True), 10**9)
        except RowLimitExceeded:
            pass
        else:
            raise SystemExit("no row limit error")
    gw.close()
    app.close()
    print("alive")
""")


def test_an_arrow_answer_past_the_row_limit_leaves_the_process_alive(tmp_path: Path) -> None:
    """The reproduction of issue 43 (it crashed 5 runs of 5 before the fix), in a child process so that a crash
    fails this test instead of ending the test run."""
    proc = subprocess.run([sys.executable, "-c", CRASH.format(root=str(ROOT), state=str(tmp_path))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "alive"
