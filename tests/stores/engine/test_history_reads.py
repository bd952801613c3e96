"""As-of reads (``snapshot``) beyond the differential tests: behind, bounds, the connections they use, reads
racing writes, a stream that outlives pruning, and the request field through StreamsApp and StateDirReader."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stores.app.reader import StateDirReader
from stores.app.streams import StreamsApp
from stores.catalog.schema import StoreKind
from stores.engine import open_partition
from stores.engine.arrow_reads import ArrowQuery
from stores.engine.base import PartitionStore
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason
from tests.stores.engine.history_cases import KINDS, UNBOUNDED, plain, queries, spec_of


def at(offset: int, p1: int | None = None) -> Position:
    return Position.from_map({"t": {0: offset} if p1 is None else {0: offset, 1: p1}})


def _state(i: int) -> dict[int, tuple[int, str]]:
    """What batch ``i`` of ``_write`` leaves: every key set to the batch, a third of them deleted."""
    return {k: (i, f"b{i}") for k in range(20) if (k + i) % 3}


def _write(store: PartitionStore, i: int) -> None:
    store.apply_batch(i, [Change(k, v) for k, v in _state(i).items()] +
                      [Change(k, None) for k in range(20) if k not in _state(i)], at(10 * i))


@pytest.mark.parametrize("kind", KINDS)
def test_a_snapshot_the_partition_has_not_reached_is_not_up_to_bound(tmp_path: Path, kind: StoreKind) -> None:
    store = open_partition(spec_of(kind), 0, tmp_path / "p.db", synchronous="OFF")
    try:
        store.apply_batch(0, [], at(5, 2))
        for snap in (at(6), at(5, 3), Position.from_map({"t": {2: 1}}), Position.from_map({"t": {0: 9, 1: 1}})):
            for name, q in queries(kind)[:2] + queries(kind)[-1:]:
                r = store.query(q, UNBOUNDED, snapshot=snap)
                assert r.failure_reason is FailureReason.NOT_UP_TO_BOUND and r.failure_reason.retryable, name
                assert r.position == at(5, 2) and f"not yet up to the snapshot {snap}" in r.failure_message
        assert store.query(queries(kind)[0][1], UNBOUNDED, snapshot=Position.from_map({"u": {0: 99}})).is_success
    finally:
        store.close()


def test_the_bound_applies_to_the_state_read(tmp_path: Path) -> None:
    store = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF")
    try:
        for i in (1, 2, 3):
            _write(store, i)
        r = store.query(KeyQuery.with_key(2), PositionBound.at(at(20)), snapshot=at(20), execution_info=True)
        assert r.is_success and r.result == (2, "b2") and r.position == at(20) and r.execution_info
        r = store.query(KeyQuery.with_key(1), PositionBound.at(at(25)), snapshot=at(20))
        assert r.failure_reason is FailureReason.NOT_UP_TO_BOUND and r.position == at(20)
    finally:
        store.close()


def _temp_objects(c: sqlite3.Connection) -> list[str]:
    return [n for (n,) in c.execute("SELECT name FROM sqlite_temp_master WHERE type IN ('view', 'table')")
            if n != "batch_rows"]  # the writer's staging table


@pytest.mark.parametrize("read_only", [False, True])
def test_ordinary_connections_never_see_the_as_of_views(tmp_path: Path, read_only: bool) -> None:
    writer = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF")
    store = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", read_only=True) if read_only else writer
    try:
        for i in (1, 2, 3):
            _write(writer, i)
        for q in (RangeQuery.with_no_bounds(), KeyQuery.with_key(1), ArrowQuery(RangeQuery.with_no_bounds())):
            r = store.query(q, UNBOUNDED, snapshot=at(10))
            assert r.position == at(10) and plain(r.result)
            now = store.query(q, UNBOUNDED)  # right after, on the ordinary connections: the current state
            assert now.position == at(30)
            got = plain(now.result)
            if type(q) is KeyQuery:
                assert got == (3, "b3")
            elif type(q) is ArrowQuery:
                assert got == [{"k": k, "n": v[0], "s": v[1]} for k, v in _state(3).items()]
            else:
                assert [(kv.key, kv.value) for kv in got] == list(_state(3).items())
        pools = [c for c in store._pool._idle] + ([writer._wconn] if writer._wconn is not None else [])
        assert pools and all(_temp_objects(c) == [] for c in pools)
        assert store._asof is not None and all(_temp_objects(c) for c in store._asof._idle)
    finally:
        if store is not writer:
            store.close()
        writer.close()


def test_an_as_of_stream_keeps_its_state_while_batches_prune_it(tmp_path: Path) -> None:
    store = open_partition(spec_of(StoreKind.KEY_VALUE, history_batches=2), 0, tmp_path / "p.db", synchronous="OFF")
    try:
        for i in (1, 2, 3):
            _write(store, i)
        rows = store.query(ArrowQuery(RangeQuery.with_no_bounds(), batch_rows=2), UNBOUNDED, snapshot=at(10)).result
        batches = rows.batches()
        first = next(batches).to_pylist()
        for i in range(4, 9):  # the state at 10 is pruned from the file meanwhile
            _write(store, i)
        assert store.query(KeyQuery.with_key(1), UNBOUNDED,
                           snapshot=at(10)).failure_reason is FailureReason.POSITION_NOT_KEPT
        got = first + [row for b in batches for row in b.to_pylist()]
        assert [(r["k"], (r["n"], r["s"])) for r in got] == list(_state(1).items())
    finally:
        store.close()


def test_as_of_reads_racing_writes_never_see_a_mixed_state(tmp_path: Path) -> None:
    writer = open_partition(spec_of(StoreKind.KEY_VALUE, history_batches=4), 0, tmp_path / "p.db", synchronous="OFF")
    _write(writer, 1)
    reader = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", read_only=True)
    done = threading.Event()
    errors: list[BaseException] = []
    counts = {"read": 0, "not kept": 0}
    deadline = time.monotonic() + 20

    def write() -> None:
        try:
            for i in range(2, 61):
                _write(writer, i)
                time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            done.set()

    def read(store: PartitionStore, seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set() and time.monotonic() < deadline:
                snap = rng.choice(store.kept_positions())
                i = snap.offset("t", 0) // 10
                q = rng.choice((RangeQuery.with_no_bounds(), ArrowQuery(RangeQuery.with_no_bounds(), batch_rows=7),
                                KeyQuery.with_key(rng.randrange(20))))
                r = store.query(q, UNBOUNDED, snapshot=snap)
                if r.is_failure:
                    assert r.failure_reason is FailureReason.POSITION_NOT_KEPT, r  # pruned since kept_positions
                    counts["not kept"] += 1
                    continue
                assert r.position == snap
                got = plain(r.result)
                if type(q) is KeyQuery:
                    assert got == _state(i).get(q.key), (snap, q, got)
                elif type(q) is ArrowQuery:
                    assert [(x["k"], (x["n"], x["s"])) for x in got] == list(_state(i).items()), snap
                else:
                    assert [(kv.key, kv.value) for kv in got] == list(_state(i).items()), snap
                counts["read"] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read, args=(s, n))
                                                   for n, s in enumerate((writer, writer, reader, reader))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[0]
        assert counts["read"] > 20, counts
    finally:
        reader.close()
        writer.close()


def test_streams_app_and_state_dir_reader_read_as_of_a_snapshot(make_app: Callable[..., StreamsApp]) -> None:
    spec = spec_of(StoreKind.KEY_VALUE, "orders", partitions=2)
    app = make_app([spec])
    w = app.writer("orders")
    for i in range(1, 5):
        w.write_batch(i, [Change(k, (i, f"b{i}")) for k in range(8)], at(10 * i, 5 * i))
    reader = StateDirReader(app.state_dir)
    try:
        for source in (app, reader):
            kept = source.kept_positions("orders")
            assert kept == {p: [at(10 * i, 5 * i) for i in (4, 3, 2, 1)] for p in (0, 1)}
            req = StateQueryRequest.in_store("orders").with_query(RangeQuery.with_no_bounds()).with_snapshot(at(20, 10))
            res = source.query(req)
            assert res.position == at(20, 10) and {p: r.position for p, r in res.partition_results.items()} == {
                0: at(20, 10), 1: at(20, 10)}
            assert sorted((kv.key, kv.value) for r in res.partition_results.values() for kv in r.result) == [
                (k, (2, "b2")) for k in range(8)]
            res = source.query(req.with_snapshot(at(15, 7)))
            assert {r.failure_reason for r in res.partition_results.values()} == {FailureReason.POSITION_NOT_KEPT}
            res = source.query(req.with_snapshot(at(50, 10)).with_partitions({1}))
            assert res.partition_results[1].failure_reason is FailureReason.NOT_UP_TO_BOUND
    finally:
        reader.close()


def test_the_request_carries_its_snapshot() -> None:
    snap = at(3)
    r = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1)).with_snapshot(snap)
    assert r.snapshot is snap and r == StateQueryRequest("s", KeyQuery.with_key(1), snapshot=snap)
    r2 = r.with_partitions({1}).with_position_bound(PositionBound.at(snap)).with_query(KeyQuery.with_key(2))
    assert r2.snapshot is snap and r2.require_active().enable_execution_info().with_all_partitions().snapshot is snap
    assert repr(r).endswith(f"executionInfo=False, snapshot={snap}}}")
    plain_request = r.with_snapshot(None)
    assert plain_request.snapshot is None and "snapshot" not in repr(plain_request)
    assert plain_request == StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1))
    with pytest.raises(TypeError, match="snapshot must be a Position"):
        r.with_snapshot({"t": {0: 1}})  # type: ignore[arg-type]
    assert FailureReason.POSITION_NOT_KEPT.retryable and str(FailureReason.POSITION_NOT_KEPT) == "POSITION_NOT_KEPT"

