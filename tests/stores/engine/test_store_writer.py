"""Batch writes: validation before any write, idempotence by batch id, versioned history, retention."""

from __future__ import annotations

from typing import Any

import pytest

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import BatchError
from stores.engine.change import Change
from stores.iqv2.errors import IllegalStateException, UnknownStateStoreException
from stores.iqv2.position import Position
from stores.iqv2.query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    TimestampedKeyQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from tests.stores.iqv2_fixture import spec_for

P = Position.from_map


def rows(app: Any, name: str, q: Any = None) -> list[Any]:
    res = app.query(StateQueryRequest.in_store(name).with_query(q or RangeQuery.with_no_bounds()))
    return [kv for p in sorted(res.partition_results) for kv in res.partition_results[p].result]


def test_batch_is_idempotent_by_batch_id(make_app: Any) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, "kv", partitions=3)
    app = make_app([spec])
    w = app.writer("kv")
    assert w.last_batch_id() is None
    w.write_batch(5, [Change(k, (k,)) for k in range(20)], P({"t": {0: 10}}))
    w.write_batch(5, [Change(k, (-1,)) for k in range(20)], P({"t": {0: 99}}))   # replay: skipped
    w.write_batch(4, [Change(0, (-1,))], P({"t": {0: 99}}))                       # older: skipped
    assert sorted(kv.key for kv in rows(app, "kv")) == list(range(20))
    assert all(kv.value == (kv.key,) for kv in rows(app, "kv"))
    assert app.positions()["kv"] == P({"t": {0: 10}})
    assert w.last_batch_id() == 5
    w.write_batch(6, [Change(3, None)], P({"t": {0: 11}}))
    assert 3 not in {kv.key for kv in rows(app, "kv")}
    assert app.positions()["kv"] == P({"t": {0: 11}})


def test_every_partition_gets_the_position_and_it_never_goes_back(make_app: Any) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, "kv", partitions=4)
    app = make_app([spec])
    w = app.writer("kv")
    w.write_batch(1, [Change(1, (1,))], P({"t": {0: 10, 1: 4}}))
    w.write_batch(2, [], P({"t": {0: 8, 2: 1}}))
    for p in range(4):
        assert app.partition_store("kv", p).current_position() == P({"t": {0: 10, 1: 4, 2: 1}})


def test_keys_go_to_the_murmur2_partition(make_app: Any) -> None:
    from stores.catalog.partitioner import partition_for_key

    spec = StoreSpec("s", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR), (Column("v", SqlType.BIGINT),),
                     partitions=4)
    app = make_app([spec])
    app.writer("s").write_batch(0, [Change(f"c{i}", (i,)) for i in range(40)], P({"t": {0: 0}}))
    res = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
    for p, r in res.partition_results.items():
        for kv in r.result:
            assert partition_for_key(kv.key, 4) == p


@pytest.mark.parametrize("bad,match", [
    (Change("x", (1,)), "change #1: key column 'k'"),
    (Change(2, (1, 2)), "change #1: value has 2 column"),
    (Change(2, ("nope",)), "change #1: value column 'v'"),
    (Change(2, {"w": 1}), "unknown value column"),
    (Change(2, 5), "value must be a tuple"),
    ("junk", "change #1: expected a Change"),
    (Change(2, (1,), "yesterday"), "timestamp must be epoch milliseconds"),
])
def test_a_bad_change_rejects_the_whole_batch(make_app: Any, bad: Any, match: str) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, "kv", partitions=2)
    app = make_app([spec])
    w = app.writer("kv")
    w.write_batch(1, [Change(k, (k,)) for k in range(6)], P({"t": {0: 1}}))
    before = rows(app, "kv")
    with pytest.raises(BatchError, match=match) as ei:
        w.write_batch(2, [Change(0, (100,)), bad, Change(5, (500,))], P({"t": {0: 2}}))
    assert "store 'kv' batch 2" in str(ei.value)
    assert rows(app, "kv") == before
    assert app.positions()["kv"] == P({"t": {0: 1}})
    assert w.last_batch_id() == 1


