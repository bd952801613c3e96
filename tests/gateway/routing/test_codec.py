"""The peer wire: every IQv2 query as its constructors build it survives the trip; a malformed field is named."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from gateway.engine.json_values import dumps
from gateway.routing.codec import CodecError, decode_request, encode_request
from stores.iqv2 import query as q
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.request import StateQueryRequest

T = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
KEYS = ["c01", 7, Decimal("-1.50"), date(2024, 5, 1), T, True, 2.5, ("c01", 3)]  # scalars and a composite key

QUERIES = [
    *(q.KeyQuery.with_key(k) for k in KEYS),
    q.KeyQuery.with_key("c01").with_skip_cache(),
    q.MultiKeyQuery.with_keys(KEYS),
    q.RangeQuery.with_range("a", "z").with_descending_keys(),
    q.RangeQuery.with_lower_bound(("c01", 1)),
    q.RangeQuery.with_no_bounds(),
    q.TimestampedKeyQuery.with_key("c01"),
    q.TimestampedRangeQuery.with_upper_bound(Decimal("9.99")).with_ascending_keys(),
    q.WindowKeyQuery.with_key_and_window_start_range("c01", T, 1_714_568_400_000),
    q.WindowRangeQuery.with_key("c01"),
    q.WindowRangeQuery.with_window_start_range(0, T),
    q.VersionedKeyQuery.with_key("c01"),
    q.VersionedKeyQuery.with_key("c01").as_of(T),
    q.MultiVersionedKeyQuery.with_key("c01").from_time(0).to_time(T).with_descending_timestamps(),
    q.MultiVersionedKeyQuery.with_key("c01"),
    q.MultiVersionedRangeQuery.with_key_range("a", None).from_time(T).with_descending_keys(),
    q.MultiVersionedRangeQuery.with_no_key_bounds(),
]


@pytest.mark.parametrize("query", QUERIES, ids=repr)
def test_every_query_crosses_to_a_peer_unchanged(query: q.Query) -> None:
    req = (StateQueryRequest.in_store("s").with_query(query).with_partitions([0, 2])
           .with_position_bound(PositionBound.at(Position.from_map({"orders": {0: 41}}))))
    back = decode_request(json.loads(dumps(encode_request(req))))
    assert back.query == query
    assert back.partitions == req.partitions and back.position_bound == req.position_bound


@pytest.mark.parametrize("fields, named", [
    ({"keys": []}, "MultiKeyQuery.keys"),
    ({"keys": {"$tuple": [["a"]]}}, "MultiKeyQuery.keys"),
    ({"key": None}, "KeyQuery.key"),
    ({"key": {"$tuple": []}}, "KeyQuery.key"),
    ({"key": "a", "skip_cache": 1}, "KeyQuery.skip_cache"),
    ({"lower": [1], "upper": None}, "RangeQuery.lower"),
    ({"result_order": "ASCENDING"}, "RangeQuery.result_order"),
    ({"key": "a", "time_from": True, "time_to": 1}, "WindowKeyQuery.time_from"),
    ({"key": "a", "as_of_timestamp": 1.5}, "VersionedKeyQuery.as_of_timestamp"),
    ({"lower": None, "key_order": None}, "MultiVersionedRangeQuery.key_order"),
])
def test_a_field_of_the_wrong_type_is_refused_by_name(fields: dict, named: str) -> None:
    query = named.split(".")[0]
    with pytest.raises(CodecError, match=rf"^{named} cannot be"):
        decode_request({"store": "s", "query": {"$query": query, "fields": fields}})


def test_a_snapshot_crosses_to_a_peer_and_a_bad_one_is_named() -> None:
    """A statement brought to one Position asks a peer as of it (issue 47): the request's snapshot survives."""
    at = Position.from_map({"orders": {0: 41, 1: 7}})
    req = StateQueryRequest.in_store("s").with_query(q.KeyQuery.with_key("c01")).with_snapshot(at)
    back = decode_request(json.loads(dumps(encode_request(req))))
    assert back.snapshot == at and back.query == req.query
    assert decode_request(json.loads(dumps(encode_request(req.with_snapshot(None))))).snapshot is None
    with pytest.raises(CodecError, match="snapshot is not a position"):
        decode_request({"store": "s", "query": {"$query": "KeyQuery", "fields": {"key": "a"}},
                        "snapshot": {"orders": {"0": -1}}})
