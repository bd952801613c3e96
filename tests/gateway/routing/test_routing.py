"""Routing between servers over real HTTP on 127.0.0.1: an active (the pipeline's state dir, its writer alive and
RUNNING) and a replica restored from the changelogs. Any server answers any query; outcomes name the host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway import Gateway
from gateway.routing.membership import Membership, Peer
from gateway.routing.source import RoutedSource
from stores.app.reader import StateDirReader
from stores.changelog import EventLogChangelog
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog
from stores.replica import Replica, ReplicaSource
from tests.gateway.gwfixtures import Http, serve_gateway
from tests.stores.changelog.helpers import (
    APP,
    batch,
    kv_spec,
    logged_writer,
    open_app,
    position,
    window_batch,
    window_spec,
)


def wait_for(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


class Node:
    """One server: a Queryable wrapped for routing, served over HTTP; peers are added once every URL is known."""

    def __init__(self, local) -> None:
        self.local = local
        self.membership = Membership([], interval_s=0.1, timeout_s=1.0)
        self.routed = RoutedSource(local, self.membership, "http://unset")
        self.gw = Gateway(self.routed)
        self.server = serve_gateway(self.gw).start()
        self.routed.self_url = self.server.url
        self.http = Http(self.server.url)

    def peer(self, *others: Node) -> None:
        for o in others:
            self.membership.peers[o.server.url] = Peer(o.server.url)
        self.membership.start()

    def close(self) -> None:
        self.membership.close()
        self.server.close()
        self.local.close()  # its store files: read connections count against the process-wide budget


@pytest.fixture
def cluster(tmp_path: Path):
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "active", kv_spec(), window_spec())
    w = logged_writer(app, EventLogChangelog(log))
    ww = logged_writer(app, EventLogChangelog(log), "per_min")
    for i in range(3):
        w.write_batch(i, batch(i), position(i))
        ww.write_batch(i, window_batch(i), position(i))
    rep = Replica(EventLogChangelog(log), APP, tmp_path / "replica",
                  partitions={"revenue": [0, 1], "per_min": [0]}).start()
    wait_for(rep.caught_up)
    active = Node(StateDirReader(tmp_path / "active"))
    standby = Node(ReplicaSource(rep))
    active.peer(standby)
    standby.peer(active)
    wait_for(lambda: all(p.alive for n in (active, standby) for p in n.membership.peers.values()))
    yield active, standby, w
    for n in (active, standby):
        n.close()
    rep.close()
    app.close()


def _outcomes(body) -> dict[int, dict]:
    return {p["partition"]: p for p in body["partitions"]}


def test_any_server_answers_every_partition_and_names_who_did(cluster) -> None:
    active, standby, _ = cluster
    sql = "SELECT customer, total, n FROM revenue ORDER BY customer"
    s1, _, a = active.http.sql(sql)
    s2, _, b = standby.http.sql(sql)
    assert s1 == s2 == 200 and a["rows"] == b["rows"] and a["rows"]
    assert Position.from_map(a["position"]) == Position.from_map(b["position"]) == Position.from_map(position(2))
    oa, ob = _outcomes(a), _outcomes(b)
    assert {p: (o["host"], o["active"]) for p, o in oa.items()} == {p: (active.server.url, True) for p in range(3)}
    # the replica hosts 0 and 1 (standby); partition 2 it lacks, so the active answered it
    assert {p: (o["host"], o["active"]) for p, o in ob.items()} == {
        0: (standby.server.url, False), 1: (standby.server.url, False), 2: (active.server.url, True)}


def test_a_point_lookup_names_who_answered_it_too(cluster) -> None:
    """Routing answers every lookup through ``query`` (its results name the host): the engine's point lane, which
    reads the local source directly, is not taken over a RoutedSource: its declared capabilities leave it out."""
    from gateway.engine.sources import Capabilities

    active, standby, _ = cluster
    assert Capabilities.of(active.routed).point_read is None and Capabilities.of(active.local).point_read is not None
    sql = "SELECT total FROM revenue WHERE customer = ?"
    for key in ("c3", "c4", "c5", "c6"):
        for node in (active, standby):
            for _ in range(2):  # the second: planned, so a lane would be taken if there were one
                status, _, body = node.http.sql(sql, params=[key])
                assert status == 200 and body["rows"], (key, body)
                assert all(p["host"] is not None for p in body["partitions"]), body
            assert node.gw.point(sql, [key]) is None


def test_typed_columns_of_a_peers_rows_survive_streamed_and_row_scans(cluster) -> None:
    """Window stores (timestamps) read from a peer: a streamed full scan and a key lookup equal the active's."""
    active, standby, _ = cluster
    for sql, params in (("SELECT * FROM per_min ORDER BY customer, window_start", None),
                        ("SELECT customer, window_start, n FROM per_min WHERE customer = ?", ["c3"])):
        s1, _, a = active.http.sql(sql, params=params) if params else active.http.sql(sql)
        s2, _, b = standby.http.sql(sql, params=params) if params else standby.http.sql(sql)
        assert s1 == s2 == 200 and a["rows"] == b["rows"] and a["rows"], (a, b)
    _, _, b = standby.http.sql("SELECT * FROM per_min")
    assert {o["partition"]: o["host"] for o in b["partitions"]} == {0: standby.server.url, 1: active.server.url}