def test_not_null_value_columns(make_app: Any) -> None:
    spec = StoreSpec("nn", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT),
                     (Column("v", SqlType.BIGINT, nullable=False),), partitions=1)
    app = make_app([spec])
    with pytest.raises(BatchError, match="NOT NULL"):
        app.writer("nn").write_batch(0, [Change(1, (None,))], P({"t": {0: 0}}))


def test_bad_batch_arguments(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.KEY_VALUE, "kv")])
    w = app.writer("kv")
    with pytest.raises(BatchError, match="batch_id"):
        w.write_batch(-1, [], P({}))
    with pytest.raises(BatchError, match="position"):
        w.write_batch(1, [], "offsets")  # type: ignore[arg-type]
    w.write_batch(1, [Change(1, (1,))], {"t": {"0": 3}})  # a JSON-style mapping is accepted
    assert app.positions()["kv"] == P({"t": {0: 3}})


def test_writer_needs_a_started_app_and_a_known_store(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.KEY_VALUE, "kv")], start=False)
    with pytest.raises(IllegalStateException, match="start"):
        app.writer("kv")
    with pytest.raises(UnknownStateStoreException):
        app.writer("nope")
    app.start()
    w = app.writer("kv")
    assert app.close(timeout_s=10)
    with pytest.raises(IllegalStateException, match="NOT_RUNNING"):
        w.write_batch(1, [Change(1, (1,))], P({"t": {0: 1}}))


@pytest.mark.parametrize("kind,change,match", [
    (StoreKind.TIMESTAMPED_KEY_VALUE, Change(1, (1,)), "needs the record timestamp"),
    (StoreKind.VERSIONED, Change(1, (1,)), "needs the version timestamp"),
    (StoreKind.VERSIONED, Change(1, None), "needs the version timestamp"),
    (StoreKind.WINDOW, Change(1, (1,), 5), "window_start is required"),
    (StoreKind.SESSION, Change(1, (1,), 5, 0), "window_end is required"),
    (StoreKind.SESSION, Change(1, (1,), 5, 10, 9), "before window_start"),
])
def test_kind_specific_requirements(make_app: Any, kind: StoreKind, change: Change, match: str) -> None:
    spec = spec_for(kind, "s")
    app = make_app([spec])
    with pytest.raises(BatchError, match=match):
        app.writer("s").write_batch(1, [change], P({"t": {0: 1}}))


def test_window_end_defaults_to_start_plus_size(make_app: Any) -> None:
    spec = spec_for(StoreKind.WINDOW, "w", partitions=1)
    app = make_app([spec])
    app.writer("w").write_batch(1, [Change(1, (7,), None, 600_000)], P({"t": {0: 1}}))
    (kv,) = rows(app, "w", WindowRangeQuery.with_window_start_range(0, 10**9))
    assert kv.key.window == (600_000, 900_000)
    app.writer("w").write_batch(2, [Change(1, None, None, 600_000, 900_000)], P({"t": {0: 2}}))
    assert rows(app, "w", WindowRangeQuery.with_window_start_range(0, 10**9)) == []


def _versions(app: Any, key: int = 1) -> list[tuple[Any, int, Any]]:
    q = MultiVersionedKeyQuery.with_key(key).with_ascending_timestamps()
    return [(r.value[0], r.timestamp, r.valid_to) for r in rows(app, "v", q)]


def test_versioned_out_of_order_inserts_split_validity(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.VERSIONED, "v", partitions=1)])
    w = app.writer("v")
    w.write_batch(1, [Change(1, (30,), 30), Change(1, (10,), 10)], P({"t": {0: 1}}))
    assert _versions(app) == [(10, 10, 30), (30, 30, None)]
    w.write_batch(2, [Change(1, (20,), 20), Change(1, (5,), 5), Change(1, (40,), 40)], P({"t": {0: 2}}))
    assert _versions(app) == [(5, 5, 10), (10, 10, 20), (20, 20, 30), (30, 30, 40), (40, 40, None)]
    w.write_batch(3, [Change(1, (21,), 20)], P({"t": {0: 3}}))  # same timestamp: replaces that version
    assert _versions(app)[2] == (21, 20, 30)


