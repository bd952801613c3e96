"""Open files stay O(stores × partitions) however many threads read (issue 23 item 1).

Every thread used to open its own connection to every partition it touched;
now read connections are borrowed from a per-partition pool and the process
keeps a bounded number idle.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import connections
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest

STORES, PARTITIONS, THREADS = 24, 4, 16


def _spec(i: int) -> StoreSpec:
    return StoreSpec(f"s{i:02d}", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("v", SqlType.BIGINT),), partitions=PARTITIONS, source_topics=("t",))


def test_many_threads_reading_many_partitions_keep_open_files_bounded(tmp_path: Path) -> None:
    before = connections.open_files()
    partitions_before = connections.stats()["partitions"]  # stores another test left open count too
    assert before is not None
    app = StreamsApp(StoreTopology([_spec(i) for i in range(STORES)]), "fds", tmp_path / "state",
                     coordination_base=tmp_path / "coord", synchronous="NORMAL")
    app.start()
    try:
        pos = Position.from_map({"t": {0: 99}})
        for i in range(STORES):
            app.writer(f"s{i:02d}").write_batch(0, [Change(k, (k * i,)) for k in range(100)], pos)
        errors: list[str] = []
        peak = [0]

        def read(t: int) -> None:
            for rnd in range(3):
                for i in range(STORES):
                    name = f"s{i:02d}"
                    q = RangeQuery.with_no_bounds() if (t + rnd) % 2 else KeyQuery.with_key(t)
                    res = app.query(StateQueryRequest.in_store(name).with_query(q))
                    if any(not qr.is_success for qr in res.partition_results.values()):
                        errors.append(f"{name}: {res}")
                peak[0] = max(peak[0], connections.open_files() or 0)

        threads = [threading.Thread(target=read, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + 300
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        assert not any(th.is_alive() for th in threads), "the readers did not finish in 300 s"
        assert errors == []
        n = STORES * PARTITIONS
        opened = (connections.open_files() or 0) - before
        # the goal of issue 23: at most 4 files per store partition (+100); one connection per thread and
        # partition was 2 files x 16 threads x 96 partitions
        assert opened <= 4 * n + 100, (opened, connections.stats())
        assert peak[0] - before <= 4 * n + 100 + 2 * THREADS, (peak[0] - before, connections.stats())
        st = connections.stats()
        assert st["partitions"] - partitions_before == n
        assert st["idle_read_connections"] <= st["idle_budget"] == max(connections.MIN_BUDGET, st["partitions"] // 2)
    finally:
        app.close(10)
    assert (connections.open_files() or 0) - before <= 5  # closing the app closes every connection


def test_take_idle_hands_out_only_idle_connections_and_a_waiter_gets_one_given_back(tmp_path: Path) -> None:
    """``take_idle``/``give`` (the point-lookup path) and ``connection()`` share one pool: never two holders."""
    import sqlite3

    path = tmp_path / "p.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE t (x)")
    pool = connections.ReadPool(path, max_readers=1)
    try:
        assert pool.take_idle() is None  # nothing opened yet: the caller must open one (connection())
        with pool.connection() as c:
            assert c.execute("SELECT count(*) FROM t").fetchone() == (0,)
        got = pool.take_idle()
        assert got is not None
        assert pool.take_idle() is None  # the only connection is out
        answered: list[float] = []

        def wait_for_it() -> None:
            with pool.connection() as c2:
                assert c2 is got[0]
                answered.append(time.monotonic())

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.2)
        assert not answered  # max_readers=1: it waits for the one out
        given = time.monotonic()
        pool.give(*got)
        waiter.join(10)
        assert answered and answered[0] >= given
        assert pool.take_idle() is not None
    finally:
        pool.close()
    assert pool.take_idle() is None  # closed: nothing is handed out


def test_a_point_lookup_answers_while_the_writer_is_busy_and_after_the_store_is_closed_it_refuses(
        tmp_path: Path) -> None:
    """In the writing process a lookup takes an idle reader, else the idle writer, else opens a reader."""
    from stores.engine import open_partition
    from stores.engine.writer import PartitionedWriter
    from stores.iqv2.position import PositionBound
    from stores.iqv2.result import FailureReason

    spec = StoreSpec("one", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("v", SqlType.BIGINT),), partitions=1, source_topics=("t",))
    store = open_partition(spec, 0, tmp_path / "p0.sqlite", synchronous="NORMAL")
    PartitionedWriter(spec, {0: store}).write_batch(0, [Change(7, (70,))], Position.from_map({"t": {0: 1}}))
    q, unbounded = KeyQuery.with_key(7), PositionBound.unbounded()
    readers = connections.stats()["read_connections"]
    try:
        first = store.query(q, unbounded)  # no reader yet: the idle writer answers
        assert first.is_success and tuple(first.result) == (70,), first
        assert connections.stats()["read_connections"] == readers
        store._write_lock.acquire()  # a batch being written: the writer is not free
        try:
            busy = store.query(q, unbounded)
        finally:
            store._write_lock.release()
        assert busy.is_success and tuple(busy.result) == (70,), busy
        assert connections.stats()["read_connections"] == readers + 1  # a reader was opened for it
        again = store.query(q, unbounded)  # that reader is idle now: taken at once, none opened
        assert again.is_success and tuple(again.result) == (70,) and again.position == first.position
        assert connections.stats()["read_connections"] == readers + 1
    finally:
        store.close()
    closed = store.query(q, unbounded)
    assert closed.failure_reason is FailureReason.STORE_EXCEPTION and "closed" in closed.failure_message, closed