def test_require_active_goes_to_the_active_and_fails_clearly_without_one(cluster) -> None:
    active, standby, _ = cluster
    sql = "SELECT count(*) FROM revenue"
    status, _, body = standby.http.sql(sql, session={"require_active": True})
    assert status == 200, body
    assert {(o["host"], o["active"]) for o in body["partitions"]} == {(active.server.url, True)}
    active.server.close()
    standby.membership.refresh()
    status, _, body = standby.http.sql(sql, session={"require_active": True})
    assert status == 503 and body["error"]["code"] == "PARTITION_FAILURE", body
    reasons = {p["partition"]: p["failure_reason"] for p in body["error"]["partitions"]}
    assert reasons == {0: "NOT_ACTIVE", 1: "NOT_ACTIVE", 2: "NOT_ACTIVE"}, body
    assert "No active host of store revenue partition 2 is reachable" in body["error"]["message"]
    status, _, body = standby.http.sql("SELECT count(*) FROM revenue WHERE _partition IN (0, 1)")
    assert status == 200 and {o["host"] for o in body["partitions"]} == {standby.server.url}


def test_a_bound_the_local_copy_has_not_reached_is_answered_by_a_peer(cluster, tmp_path) -> None:
    active, standby, w = cluster
    standby.local.replica.close()  # the replica stops applying: its copy stays at batch 2
    w.write_batch(3, batch(3), position(3))
    wait_for(lambda: standby.membership.peers[active.server.url].partitions[("revenue", 0)].position
             == Position.from_map(position(3)))
    status, _, body = standby.http.sql("SELECT count(*) FROM revenue", position=position(3), wait_ms=0)
    assert status == 200, body
    assert {o["host"] for o in body["partitions"]} == {active.server.url}
    assert Position.from_map(body["position"]) == Position.from_map(position(3))


def test_peers_report_roles_positions_and_lags(cluster) -> None:
    active, standby, _ = cluster
    status, _, raw = standby.http.request("GET", "/v1/health")
    import json

    body = json.loads(raw)
    assert status == 200 and body["host"] == standby.server.url
    parts = {(p["store"], p["partition"]): p for p in body["partitions"]}
    assert set(parts) == {("revenue", 0), ("revenue", 1), ("per_min", 0)}
    assert all(p["role"] == "standby" and p["offset_lag"] == 0 for p in parts.values())
    assert body["peers"][0]["url"] == active.server.url and body["peers"][0]["alive"]
    assert body["changelogs"]["revenue"] == {"serving": "shop-revenue-changelog", "local_generation": 0, "swaps": 0,
                                             "building": None, "building_lag": None}
    _, _, text = standby.http.request("GET", "/metrics")
    assert b'iqgate_partition_offset_lag{store="revenue",store_partition="0",role="standby"} 0' in text
    assert f'iqgate_peer_up{{peer="{active.server.url}"}} 1'.encode() in text
    _, _, raw = active.http.request("GET", "/v1/partitions")
    roles = {(p["store"], p["partition"]): p["role"] for p in json.loads(raw)["partitions"]}
    assert roles == {**{("revenue", p): "active" for p in range(3)}, **{("per_min", p): "active" for p in range(2)}}


