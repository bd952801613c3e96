"""Per-partition failure reasons and key handling: every failure comes back as data, with the position."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import pytest

from stores.app import layout
from stores.app.reader import StateDirReader
from stores.catalog.schema import Column, KeyTypeError, SqlType, StoreKind, StoreSpec
from stores.engine.base import EXISTS_CHECK_S
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, QueryResult
from tests.stores.iqv2_fixture import INPUT_POSITION, TOPIC, fixture_changes, spec_for

ANSWERED = {
    StoreKind.KEY_VALUE: KeyQuery.with_key(1),
    StoreKind.TIMESTAMPED_KEY_VALUE: RangeQuery.with_no_bounds(),
    StoreKind.WINDOW: WindowKeyQuery.with_key_and_window_start_range(1, 0, 2**62),
    StoreKind.SESSION: WindowRangeQuery.with_key(1),
    StoreKind.VERSIONED: VersionedKeyQuery.with_key(1),
}
KINDS = list(StoreKind)


def req(name: str, q: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store(name).with_query(q)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_not_up_to_bound_names_partition_position_and_bound(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    bound = PositionBound.at(Position.from_map({TOPIC: {0: 6}}))
    res = app.query(req(name, ANSWERED[kind]).with_position_bound(bound))
    for p, r in res.partition_results.items():
        assert r.failure_reason is FailureReason.NOT_UP_TO_BOUND
        assert r.failure_message == (
            f"For store partition {p}, the current position {INPUT_POSITION} is not yet up to the bound {bound}")
        assert r.position == INPUT_POSITION
        assert r.failure_reason.retryable


def test_bound_message_format_matches_kafka() -> None:
    r = QueryResult.not_up_to_bound(Position.from_map({"topic": {0: 0}}),
                                    PositionBound.at(Position.from_map({"topic": {0: 1}})), 0)
    assert r.failure_message == ("For store partition 0, the current position Position{position={topic={0=0}}}"
                                 " is not yet up to the bound PositionBound{position=Position{position={topic={0=1}}}}")


@pytest.mark.parametrize("bound_map,ok", [
    ({TOPIC: {0: 5, 1: 3}}, True),           # exactly reached
    ({TOPIC: {1: 4}}, False),                # behind on a partition the store reads
    ({TOPIC: {2: 0}}, False),                # a partition the store never saw
    ({"other-topic": {0: 10**9}}, True),     # topics the store does not read are ignored
    ({TOPIC: {0: 1}, "other-topic": {0: 7}}, True),
])
def test_bound_check(fixture_app: Any, bound_map: dict[str, dict[int, int]], ok: bool) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(req(name, KeyQuery.with_key(2)).with_position_bound(PositionBound.at(bound_map)))
    assert all(r.is_success is ok for r in res.partition_results.values())
    assert all(r.position == INPUT_POSITION for r in res.partition_results.values())


def test_store_without_source_topics_checks_every_bounded_topic(make_app: Any) -> None:
    spec = StoreSpec("plain", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),))
    app = make_app([spec])
    app.writer("plain").write_batch(0, [Change(1, (1,))], Position.from_map({"a": {0: 3}}))
    ok = app.query(req("plain", KeyQuery.with_key(1)).with_position_bound(PositionBound.at({"a": {0: 3}})))
    behind = app.query(req("plain", KeyQuery.with_key(1)).with_position_bound(PositionBound.at({"b": {0: 0}})))
    assert ok.partition_results[0].result == (1,)
    assert behind.partition_results[0].failure_reason is FailureReason.NOT_UP_TO_BOUND


def test_type_check_comes_before_bound_check(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(req(name, VersionedKeyQuery.with_key(1)).with_position_bound(PositionBound.at({TOPIC: {0: 99}})))
    assert {r.failure_reason for r in res.partition_results.values()} == {FailureReason.UNKNOWN_QUERY_TYPE}
    assert all(r.position == INPUT_POSITION for r in res.partition_results.values())


def test_does_not_exist_and_not_present(make_app: Any) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, partitions=3)
    app = make_app([spec], hosted_partitions={spec.name: {0}}, standby_partitions={spec.name: {1}})
    res = app.query(req(spec.name, KeyQuery.with_key(1)).with_partitions({0, 1, 2, 3}))
    assert res.partition_results[0].is_success
    assert res.partition_results[1].is_success  # a standby answers unless require_active
    assert res.partition_results[2].failure_reason is FailureReason.NOT_PRESENT
    assert res.partition_results[2].failure_message == "The requested partition was not present at the time of the query."
    assert res.partition_results[3].failure_reason is FailureReason.DOES_NOT_EXIST
    assert "partition 3 does not exist" in res.partition_results[3].failure_message
    assert not FailureReason.DOES_NOT_EXIST.retryable and FailureReason.NOT_PRESENT.retryable
    all_local = app.query(req(spec.name, KeyQuery.with_key(1)))
    assert set(all_local.partition_results) == {0, 1}


def test_require_active_refuses_standby(make_app: Any) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, partitions=2)
    app = make_app([spec], hosted_partitions={spec.name: {0}}, standby_partitions={spec.name: {1}})
    res = app.query(req(spec.name, KeyQuery.with_key(1)).require_active())
    assert res.partition_results[0].is_success
    assert res.partition_results[1].failure_reason is FailureReason.NOT_ACTIVE
    assert res.partition_results[1].failure_message == (
        "Query requires a running active task, but partition was in state RUNNING and was not active.")


def test_require_active_keeps_the_bound(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    res = app.query(req(name, KeyQuery.with_key(2)).require_active()
                    .with_position_bound(PositionBound.at({TOPIC: {0: 99}})))
    assert {r.failure_reason for r in res.partition_results.values()} == {FailureReason.NOT_UP_TO_BOUND}


@pytest.mark.parametrize("how", ["corrupt", "gone"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_store_exception_when_the_file_fails(fixture_app: Any, kind: StoreKind, how: str) -> None:
    app, name = fixture_app(kind)
    reader = StateDirReader(app.state_dir)
    assert reader.query(req(name, ANSWERED[kind])).partition_results[0].is_success  # connections now open
    path = layout.partition_path(app.state_dir, name, 0)
    if how == "gone":  # the reader's open connections must notice, not go on reading an unlinked file
        assert app.close(timeout_s=10)
        os.unlink(path)
        time.sleep(EXISTS_CHECK_S * 1.5)  # stores re-check that their file exists at most this often
    else:  # the last connection to close checkpoints the WAL into the main file: breaking it breaks the data
        reader.close()
        assert app.close(timeout_s=10)
        assert not os.path.exists(f"{path}-wal")
        with open(path, "r+b") as fh:
            fh.write(b"this is not an sqlite database at all" * 200)
    res = reader.query(req(name, ANSWERED[kind]).enable_execution_info())
    r = res.partition_results[0]
    assert r.failure_reason is FailureReason.STORE_EXCEPTION
    assert "Store %s partition 0 failed" % name in r.failure_message
    assert ("is gone" if how == "gone" else "DatabaseError") in r.failure_message
    assert r.execution_info
    assert res.partition_results[1].is_success  # the other partition still answers
    reader.close()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_store_exception_when_a_partition_store_closes_under_the_app(fixture_app: Any, kind: StoreKind) -> None:
    app, name = fixture_app(kind)
    app.partition_store(name, 0).close()
    r = app.query(req(name, ANSWERED[kind]).with_partitions({0, 1}))
    assert r.partition_results[0].failure_reason is FailureReason.STORE_EXCEPTION
    assert "closed" in r.partition_results[0].failure_message
    assert r.partition_results[1].is_success


def test_malformed_key_raises(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    with pytest.raises(KeyTypeError, match="cannot be converted to BIGINT"):
        app.query(req(name, KeyQuery.with_key("not a number")))
    with pytest.raises(KeyTypeError):
        app.query(req(name, RangeQuery.with_range(1, "x")))
    assert app.query(req(name, KeyQuery.with_key("2"))).only_partition_result().result == (5,)  # coerced


def test_inverted_range_is_empty_with_a_warning(fixture_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    app, name = fixture_app(StoreKind.KEY_VALUE)
    with caplog.at_level(logging.WARNING):
        res = app.query(req(name, RangeQuery.with_range(4, 0)))
    assert all(list(r.result) == [] for r in res.partition_results.values())
    assert all(r.position == INPUT_POSITION for r in res.partition_results.values())
    assert "lower bound is greater than the upper bound" in caplog.text


@pytest.mark.parametrize("key_type,keys,expected", [
    (SqlType.BIGINT, [10, 2, -5, 100, 33], [-5, 2, 10, 33, 100]),
    (SqlType.VARCHAR, ["b", "a", "B", "ä", "aa"], ["B", "a", "aa", "b", "ä"]),
    (SqlType.DOUBLE, [2.5, -1.0, 10.0, 9.75], [-1.0, 2.5, 9.75, 10.0]),
    (SqlType.TIMESTAMP, [1_700_000_000_000, 5, 1_600_000_000_000, -7], [-7, 5, 1_600_000_000_000, 1_700_000_000_000]),
])
def test_keys_order_by_sql_type(make_app: Any, key_type: SqlType, keys: list[Any], expected: list[Any]) -> None:
    spec = StoreSpec("typed", StoreKind.KEY_VALUE, Column("k", key_type), (Column("v", SqlType.VARCHAR),),
                     partitions=1)
    app = make_app([spec])
    app.writer("typed").write_batch(0, [Change(k, (str(k),)) for k in keys], Position.from_map({"t": {0: 0}}))
    res = app.query(req("typed", RangeQuery.with_no_bounds())).partition_results[0]
    assert [kv.key for kv in res.result] == expected
    lo, hi = expected[1], expected[3]
    sub = app.query(req("typed", RangeQuery.with_range(lo, hi))).partition_results[0]
    assert [kv.key for kv in sub.result] == expected[1:4]


def test_boolean_and_date_columns_round_trip(make_app: Any) -> None:
    spec = StoreSpec("flags", StoreKind.KEY_VALUE, Column("k", SqlType.BOOLEAN),
                     (Column("on", SqlType.BOOLEAN), Column("day", SqlType.DATE)), partitions=1)
    app = make_app([spec])
    app.writer("flags").write_batch(0, [Change(True, (False, "2024-02-29")), Change(False, {"on": True, "day": None})],
                                    Position.from_map({"t": {0: 0}}))
    got = list(app.query(req("flags", RangeQuery.with_no_bounds())).partition_results[0].result)
    assert got == [(False, (True, None)), (True, (False, 19782))]
    assert got[1].value.on is False and type(got[0].key) is bool


def test_mvkq_from_after_to_is_a_malformed_request(fixture_app: Any) -> None:
    app, name = fixture_app(StoreKind.VERSIONED)
    with pytest.raises(ValueError):
        app.query(req(name, MultiVersionedKeyQuery.with_key(1).from_time(10).to_time(5)))


def test_fixture_helper_covers_every_kind() -> None:
    for kind in KINDS:
        per = fixture_changes(kind)
        assert per[0] and per[1]
        assert all(ch.key % 2 == p for p, chs in per.items() for ch in chs)


def test_raw_rows_fast_path(make_app: Any) -> None:
    spec = StoreSpec("raw", StoreKind.TIMESTAMPED_KEY_VALUE, Column("k", SqlType.VARCHAR),
                     (Column("n", SqlType.BIGINT), Column("ok", SqlType.BOOLEAN)), partitions=1)
    app = make_app([spec])
    app.writer("raw").write_batch(0, [Change("b", (2, True), 20), Change("a", (1, False), 10)],
                                  Position.from_map({"t": {0: 0}}))
    res = app.query(req("raw", RangeQuery.with_no_bounds())).partition_results[0].result
    assert res.row_columns == ("key",)
    assert next(res) == ("a", (1, False))
    assert res.remaining_rows() == [("b", 2, 1)]  # raw: the stored forms, BOOLEAN as 0/1
    assert not res.has_next() and res.remaining_rows() == []
    ts = app.query(req("raw", TimestampedRangeQuery.with_no_bounds())).partition_results[0].result
    assert ts.row_columns == ("key", "timestamp") and ts.remaining_rows() == [("a", 10, 1, 0), ("b", 20, 2, 1)]


def test_a_file_of_another_kind_is_refused(make_app: Any, tmp_path: Any) -> None:
    from stores.engine import open_partition

    kv = spec_for(StoreKind.KEY_VALUE, "s")
    open_partition(kv, 0, tmp_path / "p.db").close()
    with pytest.raises(ValueError, match="holds a key_value store, not window"):
        open_partition(spec_for(StoreKind.WINDOW, "s"), 0, tmp_path / "p.db")
    with pytest.raises(FileNotFoundError):
        open_partition(kv, 0, tmp_path / "missing.db", read_only=True)
