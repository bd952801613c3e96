"""``point_read`` (the gateway's point lane, issue 14) against ``query()`` on real store files.

A KeyQuery answered without the IQv2 objects must be the KeyQuery's answer
(the value, its timestamp, the position read in the same snapshot) or None,
and None exactly where ``query()`` has something else to say: a bound the
partition has not reached, a closed or deleted file, no idle connection. The
borrow it reads through keeps the pool's counts as ``take_idle``/``give`` do.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from stores.app.reader import StateDirReader
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.partitioner import partition_for_key, partition_for_long
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import connections, open_partition
from stores.engine.change import Change
from stores.engine.writer import PartitionedWriter
from stores.errors import StreamsNotStartedException, StreamsStoppedException, UnknownStateStoreException
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, TimestampedKeyQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason
from tests.fault_fs import chattr

UNBOUNDED = PositionBound.unbounded()


def _spec(kind: StoreKind = StoreKind.KEY_VALUE, partitions: int = 1) -> StoreSpec:
    return StoreSpec("s", kind, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("name", SqlType.VARCHAR), Column("ok", SqlType.BOOLEAN)), partitions=partitions,
                     source_topics=("t",))


def _store(tmp_path: Path, kind: StoreKind = StoreKind.KEY_VALUE):  # noqa: ANN202 - a PartitionStore
    spec = _spec(kind)
    store = open_partition(spec, 0, tmp_path / "p0.sqlite", synchronous="NORMAL")
    PartitionedWriter(spec, {0: store}).write_batch(
        0, [Change(1, ("one", True), 1_700_000_000_000), Change(2, ("zwei", False), 5),
         Change(3, (None, None), 6)],
        Position.from_map({"t": {0: 4}}))
    return store


@pytest.mark.parametrize("kind", [StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE])
def test_a_point_read_is_the_key_query_s_answer(tmp_path: Path, kind: StoreKind) -> None:
    store = _store(tmp_path, kind)
    try:
        for key in (1, 2, 3, 99, -5):
            expected = store.query(KeyQuery.with_key(key), UNBOUNDED)
            got = store.point_read(key, UNBOUNDED)
            assert got is not None, key
            position, value, ts = got
            assert position == expected.position and position is store.position_of(position.to_json())
            assert value == (None if expected.result is None else tuple(expected.result)), key
            assert value is None or type(value) is tuple  # a plain tuple, equal to the store's namedtuple
            if kind is StoreKind.TIMESTAMPED_KEY_VALUE and value is not None:
                vat = store.query(TimestampedKeyQuery.with_key(key), UNBOUNDED).result
                assert ts == vat.timestamp
        assert store.point_read(1, UNBOUNDED)[1] == ("one", True)  # booleans decoded, as query() decodes them
    finally:
        store.close()


def test_a_point_read_leaves_to_query_what_query_must_say(tmp_path: Path) -> None:
    store = _store(tmp_path)
    met = PositionBound.at(Position.from_map({"t": {0: 4}}))
    ahead = PositionBound.at(Position.from_map({"t": {0: 5}}))
    other_topic = PositionBound.at(Position.from_map({"elsewhere": {0: 10**9}}))  # a topic the store does not read
    assert store.point_read(1, met) is not None
    assert store.point_read(1, other_topic) is not None  # ignored, as query() ignores it
    assert store.point_read(1, ahead) is None
    assert store.query(KeyQuery.with_key(1), ahead).failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert store.point_read("not a number", UNBOUNDED) is None  # the key the store refuses: query() raises
    store._write_lock.acquire()  # a batch being written and no reader open yet: nothing idle, so query() waits
    try:
        assert store._pool.borrow() is None
        assert store.point_read(1, UNBOUNDED) is None
    finally:
        store._write_lock.release()
    store.close()
    assert store.point_read(1, UNBOUNDED) is None
    assert store.query(KeyQuery.with_key(1), UNBOUNDED).failure_reason is FailureReason.STORE_EXCEPTION


def test_a_deleted_file_is_noticed_and_left_to_query(tmp_path: Path) -> None:
    """The file's periodic check runs on the point read too; a file that is gone is query()'s to report."""
    writer = _store(tmp_path)
    writer.close()
    spec = _spec()
    reader = open_partition(spec, 0, tmp_path / "p0.sqlite", read_only=True)
    try:
        reader.query(KeyQuery.with_key(1), UNBOUNDED)  # opens a reader and checks the file
        assert reader.point_read(1, UNBOUNDED) is not None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp_path / 'p0.sqlite'}{suffix}").unlink(missing_ok=True)
        reader._checked_at = -1e9  # the check is due
        assert reader.point_read(1, UNBOUNDED) is None
        failed = reader.query(KeyQuery.with_key(1), UNBOUNDED)
        assert failed.failure_reason is FailureReason.STORE_EXCEPTION and "gone" in failed.failure_message, failed
    finally:
        reader.close()


def _wal_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE t (x)")
    return path


def _pool_with_an_idle_connection(path: Path) -> connections.ReadPool:
    pool = connections.ReadPool(path, max_readers=2)
    with pool.connection():  # opened, then idle
        pass
    return pool


def test_a_borrow_keeps_the_pool_s_counts(tmp_path: Path) -> None:
    pool = _pool_with_an_idle_connection(_wal_file(tmp_path))
    try:
        before = connections.stats()
        got = pool.borrow()
        assert got is not None and pool.borrow() is None  # the one idle connection is out
        assert connections.stats() == before  # still counted as idle while out for one statement
        pool.give_back(*got)
        assert connections.stats() == before
        again = pool.borrow()
        assert again is not None and again[0] is got[0]
        pool.check_replaced()  # the same file: nothing happens to it
        pool.give_back(*again)
        assert connections.stats() == before
    finally:
        pool.close()


def test_a_connection_borrowed_across_a_replaced_file_or_a_closed_pool_is_closed(tmp_path: Path) -> None:
    path = _wal_file(tmp_path)
    for what in ("replaced", "closed"):
        pool = _pool_with_an_idle_connection(path)
        base = connections.stats()
        got = pool.borrow()
        assert got is not None
        if what == "replaced":
            path.rename(tmp_path / "old.sqlite")
            _wal_file(tmp_path)  # a new file (a new inode) under the same name
            pool.check_replaced()
        else:
            pool.close()
        pool.give_back(*got)
        with pytest.raises(sqlite3.ProgrammingError):  # closed, not kept for the new file
            got[0].execute("SELECT 1")
        now = connections.stats()
        assert now["read_connections"] == base["read_connections"] - 1, what
        assert now["idle_read_connections"] == base["idle_read_connections"] - 1, what
        pool.close()
        (tmp_path / "old.sqlite").unlink(missing_ok=True)


def test_a_connection_given_back_after_its_pool_was_evicted_is_listed_again(tmp_path: Path) -> None:
    pool = _pool_with_an_idle_connection(_wal_file(tmp_path))
    try:
        got = pool.borrow()
        assert got is not None
        with connections._lock:
            connections._lru.pop(id(pool), None)  # what _drop_idle does when the pool's idle list is empty
        pool.give_back(*got)
        assert id(pool) in connections._lru  # so the budget can close it later
    finally:
        pool.close()


def test_partition_for_long_is_kafka_s_partitioner() -> None:
    rng = random.Random(14)
    keys = [0, 1, -1, 7919, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)] + [rng.randrange(-(2**63), 2**63)
                                                                         for _ in range(20_000)]
    for n in (1, 2, 3, 4, 12, 100):
        assert [partition_for_long(k, n) for k in keys] == [partition_for_key(k, n, SqlType.BIGINT) for k in keys]


def _app(tmp_path: Path) -> StreamsApp:
    return StreamsApp(StoreTopology([_spec(partitions=4)]), "pr", tmp_path / "state",
                      coordination_base=tmp_path / "coord", synchronous="NORMAL")


def test_the_sources_point_read_raises_what_query_raises(tmp_path: Path) -> None:
    app = _app(tmp_path)
    request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1))
    with pytest.raises(StreamsNotStartedException):
        app.query(request)
    with pytest.raises(StreamsNotStartedException):
        app.point_read("s", 0, 1, UNBOUNDED)
    app.start()
    try:
        app.writer("s").write_batch(0, [Change(k, (f"n{k}", k % 2 == 0)) for k in range(50)],
                                    Position.from_map({"t": {0: 49}}))
        with pytest.raises(UnknownStateStoreException):
            app.point_read("nowhere", 0, 1, UNBOUNDED)
        for k in range(50):
            p = partition_for_key(k, 4, SqlType.BIGINT)
            answer = app.query(request.with_partitions({p}).with_query(KeyQuery.with_key(k))).partition_results[p]
            got = app.point_read("s", p, k, UNBOUNDED)
            assert got is not None and got[0] == answer.position and got[1] == tuple(answer.result), k
        assert app.point_read("s", 4, 1, UNBOUNDED) is None  # no such partition: query() says DOES_NOT_EXIST
        reader = StateDirReader(tmp_path / "state")
        try:
            for k in range(50):
                p = partition_for_key(k, 4, SqlType.BIGINT)
                reader.query(request.with_partitions({p}))  # opens the partition's file
                got = reader.point_read("s", p, k, UNBOUNDED)
                assert got is not None and got[1] == (f"n{k}", k % 2 == 0), k
            assert reader.point_read("s", -1, 1, UNBOUNDED) is None
            with pytest.raises(UnknownStateStoreException):
                reader.point_read("nowhere", 0, 1, UNBOUNDED)
        finally:
            reader.close()
    finally:
        app.close()
    with pytest.raises(StreamsStoppedException):
        app.query(request)
    with pytest.raises(StreamsStoppedException):
        app.point_read("s", 0, 1, UNBOUNDED)


def test_a_write_into_immutable_files_is_refused_before_sqlite_touches_them(tmp_path: Path) -> None:
    """A commit into files made immutable under a running writer wrote the WAL index through its mapping and
    died of SIGBUS (the whole process: a CI rehearsal, 2026-12-01). The write is refused first, as a fault."""
    from stores.pipeline.faults import fault_reason

    store = _store(tmp_path)
    try:
        store.query(KeyQuery.with_key(1), UNBOUNDED)
        why = chattr("+i", tmp_path)
        if why is not None:
            pytest.skip(f"cannot make files immutable here: {why}")
        try:
            with pytest.raises(PermissionError) as info:
                PartitionedWriter(_spec(), {0: store}).write_batch(1, [Change(1, ("uno", False))],
                                                                    Position.from_map({"t": {0: 9}}))
            assert "cannot be written" in str(info.value)
            assert fault_reason(info.value).startswith("permission denied")  # ingest pauses and retries
            with pytest.raises(PermissionError):
                store.reset()
            assert store.query(KeyQuery.with_key(1), UNBOUNDED).result == ("one", True)  # reads go on
        finally:
            assert chattr("-i", tmp_path) is None
        PartitionedWriter(_spec(), {0: store}).write_batch(1, [Change(1, ("uno", False))],
                                                            Position.from_map({"t": {0: 9}}))
        assert store.query(KeyQuery.with_key(1), UNBOUNDED).result == ("uno", False)
    finally:
        chattr("-i", tmp_path)
        store.close()
