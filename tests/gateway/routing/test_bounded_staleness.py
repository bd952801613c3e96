"""``consistency = 'bounded_staleness'`` (issue 47): any copy at most ``max_staleness`` behind, by the time lag copies
report, over real HTTP between an active and a replica that stopped restoring.

The replica's changelog gets a record it cannot apply (a producer writing to the wrong topic, or a damaged
record): the replica keeps serving what it had, and its time lag grows from that moment. A statement on the
replica at bounded_staleness is then answered by the fresher active copy; at eventual by the stale local copy;
a replica on its own (no peers) refuses its stale partitions.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway
from gateway.engine.errors import NotUpToBoundError
from stores.app.reader import StateDirReader
from stores.changelog import EventLogChangelog
from stores.changelog.topics import changelog_topic
from stores.log.eventlog import EventLog
from stores.replica import Replica, ReplicaSource
from tests.gateway.routing.test_routing import Node, wait_for
from tests.stores.changelog.helpers import APP, batch, kv_spec, logged_writer, open_app, position

SQL = "SELECT customer, total FROM revenue ORDER BY customer"


@pytest.fixture
def stale(tmp_path: Path) -> Any:
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "active", kv_spec())
    w = logged_writer(app, EventLogChangelog(log))
    for i in range(3):
        w.write_batch(i, batch(i), position(i))
    rep = Replica(EventLogChangelog(log), APP, tmp_path / "replica", partitions={"revenue": [0, 1]}).start()
    wait_for(rep.caught_up)
    log.append(changelog_topic(APP, "revenue"), "x", {"not": "a changelog record"}, partition=0)
    wait_for(lambda: all(lag.time_lag_ms > 400 for lag in rep.lags()))
    w.write_batch(3, batch(3), position(3))  # the active moves on; the replica stays where it stopped
    yield log, app, rep
    rep.close()
    app.close()


def test_a_stopped_replica_reports_its_time_lag_growing(stale: Any) -> None:
    _, _, rep = stale
    first = {lag.partition: lag.time_lag_ms for lag in rep.lags()}
    time.sleep(0.2)
    assert all(lag.time_lag_ms >= first[lag.partition] + 150 for lag in rep.lags())
    assert rep.errors  # and it says why


def test_routing_asks_a_fresh_enough_copy(stale: Any, tmp_path: Path) -> None:
    _, _, rep = stale
    active, standby = Node(StateDirReader(tmp_path / "active")), Node(ReplicaSource(rep))
    try:
        active.peer(standby)
        standby.peer(active)
        wait_for(lambda: all(p.alive and p.partitions for n in (active, standby) for p in n.membership.peers.values()))
        status, _, fresh = standby.http.sql(SQL, session={"consistency": "bounded_staleness", "max_staleness": "200ms"})
        assert status == 200, fresh
        assert {p["partition"]: p["host"] for p in fresh["partitions"]} == {p: active.server.url for p in range(3)}
        status, _, local = standby.http.sql(SQL, session={"consistency": "eventual"})
        assert status == 200
        assert {p["partition"]: p["host"] for p in local["partitions"]} == {
            0: standby.server.url, 1: standby.server.url, 2: active.server.url}
        assert local["rows"] != fresh["rows"]  # the stale copy's answer is older
        status, _, body = active.http.sql(SQL)
        assert body["rows"] == fresh["rows"]
        # a bound wide enough for the stale copy: it answers itself again
        status, _, wide = standby.http.sql(SQL, session={"consistency": "bounded_staleness", "max_staleness": "1h"})
        assert status == 200 and {p["partition"]: p["host"] for p in wide["partitions"]}[0] == standby.server.url
    finally:
        for n in (active, standby):
            n.close()


def test_a_replica_alone_refuses_its_stale_partitions(stale: Any) -> None:
    _, _, rep = stale
    gw = Gateway(ReplicaSource(rep))
    mine = "SELECT customer, total FROM revenue WHERE _partition IN (0, 1) ORDER BY customer"  # what it hosts
    try:
        bounded = {"consistency": "bounded_staleness", "max_staleness": 200}
        with pytest.raises(NotUpToBoundError, match="max_staleness is 200 ms") as err:
            gw.sql(mine, session=bounded)
        assert {p["partition"] for p in err.value.partitions} == {0, 1} and err.value.retryable
        partial = gw.sql(mine, session=bounded, partial=True)
        assert {p.partition for p in partial.partitions if p.failure_reason} == {0, 1}
        assert partial.rows() == []
        assert gw.sql(mine, session={"consistency": "eventual"}).rows()  # not bounded: the stale copy answers
    finally:
        gw.close()