def test_a_malformed_forwarded_request_is_refused_by_name(cluster) -> None:
    active, _, _ = cluster
    status, _, raw = active.http.request("POST", "/v1/iq", {"store": "revenue", "query": {"$query": "Nope"}})
    assert status == 400 and b"Nope" in raw
    status, _, raw = active.http.request("POST", "/v1/iq", raw=b"{not json")
    assert status == 400
    deep = b'{"store": "revenue", "query": {"$query": "KeyQuery", "fields": {"key": ' + b"[" * 100_000
    status, _, raw = active.http.request("POST", "/v1/iq", raw=deep + b"]" * 100_000 + b"}}}")
    assert status == 400 and b"nests JSON too deeply" in raw, raw  # was a RecursionError: 500
    # fields of the wrong type, each named (they reached the store and failed there as a 500)
    for fields, named in [({"keys": 1.5}, b"MultiKeyQuery.keys"), ({"keys": ["c01"]}, b"MultiKeyQuery.keys"),
                          ({"lower": "a", "result_order": True}, b"RangeQuery.result_order"),
                          ({"key": {"$set": ["a", "b"]}}, b"KeyQuery.key"),
                          ({"key": "c01", "skip_cache": ""}, b"KeyQuery.skip_cache"),
                          ({"key": "c01", "time_from": "x", "time_to": 5}, b"WindowKeyQuery.time_from"),
                          ({"key": "c01", "time_from": 0, "time_to": 2**70}, b"WindowKeyQuery.time_to")]:
        query = str(named.split(b".")[0], "ascii")
        status, _, raw = active.http.request("POST", "/v1/iq", {"store": "revenue",
                                                                "query": {"$query": query, "fields": fields}})
        assert status == 400 and named in raw, (fields, raw)
    # a key of another type than the store's (revenue is keyed by VARCHAR)
    status, _, raw = active.http.request("POST", "/v1/iq", {"store": "revenue",
                                                            "query": {"$query": "KeyQuery", "fields": {"key": 7}}})
    assert status == 400 and b"cannot be converted to VARCHAR" in raw, raw


def test_system_partitions_lists_every_hosts_copies_with_lags(cluster) -> None:
    active, standby, _ = cluster
    status, _, body = standby.http.sql("SELECT host, store, partition, role, offset_lag, alive FROM system.partitions "
                                       "ORDER BY host = ? DESC, store, partition", params=[standby.server.url])
    assert status == 200, body
    s, a = standby.server.url, active.server.url
    assert body["rows"] == [[s, "per_min", 0, "standby", 0, True], [s, "revenue", 0, "standby", 0, True],
                            [s, "revenue", 1, "standby", 0, True],
                            [a, "per_min", 0, "active", 0, True], [a, "per_min", 1, "active", 0, True],
                            [a, "revenue", 0, "active", 0, True], [a, "revenue", 1, "active", 0, True],
                            [a, "revenue", 2, "active", 0, True]]
    status, _, body = standby.http.sql("SELECT max(offset_lag) FROM system.partitions WHERE store = 'revenue'")
    assert status == 200 and body["rows"] == [[0]]


def test_a_replica_behind_a_bound_catches_up_for_a_moment_instead_of_failing(tmp_path) -> None:
    """No peers: a bound the replica reaches a few milliseconds later is answered by it, not NOT_UP_TO_BOUND."""
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "active")
    w = logged_writer(app, EventLogChangelog(log))
    w.write_batch(0, batch(0), position(0))
    rep = Replica(EventLogChangelog(log), APP, tmp_path / "replica").start()
    wait_for(rep.caught_up)
    routed = RoutedSource(ReplicaSource(rep), Membership([]), "http://replica", catch_up_wait_ms=5_000)
    gw = Gateway(routed)
    try:
        for i in range(1, 6):
            w.write_batch(i, batch(i), position(i))
            res = gw.sql("SELECT count(*) FROM revenue", position=position(i))
            assert res.position == Position.from_map(position(i))
            assert {p.host for p in res.partitions} == {"http://replica"}
        short = ReplicaSource(rep)
        try:
            with pytest.raises(Exception, match="NOT_UP_TO_BOUND"):  # a bound the changelog never reaches: no hang
                Gateway(RoutedSource(short, Membership([]), "http://replica", catch_up_wait_ms=300)
                        ).sql("SELECT count(*) FROM revenue", position=position(99))
        finally:
            short.reader.close()
    finally:
        gw.close()
        routed.local.close()
        rep.close()
        app.close()