def test_versioned_tombstones(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.VERSIONED, "v", partitions=1)])
    w = app.writer("v")
    w.write_batch(1, [Change(1, (10,), 10), Change(1, None, 20), Change(1, (30,), 30)], P({"t": {0: 1}}))
    assert _versions(app) == [(10, 10, 20), (30, 30, None)]  # the tombstone ends validity and is skipped

    def at(t: int) -> Any:
        res = app.query(StateQueryRequest.in_store("v").with_query(VersionedKeyQuery.with_key(1).as_of(t)))
        return res.partition_results[0].result

    assert at(15).value == (10,) and at(15).valid_to == 20
    assert at(25) is None  # deleted at 20
    assert at(35).value == (30,)
    w.write_batch(2, [Change(1, None, 40)], P({"t": {0: 2}}))
    latest = app.query(StateQueryRequest.in_store("v").with_query(VersionedKeyQuery.with_key(1)))
    assert latest.partition_results[0].result is None


def test_versioned_retention_drops_old_history_but_keeps_the_latest(make_app: Any) -> None:
    spec = spec_for(StoreKind.VERSIONED, "v", partitions=1, history_retention_ms=100)
    app = make_app([spec])
    w = app.writer("v")
    w.write_batch(1, [Change(1, (1,), 0), Change(1, (2,), 50), Change(2, (7,), 10)], P({"t": {0: 1}}))
    w.write_batch(2, [Change(1, (3,), 500)], P({"t": {0: 2}}))  # observed time 500: history ended before 400 goes
    assert _versions(app, 1) == [(2, 50, 500), (3, 500, None)]  # [50, 500) still overlaps the retained history
    assert _versions(app, 2) == [(7, 10, None)]  # the latest version of a key is always kept
    assert app.partition_store("v", 0).meta()["observed_ts"] == 500


def test_kv_queries_on_versioned_store_are_unknown(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.VERSIONED, "v", partitions=1)])
    app.writer("v").write_batch(1, [Change(1, (1,), 0)], P({"t": {0: 1}}))
    for q in (KeyQuery.with_key(1), RangeQuery.with_no_bounds()):
        r = app.query(StateQueryRequest.in_store("v").with_query(q)).partition_results[0]
        assert r.failure_reason.name == "UNKNOWN_QUERY_TYPE"


_KEY_ONLY_QUERIES = {
    StoreKind.KEY_VALUE: KeyQuery.with_key(1),
    StoreKind.TIMESTAMPED_KEY_VALUE: TimestampedKeyQuery.with_key(1),
    StoreKind.WINDOW: WindowKeyQuery.with_key_and_window_start_range(1, 0, 10),
    StoreKind.SESSION: WindowRangeQuery.with_key(1),
    StoreKind.VERSIONED: VersionedKeyQuery.with_key(1),
}


@pytest.mark.parametrize("kind", list(StoreKind), ids=lambda k: k.value)
def test_store_without_value_columns_writes_and_answers(make_app, kind: StoreKind) -> None:
    """A store of keys only (e.g. a set of customers seen) is valid: the engine's SQL must not assume values."""
    spec = StoreSpec("keys_only", kind, Column("k", SqlType.BIGINT), (), partitions=2,
                     source_topics=("t",), window_size_ms=60_000)
    app = make_app([spec])
    app.writer("keys_only").write_batch(0, [Change(1, (), 5, 0, 60_000)], Position.from_map({"t": {0: 0}}))
    res = app.query(StateQueryRequest.in_store("keys_only").with_query(_KEY_ONLY_QUERIES[kind]))
    assert all(r.is_success for r in res.partition_results.values()), res
    answers = [r.result for r in res.partition_results.values()]
    found = [a for a in answers if a is not None and (not hasattr(a, "remaining") or len(a))]
    assert len(found) == 1, answers


def _table(**cols: Any) -> Any:
    import pyarrow as pa

    return pa.table({k: v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v) for k, v in cols.items()})


