"""Replica on the embedded log: restores every store partition from its changelog into its own state dir, equal
to the active's rows and Position; keeps tailing; restarts without applying anything twice; hosts chosen partitions."""

from __future__ import annotations

import time

import pytest

from stores.app.reader import StateDirReader
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType
from stores.changelog import EventLogChangelog
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason
from stores.log.eventlog import EventLog
from stores.replica import Replica, ReplicaError, ReplicaSource

from .helpers import APP, batch, contents, kv_spec, logged_writer, open_app, position, window_batch, window_spec


def wait_for(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def same_as_active(active_dir, replica_dir, spec, parts) -> bool:
    return all(contents(active_dir, spec, p) == contents(replica_dir, spec, p) for p in parts)


@pytest.fixture
def active(tmp_path):
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "active", kv_spec(), window_spec())
    yield log, app, tmp_path / "active"
    app.close()


def test_restores_tails_and_answers_at_the_positions_it_applied(active, tmp_path) -> None:
    log, app, active_dir = active
    cl = EventLogChangelog(log)
    w, ww = logged_writer(app, cl), logged_writer(app, cl, "per_min")
    for i in range(3):
        w.write_batch(i, batch(i), position(i))
        ww.write_batch(i, window_batch(i), position(i))
    with Replica(cl, APP, tmp_path / "replica") as rep:
        wait_for(lambda: rep.caught_up() and len(rep.lags()) == 5)
        assert same_as_active(active_dir, tmp_path / "replica", kv_spec(), range(3))
        assert same_as_active(active_dir, tmp_path / "replica", window_spec(), range(2))
        for i in range(3, 6):  # keeps tailing
            w.write_batch(i, batch(i), position(i))
            ww.write_batch(i, window_batch(i), position(i))
        wait_for(lambda: same_as_active(active_dir, tmp_path / "replica", kv_spec(), range(3))
                 and same_as_active(active_dir, tmp_path / "replica", window_spec(), range(2)))
        src = ReplicaSource(rep)
        try:
            _check_source(src)
        finally:
            src.reader.close()
        lags = {(lag.store, lag.partition): lag for lag in rep.lags()}
        assert lags[("revenue", 0)].offset_lag == 0 and lags[("revenue", 0)].current_offset == 5
        assert lags[("revenue", 0)].role == "standby"


def _check_source(src: ReplicaSource) -> None:
    """Answers at the Position of the last record applied; require_active is NOT_ACTIVE on a standby."""
    res = src.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds()))
    assert res.position == Position.from_map(position(5))
    assert all(qr.is_success for qr in res.partition_results.values())
    active_only = src.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds())
                            .require_active())
    assert {qr.failure_reason for qr in active_only.partition_results.values()} == {FailureReason.NOT_ACTIVE}
    # the gateway's point lane reads the same files at the same positions (the second read: the file is checked)
    for key in ("c1", "c2", "c3", "c0"):
        p = partition_for_key(key, 3, SqlType.VARCHAR)
        answer = src.query(StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key(key))
                           .with_partitions({p})).partition_results[p]
        got = src.point_read("revenue", p, key, PositionBound.unbounded())
        assert got is not None and got[0] == answer.position == Position.from_map(position(5)), key
        assert got[1] == (None if answer.result is None else tuple(answer.result)), key


def test_a_restarted_replica_resumes_without_applying_twice(active, tmp_path) -> None:
    log, app, active_dir = active
    cl = EventLogChangelog(log)
    w = logged_writer(app, cl)
    for i in range(3):
        w.write_batch(i, batch(i), position(i))
    with Replica(cl, APP, tmp_path / "replica", stores=["revenue"]) as rep:
        wait_for(rep.caught_up)
    for i in range(3, 5):
        w.write_batch(i, batch(i), position(i))
    with Replica(cl, APP, tmp_path / "replica", stores=["revenue"]) as rep:
        wait_for(lambda: same_as_active(active_dir, tmp_path / "replica", kv_spec(), range(3)))
        assert rep.catalog().keys() == {"revenue"}
        assert {lag.current_offset for lag in rep.lags()} == {4}


def test_chosen_partitions_only_and_not_present_elsewhere(active, tmp_path) -> None:
    log, app, active_dir = active
    cl = EventLogChangelog(log)
    w = logged_writer(app, cl)
    w.write_batch(0, batch(0), position(0))
    with Replica(cl, APP, tmp_path / "replica", stores=["revenue"], partitions={"revenue": [1]}) as rep:
        wait_for(rep.caught_up)
        assert [(lag.store, lag.partition) for lag in rep.lags()] == [("revenue", 1)]
        assert same_as_active(active_dir, tmp_path / "replica", kv_spec(), [1])
        with StateDirReader(tmp_path / "replica") as reader:
            res = reader.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds())
                               .with_partitions({0, 1}))
            assert res.partition_results[0].failure_reason is FailureReason.NOT_PRESENT
            assert res.partition_results[1].is_success


def test_bad_partitions_and_changed_definitions_are_named(active, tmp_path) -> None:
    log, app, _ = active
    cl = EventLogChangelog(log)
    logged_writer(app, cl).write_batch(0, batch(0), position(0))
    rep = Replica(cl, APP, tmp_path / "r1", stores=["revenue"], partitions={"revenue": [7]})
    rep.start()
    try:
        assert "cannot host [7]" in rep.errors["revenue"]
    finally:
        rep.close()
    # a copy restored from another definition of the store is not silently mixed with the new one
    from stores.app import layout

    other = kv_spec(partitions=3)
    other = type(other)(other.name, other.kind, other.key, other.values[:1], 3, other.source_topics)
    layout.write_store(tmp_path / "r2", "revenue", other)
    rep = Replica(cl, APP, tmp_path / "r2", stores=["revenue"])
    rep.start()
    try:
        assert "definition differs" in rep.errors["revenue"]
    finally:
        rep.close()
    with pytest.raises(ValueError, match="application_id"):
        Replica(cl, "", tmp_path / "r3")
    assert ReplicaError.__doc__
