"""Units of the IQv2 model (reference §5.9): Position, PositionBound, results, query builders."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from stores.iqv2.position import Position, PositionBound, PositionError
from stores.iqv2.query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, QueryResult, StateQueryResult
from stores.iqv2.values import KeyValueIterator, ValueAndTimestamp, VersionedRecord


def test_from_map_copies_and_none_is_empty() -> None:
    raw = {"t": {0: 5}}
    p = Position.from_map(raw)
    raw["t"][0] = 99
    raw["u"] = {1: 1}
    assert p.to_map() == {"t": {0: 5}}
    assert Position.from_map(None).is_empty() and Position.from_map(None) == Position.empty()


def test_merge_takes_the_max_and_adds_partitions_and_topics() -> None:
    a = Position.from_map({"t": {0: 5, 1: 1}})
    b = Position.from_map({"t": {0: 3, 2: 7}, "u": {0: 1}})
    m = a.merge(b)
    assert m.to_map() == {"t": {0: 5, 1: 1, 2: 7}, "u": {0: 1}}
    assert a.to_map() == {"t": {0: 5, 1: 1}}  # immutable: merge returns a new value (docs/DESIGN.md §3)
    assert a.merge(None) is a


def test_with_component_is_monotonic() -> None:
    p = Position.empty().with_component("t", 0, 5)
    assert p.with_component("t", 0, 4).offset("t", 0) == 5
    assert p.with_component("t", 0, 6).offset("t", 0) == 6
    assert p.offset("t", 0) == 5
    assert p.partition_positions("nope") == {}


def test_position_equality_hash_and_repr() -> None:
    a = Position.from_map({"topic": {0: 1}})
    assert a == Position.from_map({"topic": {"0": 1}})  # JSON string partition keys
    assert len({a, Position.from_map({"topic": {0: 1}})}) == 1  # hashable: a deliberate difference from Kafka
    assert repr(a) == "Position{position={topic={0=1}}}"
    assert Position.from_json(a.to_json()) == a


@pytest.mark.parametrize("raw,match", [
    ([1, 2], "a position is a map"),
    ({"t": [1]}, "expected a map of partition"),
    ({"": {0: 1}}, "non-empty strings"),
    ({"t": {"x": 1}}, "is not an integer"),
    ({"t": {0: -1}}, "negative"),
    ({"t": {0: True}}, "is not an integer"),
    ({"t": {0: 2**63}}, "does not fit in 64 bits"),
    ({"t": {2**31: 0}}, "past Kafka's largest"),
    ({"t": {0: "9" * 5000}}, r"offset '9{29}… \(5002 characters\) is not an integer"),
])
def test_position_rejects_bad_input(raw: object, match: str) -> None:
    with pytest.raises(PositionError, match=match):
        Position.from_map(raw)  # type: ignore[arg-type]


def test_position_from_bad_json() -> None:
    with pytest.raises(PositionError, match="invalid JSON"):
        Position.from_json("{nope")
    with pytest.raises(PositionError, match="Exceeds the limit"):  # was a ValueError, not a PositionError
        Position.from_json('{"t": {"0": 1' + "0" * 5000 + "}}")
    with pytest.raises(PositionError, match="nests too deeply"):  # was a RecursionError
        Position.from_json("[" * 100_000)
    assert Position.from_json('{"t": {"2147483647": 9223372036854775807}}').offset("t", 2**31 - 1) == 2**63 - 1


def test_position_bound() -> None:
    p = Position.from_map({"t": {0: 1}})
    b = PositionBound.at(p)
    assert b.position == p and not b.is_unbounded()
    assert PositionBound.unbounded().is_unbounded() and PositionBound.at({}) == PositionBound.unbounded()
    assert PositionBound.at({"t": {0: 1}}) == b
    assert repr(b) == "PositionBound{position=Position{position={t={0=1}}}}"
    with pytest.raises(TypeError):
        PositionBound("t")  # type: ignore[arg-type]


def test_only_partition_result() -> None:
    ok_null = QueryResult.for_result(None)
    assert StateQueryResult.of({0: ok_null}).only_partition_result() is None
    one = QueryResult.for_result((1,))
    assert StateQueryResult.of({0: ok_null, 1: one}).only_partition_result() is one
    with pytest.raises(ValueError, match="exactly one"):
        StateQueryResult.of({0: one, 1: QueryResult.for_result((2,))}).only_partition_result()
    failed = QueryResult.for_failure(FailureReason.NOT_PRESENT, "gone")
    with pytest.raises(ValueError):  # a failure is never hidden (KAFKA-15768)
        StateQueryResult.of({0: one, 1: failed}).only_partition_result()


def test_query_result_accessors() -> None:
    r = QueryResult.for_failure(FailureReason.STORE_EXCEPTION, "boom")
    with pytest.raises(ValueError, match="Cannot get result for failed query. Failure is STORE_EXCEPTION: boom"):
        _ = r.result
    with pytest.raises(TypeError):
        QueryResult.for_failure("NOT_PRESENT", "x")  # type: ignore[arg-type]
    assert QueryResult.not_up_to_bound(None, PositionBound.at({"t": {0: 1}}), None).failure_message == (
        "The store is not initialized yet, so it is not yet up to the bound "
        "PositionBound{position=Position{position={t={0=1}}}}")
    merged = StateQueryResult.of({0: QueryResult.for_result(1, Position.from_map({"t": {0: 1}})),
                                  1: QueryResult.for_result(2, Position.from_map({"t": {1: 4}}))})
    assert merged.position == Position.from_map({"t": {0: 1, 1: 4}})


def test_query_builders() -> None:
    with pytest.raises(TypeError, match="the key should not be null"):
        KeyQuery.with_key(None)
    with pytest.raises(TypeError, match="the key should not be null"):
        TimestampedKeyQuery.with_key(None)
    with pytest.raises(TypeError, match="key cannot be null."):
        VersionedKeyQuery.with_key(None)
    with pytest.raises(TypeError, match="asOf timestamp cannot be null."):
        VersionedKeyQuery.with_key(1).as_of(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key cannot be null."):
        MultiVersionedKeyQuery.with_key(None)
    with pytest.raises(TypeError):
        RangeQuery.with_lower_bound(None)
    assert RangeQuery.with_range(None, None) == RangeQuery.with_no_bounds()
    assert RangeQuery.with_range(1, 2).with_descending_keys().result_order is ResultOrder.DESCENDING
    w = WindowKeyQuery.with_key_and_window_start_range(1, 10, 20)
    assert (w.time_from, w.time_to) == (10, 20)  # Kafka's getter swap is not copied
    d = datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert WindowRangeQuery.with_window_start_range(d, d).time_from == 1_704_067_200_000
    with pytest.raises(TypeError):
        WindowRangeQuery.with_window_start_range(None, 1)  # type: ignore[arg-type]
    m = MultiVersionedKeyQuery.with_key(1).from_time(5).to_time(None)
    assert (m.from_timestamp, m.to_timestamp, m.result_order) == (5, None, ResultOrder.ANY)


def test_request_builder() -> None:
    r = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1))
    assert r.is_all_partitions and not r.is_require_active and not r.execution_info_enabled
    with pytest.raises(RuntimeError):
        r.get_partitions()
    r2 = r.with_partitions([1, 0]).require_active().enable_execution_info()
    assert r2.get_partitions() == frozenset({0, 1}) and r.partitions is None
    assert r2.with_all_partitions().is_all_partitions
    with pytest.raises(ValueError):
        r.with_partitions({-1})
    with pytest.raises(ValueError):
        StateQueryRequest.in_store("")
    with pytest.raises(TypeError):
        r.with_position_bound({"t": {0: 1}})  # type: ignore[arg-type]


def test_built_requests_are_the_frozen_dataclass_the_constructor_makes() -> None:
    """The builders set the slots directly (request._built): the result must be what __init__ makes."""
    bound = PositionBound.at(Position.from_map({"t": {0: 3}}))
    built = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1)).with_partitions({2}).with_position_bound(bound)
    made = StateQueryRequest("s", KeyQuery.with_key(1), frozenset({2}), bound)
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(1)) == StateQueryRequest("s", KeyQuery(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.store_name = "t"  # type: ignore[misc]


def test_values() -> None:
    assert ValueAndTimestamp.make(None, 5) is None
    assert ValueAndTimestamp.make_allow_nullable(None, 5).timestamp == 5
    with pytest.raises(TypeError, match="value cannot be null"):
        VersionedRecord(None, 1)
    it = KeyValueIterator([("a", 1), ("b", 2)])
    assert it.peek_next_key() == "a" and len(it) == 2
    assert next(it) == ("a", 1) and it.remaining() == [("b", 2)] and not it.has_next()
    it.close()
    with pytest.raises(ValueError, match="closed"):
        next(it)
    with pytest.raises(TypeError, match="VersionedRecord items have no key"):
        KeyValueIterator([VersionedRecord((1,), 5)]).peek_next_key()