def _bad_tables() -> list[Any]:
    import pyarrow as pa

    return [
        (lambda: _table(k=["x", "y"], v0=[1, 2]), r"batch 2: key column 'k': an Arrow string column cannot hold BIGINT"),
        (lambda: _table(k=pa.array([1, 2**64 - 1], pa.uint64()), v0=[1, 2]),
         r"change #1: key column 'k': 18446744073709551615 is out of range for BIGINT"),
        (lambda: _table(k=[1, 2], v0=[1.0, 2.5]), r"change #1: value column 'v': 2.5 cannot be converted to BIGINT"),
        (lambda: _table(k=[1, None], v0=[1, 2]), r"change #1: key column 'k': the key should not be null"),
        (lambda: _table(k=[1], v0=[1], extra=[1]), r"unknown column\(s\) \['extra'\]"),
        (lambda: _table(k=[1]), r"lacks value column\(s\) \['v0'\]"),
        (lambda: _table(k=[1], v0=[1], ts=["noon"]), r"timestamp must be epoch milliseconds"),
        (lambda: _table(k=[1], v0=[1], **{"del": [1]}), r"column 'del' must be boolean"),
        (lambda: _table(v0=[1]), r"has no key column 'k'"),
        (lambda: [Change(1, (1,))], r"expected a pyarrow.Table"),
    ]


@pytest.mark.parametrize("make,match", _bad_tables())
def test_a_bad_change_table_rejects_the_whole_batch(make_app: Any, make: Any, match: str) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, "kv", partitions=2)
    app = make_app([spec])
    w = app.writer("kv")
    w.write_table(1, _table(k=list(range(6)), v0=list(range(6))), P({"t": {0: 1}}))
    before = rows(app, "kv")
    with pytest.raises(BatchError, match=match) as ei:
        w.write_table(2, make(), P({"t": {0: 2}}))
    assert "store 'kv' batch 2" in str(ei.value)
    assert rows(app, "kv") == before and app.positions()["kv"] == P({"t": {0: 1}}) and w.last_batch_id() == 1


def test_bad_keys_and_values_no_arrow_column_can_hold(make_app: Any) -> None:
    spec = StoreSpec("d", StoreKind.KEY_VALUE, Column("k", SqlType.DOUBLE), (Column("v", SqlType.BIGINT),),
                     partitions=2)
    app = make_app([spec])
    w = app.writer("d")
    with pytest.raises(BatchError, match=r"change #1 \(key nan\): key column 'k': NaN is not a key"):
        w.write_table(0, _table(k=[1.0, float("nan")], v0=[1, 2]), P({"t": {0: 0}}))
    with pytest.raises(BatchError, match=r"change #2: value column 'v': 36893488147419103232 cannot be stored"):
        w.write_batch(0, [Change(1.0, (1,)), Change(2.0, (2,)), Change(3.0, (2**65,))], P({"t": {0: 0}}))
    with pytest.raises(BatchError, match=r"change #0 \(key nan\): key column 'k': NaN is not a key"):
        w.write_batch(0, [Change(float("nan"), (1,))], P({"t": {0: 0}}))
    assert w.last_batch_id() is None and rows(app, "d") == []


def test_timestamps_dates_and_booleans_arrive_in_arrow_types(make_app: Any) -> None:
    """Spark hands the sink timestamps (any unit, floored to ms like to_epoch_ms), dates and bools."""
    import datetime as dt

    import pyarrow as pa

    spec = StoreSpec("typed", StoreKind.KEY_VALUE, Column("k", SqlType.TIMESTAMP),
                     (Column("day", SqlType.DATE), Column("on", SqlType.BOOLEAN), Column("at", SqlType.TIMESTAMP)),
                     partitions=3)
    app = make_app([spec])
    before_epoch = dt.datetime(1969, 12, 31, 23, 59, 59, 999_500)  # -0.5 ms: floors to -1
    app.writer("typed").write_table(0, _table(
        k=pa.array([dt.datetime(2024, 2, 29, 12, 0, 0, 1500), before_epoch], pa.timestamp("us", tz="UTC")),
        v0=pa.array([dt.date(2024, 2, 29), None], pa.date32()), v1=[True, False],
        v2=pa.array([1_700_000_000, 0], pa.timestamp("s"))), P({"t": {0: 0}}))
    got = sorted((kv.key, tuple(kv.value)) for kv in rows(app, "typed"))
    assert got == [(-1, (None, False, 0)), (1_709_208_000_001, (19_782, True, 1_700_000_000_000))]
    from stores.catalog.partitioner import partition_for_key

    res = app.query(StateQueryRequest.in_store("typed").with_query(RangeQuery.with_no_bounds()))
    for p, r in res.partition_results.items():
        assert all(partition_for_key(kv.key, 3, SqlType.TIMESTAMP) == p for kv in r.result)
