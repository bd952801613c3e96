"""Kafka's IQv2 acceptance tables (reference §5.2-5.7), ported over every store kind.

One contract table says which query each kind answers; the value tables are
Kafka's, with the fixture written straight into the stores (conftest).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from stores.catalog.schema import StoreKind
from stores.engine.change import Change
from stores.iqv2.errors import (
    StreamsNotStartedException,
    StreamsStoppedException,
    UnknownStateStoreException,
)
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    MultiVersionedRangeQuery,
    Query,
    RangeQuery,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason
from stores.iqv2.state import State
from stores.iqv2.values import (
    KeyValue,
    TimeWindow,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)
from tests.stores.iqv2_fixture import (
    INPUT_POSITION,
    MIN,
    TOPIC,
    WS,
    spec_for,
    write_fixture,
)

UNKNOWN_RE = re.compile(
    r"This store \(.*\) doesn't know how to execute the given query \(.*\)\."
    r" Contact the store maintainer if you need support for a new query type\."
)


class UnknownQuery(Query[Any]):
    """A query no store knows (Kafka's test ``UnknownQuery``)."""

    def __repr__(self) -> str:
        return "UnknownQuery"


def request(name: str, query: Query[Any]) -> StateQueryRequest:
    return (StateQueryRequest.in_store(name).with_query(query).with_partitions({0, 1})
            .with_position_bound(PositionBound.at(INPUT_POSITION)))


# -- the contract: which kind answers which query (reference §1.7) ------------------------------
QUERIES: dict[str, Query[Any]] = {
    "key": KeyQuery.with_key(1),
    "range": RangeQuery.with_no_bounds(),
    "ts_key": TimestampedKeyQuery.with_key(1),
    "ts_range": TimestampedRangeQuery.with_no_bounds(),
    "window_key": WindowKeyQuery.with_key_and_window_start_range(1, WS, WS),
    "window_range_by_key": WindowRangeQuery.with_key(1),
    "window_range_by_start": WindowRangeQuery.with_window_start_range(WS, WS),
    "versioned_key": VersionedKeyQuery.with_key(1),
    "multi_versioned_key": MultiVersionedKeyQuery.with_key(1),
    "multi_versioned_range": MultiVersionedRangeQuery.with_no_key_bounds(),
    "unknown": UnknownQuery(),
}
ANSWERS = {
    StoreKind.KEY_VALUE: {"key", "range"},
    StoreKind.TIMESTAMPED_KEY_VALUE: {"key", "range", "ts_key", "ts_range"},
    StoreKind.WINDOW: {"window_key", "window_range_by_start"},
    StoreKind.SESSION: {"window_range_by_key"},
    StoreKind.VERSIONED: {"versioned_key", "multi_versioned_key", "multi_versioned_range"},
}
SPECIAL_MESSAGES = {
    (StoreKind.WINDOW, "window_range_by_key"): "because WindowStores only supports WindowRangeQuery.withWindowStartRange.",
    (StoreKind.SESSION, "window_range_by_start"): "because SessionStores only support WindowRangeQuery.withKey.",
}


@pytest.mark.parametrize("kind", list(StoreKind), ids=lambda k: k.value)
def test_contract_every_kind_answers_exactly_its_queries(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    for qname, q in QUERIES.items():
        res = app.query(request(name, q).enable_execution_info())
        assert set(res.partition_results) == {0, 1}
        for p, r in res.partition_results.items():
            assert r.position == INPUT_POSITION, (qname, p)
            assert r.execution_info and f"partition {p}" in r.execution_info[0], (qname, p)
            if qname in ANSWERS[kind]:
                assert r.is_success, (qname, p, r)
            else:
                assert r.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE, (qname, p, r)
                special = SPECIAL_MESSAGES.get((kind, qname))
                if special:
                    assert special in r.failure_message
                    assert r.failure_message.endswith(
                        "Contact the store maintainer if you need support for a new query type.")
                else:
                    assert UNKNOWN_RE.fullmatch(r.failure_message), r.failure_message


# -- §5.2 common cases ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(StoreKind), ids=lambda k: k.value)
def test_unknown_query_without_execution_info(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    res = app.query(StateQueryRequest.in_store(name).with_query(UnknownQuery()))
    assert set(res.partition_results) == {0, 1}
    for r in res.partition_results.values():
        assert r.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
        assert UNKNOWN_RE.fullmatch(r.failure_message)
        assert r.execution_info == ()
        with pytest.raises(ValueError, match="Cannot get result for failed query"):
            _ = r.result


@pytest.mark.parametrize("kind", [StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE])
def test_key_query_with_execution_info(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    res = app.query(request(name, KeyQuery.with_key(1)).enable_execution_info())
    p0 = res.partition_results[0]
    assert p0.is_success and p0.result is None
    assert all(r.execution_info for r in res.partition_results.values())
    assert re.fullmatch(r"Handled in \w+ \(store \w+, partition 0\) in \d+ns", p0.execution_info[0])


# -- §5.3 key-value stores ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE])
def test_key_query(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    only = app.query(request(name, KeyQuery.with_key(2))).only_partition_result()
    assert only.result == (5,)
    assert only.result.v == 5
    assert only.position == INPUT_POSITION
    assert only.execution_info == ()
    with pytest.raises(ValueError):
        _ = only.failure_reason
    with pytest.raises(ValueError):
        _ = only.failure_message


def test_timestamped_key_query(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.TIMESTAMPED_KEY_VALUE)
    only = app.query(request(name, TimestampedKeyQuery.with_key(2))).only_partition_result()
    assert only.result == ValueAndTimestamp((5,), WS + 10 * MIN)
    assert only.position == INPUT_POSITION


def test_timestamped_queries_unsupported_on_plain_kv(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    for q in (TimestampedKeyQuery.with_key(2), TimestampedRangeQuery.with_no_bounds()):
        res = app.query(request(name, q))
        assert {r.failure_reason for r in res.partition_results.values()} == {FailureReason.UNKNOWN_QUERY_TYPE}


RANGE_CASES = [  # (lower, upper, ascending/any expected, descending expected)
    (0, 4, [1, 5, 9, 3, 7], [9, 5, 1, 7, 3]),
    (1, 3, [5, 3, 7], [5, 7, 3]),
    (3, None, [9, 7], [9, 7]),
    (None, 3, [1, 5, 3, 7], [5, 1, 7, 3]),
    (None, None, [1, 5, 9, 3, 7], [9, 5, 1, 7, 3]),
]


def _range_query(cls: type, lo: Any, hi: Any) -> Any:
    if lo is not None and hi is not None:
        return cls.with_range(lo, hi)
    if lo is not None:
        return cls.with_lower_bound(lo)
    if hi is not None:
        return cls.with_upper_bound(hi)
    return cls.with_no_bounds()


def _values_by_partition(res: Any, timestamped: bool) -> list[Any]:
    out = []
    for p in sorted(res.partition_results):  # concatenated by partition, ascending (as Kafka's test)
        for kv in res.partition_results[p].result:
            out.append(kv.value if not timestamped else kv.value)
    return out


@pytest.mark.parametrize("kind", [StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE])
@pytest.mark.parametrize("lo,hi,asc,desc", RANGE_CASES)
@pytest.mark.parametrize("descending", [False, True])
def test_range_query(fixture_app: Any, kind: StoreKind, lo: Any, hi: Any, asc: list[int], desc: list[int],
                     descending: bool) -> None:
    app, name = fixture_app(kind)
    q = _range_query(RangeQuery, lo, hi)
    if descending:
        q = q.with_descending_keys()
    res = app.query(request(name, q))
    assert _values_by_partition(res, False) == [(v,) for v in (desc if descending else asc)]
    assert res.position == INPUT_POSITION


@pytest.mark.parametrize("lo,hi,asc,desc", RANGE_CASES)
@pytest.mark.parametrize("descending", [False, True])
def test_timestamped_range_query(fixture_app: Any, lo: Any, hi: Any, asc: list[int], desc: list[int],
                                 descending: bool) -> None:
    app, name = fixture_app(StoreKind.TIMESTAMPED_KEY_VALUE)
    q = _range_query(TimestampedRangeQuery, lo, hi)
    if descending:
        q = q.with_descending_keys()
    res = app.query(request(name, q))
    expected = [ValueAndTimestamp((v,), WS + 2 * MIN * v) for v in (desc if descending else asc)]
    assert _values_by_partition(res, True) == expected
    assert res.position == INPUT_POSITION


def test_range_results_are_key_value_pairs(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(request(name, RangeQuery.with_range(0, 4)))
    assert list(res.partition_results[0].result) == [KeyValue(0, (1,)), KeyValue(2, (5,)), KeyValue(4, (9,))]


# -- §5.4 window stores ------------------------------------------------------------------------------
WINDOW_KEY_CASES = [  # key, from (minutes after WS, or ms offsets as "-1ms"), to, DSL, PAPI
    (0, 0, 0, {1}, {1}),
    (0, "-1ms", "-1ms", set(), set()),
    (2, 0, 0, set(), set()),
    (999, 0, 0, set(), set()),
    (999, "-1ms", "-1ms", set(), set()),
    (0, 0, 5, {1}, {1}),
    (1, 0, 0, {2}, {2}),
    (2, 5, 10, {4, 5}, {4, 5}),
    (3, 5, 10, {13}, {7}),
    (4, 15, 20, {17}, {9}),
    (4, 20, 24, set(), set()),
]


def _t(offset: Any) -> int:
    return WS - 1 if offset == "-1ms" else WS + offset * MIN


def _window_values(res: Any) -> set[int]:
    return {kv.value[0] for r in res.partition_results.values() for kv in r.result}


@pytest.mark.parametrize("flavor", ["dsl", "papi"])
@pytest.mark.parametrize("key,t0,t1,dsl,papi", WINDOW_KEY_CASES)
def test_window_key_query(fixture_app: Any, flavor: str, key: int, t0: Any, t1: Any, dsl: set[int],
                          papi: set[int]) -> None:
    app, name = fixture_app(StoreKind.WINDOW, flavor)
    res = app.query(request(name, WindowKeyQuery.with_key_and_window_start_range(key, _t(t0), _t(t1))))
    assert _window_values(res) == (dsl if flavor == "dsl" else papi)
    starts = [kv.key for r in res.partition_results.values() for kv in r.result]
    assert all(_t(t0) <= s <= _t(t1) for s in starts)
    assert res.position == INPUT_POSITION


WINDOW_RANGE_CASES = [
    ("-1ms", "-1ms", set(), set()),
    (0, 0, {1, 2}, {1, 2}),
    (0, 5, {1, 2, 3, 4}, {1, 2, 3, 4}),
    (5, 10, {3, 4, 5, 13}, {3, 4, 5, 7}),
    (10, 15, {5, 13, 17}, {5, 7, 9}),
    (15, 20, {17}, {9}),
    (20, 25, set(), set()),
    (5, 15, {3, 4, 5, 13, 17}, {3, 4, 5, 7, 9}),
    (0, 15, {1, 2, 3, 4, 5, 13, 17}, {1, 2, 3, 4, 5, 7, 9}),
]


@pytest.mark.parametrize("flavor", ["dsl", "papi"])
@pytest.mark.parametrize("t0,t1,dsl,papi", WINDOW_RANGE_CASES)
def test_window_range_query(fixture_app: Any, flavor: str, t0: Any, t1: Any, dsl: set[int], papi: set[int]) -> None:
    app, name = fixture_app(StoreKind.WINDOW, flavor)
    res = app.query(request(name, WindowRangeQuery.with_window_start_range(_t(t0), _t(t1))))
    assert _window_values(res) == (dsl if flavor == "dsl" else papi)
    for r in res.partition_results.values():
        items = list(r.result)
        assert [(kv.key.key, kv.key.window.start) for kv in items] == sorted(
            (kv.key.key, kv.key.window.start) for kv in items)
        for kv in items:
            assert isinstance(kv.key, Windowed)
            assert kv.key.window.end - kv.key.window.start == 5 * MIN


def test_window_range_with_key_is_unknown_on_window_store(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.WINDOW)
    q = WindowRangeQuery.with_key(2)
    assert repr(q) == "WindowRangeQuery{key=Optional[2], timeFrom=Optional.empty, timeTo=Optional.empty}"
    res = app.query(request(name, q))
    for r in res.partition_results.values():
        assert r.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
        assert re.fullmatch(
            r"This store \(.*\) doesn't know how to execute the given query \(WindowRangeQuery\{key=Optional\[2\],"
            r" timeFrom=Optional.empty, timeTo=Optional.empty\}\) because WindowStores only supports"
            r" WindowRangeQuery.withWindowStartRange. Contact the store maintainer if you need support for a new"
            r" query type.", r.failure_message)


# -- §5.5 session stores ---------------------------------------------------------------------------
@pytest.mark.parametrize("flavor", ["dsl", "papi"])
@pytest.mark.parametrize("key,dsl,papi", [
    (0, {1}, {0, 1}), (1, {5}, {2, 3}), (2, {9}, {4, 5}), (3, {13}, {6, 7}), (4, {17}, {8, 9}), (999, set(), set()),
])
def test_session_query(fixture_app: Any, flavor: str, key: int, dsl: set[int], papi: set[int]) -> None:
    app, name = fixture_app(StoreKind.SESSION, flavor)
    res = app.query(request(name, WindowRangeQuery.with_key(key)))
    assert _window_values(res) == (dsl if flavor == "dsl" else papi)
    for r in res.partition_results.values():
        for kv in r.result:
            assert kv.key.key == key and isinstance(kv.key.window, TimeWindow)
    assert res.position == INPUT_POSITION


def test_session_store_refuses_window_start_range(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.SESSION)
    res = app.query(request(name, WindowRangeQuery.with_window_start_range(0, 0)))
    for r in res.partition_results.values():
        assert r.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
        assert re.fullmatch(
            r"This store \(SessionStore\) doesn't know how to execute the given query \(WindowRangeQuery\{"
            r"key=Optional.empty, timeFrom=Optional\[0\], timeTo=Optional\[0\]\}\) because SessionStores only"
            r" support WindowRangeQuery.withKey. Contact the store maintainer if you need support for a new query"
            r" type.", r.failure_message)


# -- §5.6 IQv2IntegrationTest -------------------------------------------------------------------------
def test_unknown_store_is_checked_before_the_state(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.KEY_VALUE)], start=False)
    with pytest.raises(UnknownStateStoreException):
        app.query(StateQueryRequest.in_store("nope").with_query(KeyQuery.with_key(1)))
    assert UnknownStateStoreException.retryable is False


def test_not_started(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.KEY_VALUE)], start=False)
    with pytest.raises(StreamsNotStartedException) as ei:
        app.query(StateQueryRequest.in_store("key_value_store").with_query(KeyQuery.with_key(1)))
    assert ei.value.retryable is True


def test_stopped(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.KEY_VALUE)])
    assert app.close(timeout_s=0 + 10)
    with pytest.raises(StreamsStoppedException) as ei:
        app.query(StateQueryRequest.in_store("key_value_store").with_query(KeyQuery.with_key(1)))
    assert ei.value.retryable is False


def test_require_active_while_rebalancing(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    app.mark_rebalancing()
    assert app.state is State.REBALANCING
    res = app.query(request(name, KeyQuery.with_key(1)).require_active())
    for r in res.partition_results.values():
        assert r.failure_reason is FailureReason.NOT_ACTIVE
        assert r.failure_message == (
            "Query requires a running active task, but partition was in state REBALANCING and was active.")
    plain = app.query(request(name, KeyQuery.with_key(1)))  # REBALANCING still answers without require_active
    assert plain.partition_results[1].result == (3,)


def test_fetch_from_one_partition(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(StateQueryRequest.in_store(name).with_query(RangeQuery.with_no_bounds()).with_partitions({1}))
    assert set(res.partition_results) == {1}
    assert {kv.key for kv in res.partition_results[1].result} == {1, 3}


def test_fetch_explicitly_from_all_partitions(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(StateQueryRequest.in_store(name).with_query(RangeQuery.with_no_bounds()).with_all_partitions())
    assert set(res.partition_results) == {0, 1}


# -- §5.7 versioned stores ---------------------------------------------------------------------------
T0 = 1_700_000_000_000
T1, T2, T3 = T0 + 10, T0 + 20, T0 + 30
BOUND = PositionBound.at(Position.from_map({TOPIC: {0: 3}}))


@pytest.fixture
def versioned(make_app: Any) -> Any:
    spec = spec_for(StoreKind.VERSIONED, "versioned", partitions=1)
    app = make_app([spec])
    changes = [Change(2, (v,), t) for v, t in ((2, T0), (20, T1), (200, T2), (2000, T3))]
    app.writer("versioned").write_batch(1, changes, Position.from_map({TOPIC: {0: 3}}))
    return app


def vreq(q: Query[Any]) -> StateQueryRequest:
    return StateQueryRequest.in_store("versioned").with_query(q).with_partitions({0}).with_position_bound(BOUND)


@pytest.mark.parametrize("q,expected", [
    (VersionedKeyQuery.with_key(2), VersionedRecord((2000,), T3, None)),
    (VersionedKeyQuery.with_key(2).as_of(T3 + 10**9), VersionedRecord((2000,), T3, None)),
    (VersionedKeyQuery.with_key(2).as_of(T3), VersionedRecord((2000,), T3, None)),
    (VersionedKeyQuery.with_key(2).as_of(T0), VersionedRecord((2,), T0, T1)),
    (VersionedKeyQuery.with_key(2).as_of(T1 + 5), VersionedRecord((20,), T1, T2)),
    (VersionedKeyQuery.with_key(2).as_of(T0 - 50), None),
    (VersionedKeyQuery.with_key(3), None),
])
def test_versioned_key_query(versioned: Any, q: Query[Any], expected: Any) -> None:
    res = versioned.query(vreq(q))
    only = res.only_partition_result()
    assert (only.result if only is not None else None) == expected
    assert res.partition_results[0].is_success


ALL_VERSIONS = [VersionedRecord((2000,), T3, None), VersionedRecord((200,), T2, T3),
                VersionedRecord((20,), T1, T2), VersionedRecord((2,), T0, T1)]


@pytest.mark.parametrize("q,expected", [
    (MultiVersionedKeyQuery.with_key(2), ALL_VERSIONS),
    (MultiVersionedKeyQuery.with_key(2).with_descending_timestamps(), ALL_VERSIONS),
    (MultiVersionedKeyQuery.with_key(2).with_ascending_timestamps(), ALL_VERSIONS[::-1]),
    (MultiVersionedKeyQuery.with_key(2).from_time(T1 + 5).to_time(T3 + 10**6), ALL_VERSIONS[:3]),
    (MultiVersionedKeyQuery.with_key(2).from_time(T0 - 100).to_time(T0 - 50), []),
    (MultiVersionedKeyQuery.with_key(2).from_time(T0 - 100).to_time(T0 - 50).with_ascending_timestamps(), []),
    (MultiVersionedKeyQuery.with_key(2).from_time(T1).to_time(T1), [VersionedRecord((20,), T1, T2)]),
    (MultiVersionedKeyQuery.with_key(3), []),
])
def test_multi_versioned_key_query(versioned: Any, q: Query[Any], expected: list[Any]) -> None:
    r = versioned.query(vreq(q)).partition_results[0]
    assert r.is_success and r.result is not None
    assert list(r.result) == expected


@pytest.fixture
def versioned_keys(versioned: Any) -> Any:
    """Key 2's four versions, key 1 once then deleted (a tombstone), key 5 once."""
    versioned.writer("versioned").write_batch(2, [Change(1, (1,), T1), Change(1, None, T2), Change(5, (5,), T2)],
                                              Position.from_map({TOPIC: {0: 6}}))
    return versioned


def _kv(k: int, *rs: VersionedRecord) -> list[KeyValue]:
    return [KeyValue(k, r) for r in rs]


V2 = ALL_VERSIONS[::-1]  # key 2's versions, oldest first
V1 = VersionedRecord((1,), T1, T2)
V5 = VersionedRecord((5,), T2, None)


@pytest.mark.parametrize("q,expected", [
    # the current versions: valid at the end of time (key 1's latest is a tombstone)
    (MultiVersionedRangeQuery.with_no_key_bounds().from_time(2**63 - 1).to_time(2**63 - 1), _kv(2, V2[3]) + _kv(5, V5)),
    (MultiVersionedRangeQuery.with_no_key_bounds(), _kv(1, V1) + _kv(2, *V2) + _kv(5, V5)),
    (MultiVersionedRangeQuery.with_no_key_bounds().from_time(T1).to_time(T1), _kv(1, V1) + _kv(2, V2[1])),
    (MultiVersionedRangeQuery.with_key_range(2, 9).from_time(T2).to_time(T2), _kv(2, V2[2]) + _kv(5, V5)),
    (MultiVersionedRangeQuery.with_key_range(2, 2).from_time(T1 + 1).to_time(T2), _kv(2, V2[1], V2[2])),
    (MultiVersionedRangeQuery.with_no_key_bounds().with_descending_keys().with_descending_timestamps()
     .from_time(T1).to_time(T3), _kv(5, V5) + _kv(2, V2[3], V2[2], V2[1]) + _kv(1, V1)),
    (MultiVersionedRangeQuery.with_key_range(6, 2), []),
    (MultiVersionedRangeQuery.with_no_key_bounds().from_time(T0 - 9).to_time(T0 - 1), []),
])
def test_multi_versioned_range_query(versioned_keys: Any, q: Query[Any], expected: list[Any]) -> None:
    r = versioned_keys.query(vreq(q)).partition_results[0]
    assert r.is_success and r.result is not None
    assert list(r.result) == expected


def test_multi_versioned_range_from_after_to_raises(versioned: Any) -> None:
    with pytest.raises(ValueError, match="must be smaller than or equal"):
        versioned.query(vreq(MultiVersionedRangeQuery.with_no_key_bounds().from_time(T2).to_time(T1)))


def test_multi_versioned_reads_a_snapshot(versioned: Any) -> None:
    it = versioned.query(vreq(MultiVersionedKeyQuery.with_key(2))).partition_results[0].result
    first = next(it)
    versioned.writer("versioned").write_batch(2, [Change(2, (999999,), T0)], Position.from_map({TOPIC: {0: 4}}))
    assert [first, *it] == ALL_VERSIONS
    fresh = versioned.query(vreq(MultiVersionedKeyQuery.with_key(2).with_ascending_timestamps())).partition_results[0]
    assert list(fresh.result)[0] == VersionedRecord((999999,), T0, T1)


def test_multi_versioned_from_after_to_raises(versioned: Any) -> None:
    with pytest.raises(ValueError, match="fromTime"):
        versioned.query(vreq(MultiVersionedKeyQuery.with_key(2).from_time(T2).to_time(T1)))


# -- §5.8 the position survives a restart ---------------------------------------------------------------
@pytest.mark.parametrize("kind,query", [
    (StoreKind.KEY_VALUE, RangeQuery.with_no_bounds()),
    (StoreKind.WINDOW, WindowKeyQuery.with_key_and_window_start_range(2, WS + 5 * MIN, WS + 5 * MIN)),
    (StoreKind.SESSION, WindowRangeQuery.with_key(2)),
])
def test_position_survives_restart(make_app: Any, tmp_path: Any, kind: StoreKind, query: Query[Any]) -> None:
    spec = spec_for(kind)
    state_dir = tmp_path / "restart"
    app = make_app([spec], state_dir=state_dir)
    write_fixture(app, spec.name, kind)
    before = app.query(request(spec.name, query))
    assert before.position == INPUT_POSITION
    assert app.close(timeout_s=10)
    again = make_app([spec], state_dir=state_dir)
    after = again.query(request(spec.name, query))
    assert after.position == INPUT_POSITION
    assert all(r.is_success for r in after.partition_results.values())
    assert [list(r.result) for r in after.partition_results.values()] == [
        list(r.result) for r in before.partition_results.values()]
