"""The upgrade plan and the app's side of an upgrade, without Spark (issue 20 items 1, 3-5).

A topology written by hand gives specs and definitions as a pipeline file's
Topology does; the test plays the runtime (begin and finish the rebuild), so
what the app does on its own is checked: the plan, the old version answering
under the store's name until the swap, the definition recorded at the swap,
removed stores no longer served and kept until dropped, and the source check
a rebuild needs (the embedded log's deleted records).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from gateway.engine.errors import ColumnNotYetAvailableError, SqlError
from gateway.engine.gateway import Gateway
from stores import Position, StreamsApp
from stores.app import layout
from stores.app.reader import StateDirReader
from stores.app.upgrade import (
    REBUILD_REFUSED,
    describe_changes,
    drop_removed,
    missing_history,
    partial_history,
    plan_upgrade,
    refusal_message,
)
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import Change
from stores.log.eventlog import EventLog

TOPIC = "orders"


def kv(name: str, *values: str, key: str = "k", kind: StoreKind = StoreKind.KEY_VALUE,
       topics: tuple[str, ...] = (TOPIC,)) -> StoreSpec:
    return StoreSpec(name, kind, Column(key, SqlType.VARCHAR), tuple(Column(v, SqlType.BIGINT) for v in values),
                     partitions=2, source_topics=topics)


class Pipeline:
    """What a pipeline file's Topology gives the app: specs and a definition (with its plan hash) per store."""

    def __init__(self, specs: Sequence[StoreSpec], plans: dict[str, str] | None = None) -> None:
        self.specs = list(specs)
        self.plans = plans or {}

    def store_specs(self) -> list[StoreSpec]:
        return self.specs

    def store_definitions(self) -> dict[str, dict[str, Any]]:
        return {s.name: {"kind": s.kind.value, "values": [c.name for c in s.values],
                         "plan": self.plans.get(s.name, "p1"), "fingerprint": f"{s.name}-{self.plans.get(s.name)}"}
                for s in self.specs}

    def create_runtime(self, app: Any) -> None:
        return None


def _start(pipeline: Pipeline, state_dir: Any) -> StreamsApp:
    app = StreamsApp(pipeline, "shop", state_dir)
    app.start()
    return app


def _fill(app: StreamsApp, store: str, rows: dict[str, tuple[int, ...]], offset: int, gen: int | None = None) -> None:
    app.writer(store, generation=gen).write_batch(offset, [Change(k, v) for k, v in rows.items()],
                                                  Position.from_map({TOPIC: {0: offset}}))


def test_the_plan_names_each_store_once_with_what_changed(tmp_path: Any) -> None:
    v1 = Pipeline([kv("revenue", "revenue", "orders"), kv("per_min", "n"), kv("gone", "n")])
    app = _start(v1, tmp_path)
    assert [c.line() for c in app.upgrades.plan.changes] == [
        "revenue: new: built from the start of its source", "per_min: new: built from the start of its source",
        "gone: new: built from the start of its source"]
    assert app.close(10)
    v2 = Pipeline([kv("revenue", "revenue", "orders", "avg_amount"), kv("per_min", "n"), kv("items", "n")])
    plan = plan_upgrade(tmp_path, {s.name: s for s in v2.specs}, v2.store_definitions())
    assert {c.store: c.action for c in plan.changes} == {
        "revenue": "changed", "per_min": "unchanged", "items": "new", "gone": "removed"}
    assert plan.get("revenue").what == ("value columns: + avg_amount BIGINT",)
    assert plan.summary() == "1 unchanged, 1 new, 1 changed, 1 removed"
    assert "iqgate upgrade --drop-removed" in plan.get("gone").line()
    # a different computation under the same columns is a change too
    v3 = Pipeline(v1.specs, plans={"per_min": "p2"})
    plan = plan_upgrade(tmp_path, {s.name: s for s in v3.specs}, v3.store_definitions())
    assert plan.get("per_min").what == ("the query's plan (same columns, different computation)",)


def test_the_plan_says_an_unchanged_store_is_rebuilt_when_its_shared_query_has_a_changed_member(tmp_path: Any) -> None:
    v1 = Pipeline([kv("revenue", "revenue"), kv("per_min", "n"), kv("last", "n"), kv("alone", "n")])
    assert _start(v1, tmp_path).close(10)
    # what the runtime records for two shared queries (pipeline/shared_query.py)
    for gid, members in (("g1", ["revenue", "per_min"]), ("g2", ["last", "alone"])):
        layout.write_json_atomic(layout.shared_checkpoints_dir(tmp_path) / gid / "members.json", {"members": members})
    v2 = Pipeline([kv("revenue", "revenue", "avg"), kv("per_min", "n"), kv("last", "n"), kv("alone", "n")])
    plan = plan_upgrade(tmp_path, {s.name: s for s in v2.specs}, v2.store_definitions())
    assert [c.action for c in plan.changes] == ["changed", "unchanged", "unchanged", "unchanged"]
    assert plan.get("per_min").rebuilt_with == ("revenue",)
    assert plan.get("per_min").line() == (
        "per_min: unchanged, but rebuilt beside the old version all the same: it shares a streaming query with "
        "revenue, whose state no longer fits that query")
    assert plan.get("per_min").to_json()["rebuilt_with"] == ["revenue"]
    assert plan.get("last").line() == "last: unchanged" and plan.get("alone").rebuilt_with == ()
    # a member that left the pipeline breaks its query too
    v3 = Pipeline([kv("revenue", "revenue"), kv("per_min", "n"), kv("last", "n")])
    plan = plan_upgrade(tmp_path, {s.name: s for s in v3.specs}, v3.store_definitions())
    assert plan.get("last").rebuilt_with == ("alone",) and plan.get("per_min").rebuilt_with == ()
    # a damaged record of a shared query is skipped, as the runtime skips it
    (layout.shared_checkpoints_dir(tmp_path) / "g2" / "members.json").write_text("{not json")
    plan = plan_upgrade(tmp_path, {s.name: s for s in v3.specs}, v3.store_definitions())
    assert plan.get("last").rebuilt_with == ()


@pytest.mark.parametrize(("old", "new", "what"), [
    (kv("s", "a"), kv("s", "a", kind=StoreKind.TIMESTAMPED_KEY_VALUE), "kind: key_value -> timestamped_key_value"),
    (kv("s", "a"), kv("s", "a", key="customer"), "key: k VARCHAR -> customer VARCHAR"),
    (kv("s", "a", "b"), kv("s", "a"), "value columns: - b"),
    (kv("s", "a", "b"), kv("s", "b", "a"), "value column order: b, a"),
    (kv("s", "a"), kv("s", "a", topics=("orders", "refunds")), "source topics: orders -> orders, refunds"),
])
def test_what_changed_is_said_in_words(old: StoreSpec, new: StoreSpec, what: str) -> None:
    assert describe_changes(old, new, None, None) == [what]


def test_a_changed_store_answers_with_its_old_version_until_the_swap(tmp_path: Any) -> None:
    app = _start(Pipeline([kv("revenue", "revenue"), kv("per_min", "n")]), tmp_path)
    _fill(app, "revenue", {"c1": (10,), "c2": (20,)}, 5)
    _fill(app, "per_min", {"c1": (1,)}, 5)
    assert app.close(10)

    app = _start(Pipeline([kv("revenue", "revenue", "avg"), kv("per_min", "n")]), tmp_path)
    gw = Gateway(app)
    try:
        assert app.upgrades.plan.get("revenue").action == "changed"
        assert [c.name for c in app.catalog()["revenue"].values] == ["revenue"]  # the old version, with its data
        assert sorted(gw.sql("SELECT k, revenue FROM revenue").rows()) == [("c1", 10), ("c2", 20)]
        with pytest.raises(ColumnNotYetAvailableError, match="'avg' of store revenue arrives when the store's "
                                                             "rebuild completes.*has not started") as err:
            gw.sql("SELECT k, avg FROM revenue")
        assert err.value.retryable and err.value.http_status == 503
        with pytest.raises(SqlError, match="unknown column 'n'"):
            gw.sql("SELECT n FROM revenue")
        # the runtime's part, by hand: rebuild beside, then swap
        change = app.upgrades.pending["revenue"]
        g = app.begin_rebuild("revenue", "definition changed", spec=change.new_spec)
        _fill(app, "revenue", {"c1": (10, 5), "c2": (20, 20), "c3": (7, 7)}, 6, gen=g)
        assert sorted(gw.sql("SELECT k, revenue FROM revenue").rows()) == [("c1", 10), ("c2", 20)]
        app.finish_rebuild("revenue")
        assert sorted(gw.sql("SELECT k, revenue, avg FROM revenue").rows()) == [
            ("c1", 10, 5), ("c2", 20, 20), ("c3", 7, 7)]
        spec, gen, extras = layout.read_store(tmp_path, "revenue")
        assert gen == 1 and spec.value_names() == ("revenue", "avg")
        assert extras["definition"]["values"] == ["revenue", "avg"]
        assert app.upcoming_columns("revenue") is None
    finally:
        gw.close()
        assert app.close(10)
    app = _start(Pipeline([kv("revenue", "revenue", "avg"), kv("per_min", "n")]), tmp_path)
    try:
        assert [c.action for c in app.upgrades.plan.changes] == ["unchanged", "unchanged"]
    finally:
        assert app.close(10)


def test_a_removed_store_is_not_served_and_its_files_stay_until_dropped(tmp_path: Any) -> None:
    app = _start(Pipeline([kv("a", "n"), kv("b", "n")]), tmp_path)
    _fill(app, "b", {"x": (1,)}, 3)
    assert app.close(10)
    app = _start(Pipeline([kv("a", "n")]), tmp_path)
    try:
        assert app.upgrades.plan.get("b").action == "removed"
        assert sorted(app.catalog()) == ["a"]
        reader = StateDirReader(tmp_path)
        try:
            assert sorted(reader.catalog()) == ["a"]  # read-only gateways stop serving it too
        finally:
            reader.close()
    finally:
        assert app.close(10)
    assert layout.partition_path(tmp_path, "b", 0).exists()
    plan = plan_upgrade(tmp_path, {"a": kv("a", "n")}, Pipeline([kv("a", "n")]).store_definitions())
    assert drop_removed(tmp_path, plan) == ["b"]
    assert not layout.store_dir(tmp_path, "b").exists() and layout.store_dir(tmp_path, "a").exists()
    # a store that comes back is new again, served again
    app = _start(Pipeline([kv("a", "n"), kv("b", "n")]), tmp_path)
    try:
        assert app.upgrades.plan.get("b").action == "new" and sorted(app.catalog()) == ["a", "b"]
    finally:
        assert app.close(10)


def test_a_rebuild_is_refused_when_the_source_lost_early_records(tmp_path: Any) -> None:
    log = EventLog(tmp_path / "log")
    log.create_topic(TOPIC, partitions=3)
    log.append_batch(TOPIC, [(f"c{i}", {"amount": i}, 1000 + i) for i in range(60)])
    assert missing_history(log, [TOPIC]) == {}
    ends = log.end_offsets(TOPIC)
    assert log.delete_records(TOPIC, {1: 4}) == {0: 0, 1: 4, 2: 0}
    assert missing_history(log, [TOPIC, "not-a-topic"]) == {TOPIC: {1: 4}}
    msg = refusal_message("revenue", {TOPIC: {1: 4}}, log.describe())
    assert msg.startswith(f"{REBUILD_REFUSED}: store 'revenue' cannot be rebuilt from event log at")
    assert "orders partition 1: offsets 0..3 are gone (first held 4)" in msg
    assert "--rebuild-from-available" in msg and "keep the store's old definition" in msg
    assert log.end_offsets(TOPIC) == ends  # offsets never move


def test_deleted_records_cannot_be_read_and_offsets_stay(tmp_path: Any) -> None:
    from stores.log.eventlog import EventLogError, RecordsDeletedError

    log = EventLog(tmp_path)
    log.create_topic(TOPIC, partitions=1)
    log.append_batch(TOPIC, [("k", {"i": i}, 1000 + i) for i in range(10)])
    log.delete_records(TOPIC, {0: 6})
    assert log.delete_records(TOPIC, {0: 2}) == {0: 6}  # never goes back
    assert [r.offset for r in log.read(TOPIC, 0, 6)] == [6, 7, 8, 9]
    with pytest.raises(RecordsDeletedError, match="before offset 6 were deleted; cannot read from offset 0"):
        log.read(TOPIC, 0, 0)
    with pytest.raises(EventLogError, match="cannot delete records before offset 11: the partition ends at 10"):
        log.delete_records(TOPIC, {0: 11})
    with pytest.raises(EventLogError, match="has no partition 3"):
        log.delete_records(TOPIC, {3: 1})
    assert EventLog(tmp_path).low_offsets(TOPIC) == {0: 6}  # on disk, for every process
    log.append_batch(TOPIC, [("k", {"i": 10}, 2000)])
    assert [r.offset for r in log.read(TOPIC, 0, 9)] == [9, 10]


def test_over_http_the_new_column_is_503_and_the_rebuild_progress_is_in_stores_and_metrics(tmp_path: Any) -> None:
    import json

    from tests.gateway.gwfixtures import Http, serve_gateway

    app = _start(Pipeline([kv("revenue", "revenue")]), tmp_path)
    _fill(app, "revenue", {"c1": (10,)}, 5)
    assert app.close(10)
    app = _start(Pipeline([kv("revenue", "revenue", "avg")]), tmp_path)
    try:
        app.begin_rebuild("revenue", "its definition changed", spec=app.upgrades.pending["revenue"].new_spec)
        app.health.progress("revenue", {"phase": "rebuilding", "reached": 4, "target": 10, "records_per_s": 2.0,
                                        "eta_s": 3.0})
        with serve_gateway(Gateway(app)) as srv:
            http = Http(srv.url)
            st, _, body = http.sql("SELECT k, avg FROM revenue")
            assert st == 503 and body["error"]["code"] == "COLUMN_NOT_YET_AVAILABLE" and body["error"]["retryable"]
            assert "rebuild progress: 4 of 10 records at 2 records/s, ETA 3 s" in body["error"]["message"]
            st, _, body = http.sql("SELECT k, revenue FROM revenue")
            assert st == 200 and body["rows"] == [["c1", 10]]
            _, _, raw = http.request("GET", "/v1/stores")
            store = json.loads(raw)["stores"][0]
            assert [c["name"] for c in store["columns"]][:2] == ["k", "revenue"]
            assert store["status"]["status"] == "rebuilding" and store["status"]["progress"]["target"] == 10
            assert store["history"] is None  # a full rebuild; partial history: see the test below
            st, _, raw = http.request("GET", "/v1/health")
            assert st == 200 and json.loads(raw)["healthy"] is False
            _, _, raw = http.request("GET", "/metrics")
            text = raw.decode()
            assert 'iqgate_store_progress_records{store="revenue",phase="rebuilding"} 4' in text
            assert 'iqgate_store_progress_target_records{store="revenue",phase="rebuilding"} 10' in text
            assert 'iqgate_store_progress_eta_seconds{store="revenue",phase="rebuilding"} 3.0' in text
    finally:
        assert app.close(10)


def test_a_store_file_that_does_not_match_its_spec_is_not_retryable(tmp_path: Any) -> None:
    """The failure issue 20 found (``no such column`` as a retryable STORE_EXCEPTION): no retry can fix it."""
    from gateway.engine.errors import PartitionFailureError

    app = _start(Pipeline([kv("s", "a")]), tmp_path)
    _fill(app, "s", {"x": (1,)}, 2)
    assert app.close(10)
    layout.write_store(tmp_path, "s", kv("s", "a", "b"))  # a spec the files were not built for
    gw = Gateway.open(tmp_path)
    try:
        with pytest.raises(PartitionFailureError, match="STORE_EXCEPTION \\(not retryable\\).*no such column") as err:
            gw.sql("SELECT k, b FROM s")
        assert err.value.retryable is False and err.value.http_status != 503
        assert all(p["retryable"] is False for p in err.value.partitions)
    finally:
        gw.close()


def test_read_only_gateways_and_system_stores_show_the_rebuild_and_partial_history(tmp_path: Any) -> None:
    """``serve --workers`` children read the state dir only: what the writer publishes must reach them (issue 20)."""
    app = _start(Pipeline([kv("revenue", "revenue"), kv("per_min", "n")]), tmp_path)
    _fill(app, "revenue", {"c1": (10,)}, 5)
    assert app.close(10)
    app = _start(Pipeline([kv("revenue", "revenue", "avg"), kv("per_min", "n")]), tmp_path)
    reader = StateDirReader(tmp_path)
    writer_gw, reader_gw = Gateway(app), Gateway(reader)
    try:
        g = app.begin_rebuild("revenue", "its definition changed", spec=app.upgrades.pending["revenue"].new_spec)
        with pytest.raises(ColumnNotYetAvailableError, match="'avg' of store revenue arrives.*has not started"):
            reader_gw.sql("SELECT k, avg FROM revenue")
        # a first report without figures: the console line and the health summary skip it (no KeyError)
        from gateway.serving.hosting import progress_line
        from stores.app.health import StoreStatus, overall
        from stores.iqv2.state import State

        assert progress_line(app.status()) is None
        early = {"revenue": StoreStatus(status="starting", progress={"phase": "rebuilding", "upcoming_columns": ["a"]})}
        assert overall(State.REBALANCING, early, 0.0)["reason"] == "the client is REBALANCING"
        app.health.progress("revenue", {"phase": "rebuilding", "reached": 4, "target": 10, "records_per_s": 2.0,
                                        "eta_s": 3.0, "upcoming_columns": ["avg"],
                                        "position": {TOPIC: {"0": 3}}, "target_position": {TOPIC: {"0": 9}}})
        with pytest.raises(ColumnNotYetAvailableError, match="rebuild progress: 4 of 10 records") as err:
            reader_gw.sql("SELECT k, avg FROM revenue")
        assert err.value.retryable
        with pytest.raises(SqlError, match="unknown column 'nope'"):  # not every unknown column is upcoming
            reader_gw.sql("SELECT nope FROM revenue")
        sql = ("SELECT store, status, phase, reached, target, eta_s, upcoming_columns, partial_history, target_position"
               " FROM system.stores ORDER BY store")
        for gw in (writer_gw, reader_gw):
            rows = gw.sql(sql).rows()
            assert rows[0][0] == "per_min" and rows[0][2] is None and rows[0][6] is None and rows[0][7] is False
            assert rows[1][:8] == ("revenue", "rebuilding", "rebuilding", 4, 10, 3.0, ["avg"], False), rows
            assert json.loads(rows[1][8]) == {TOPIC: {"0": 9}}
        # rebuilt from what the source still held: every face says the answers miss early history
        app.upgrades.partial["revenue"] = partial_history({TOPIC: {0: 3}})
        _fill(app, "revenue", {"c1": (10, 10)}, 6, gen=g)
        app.finish_rebuild("revenue")
        want = [(True, json.dumps({TOPIC: {"0": 3}}), None)]
        sql = "SELECT partial_history, history_since, upcoming_columns FROM system.stores WHERE store = 'revenue'"
        assert writer_gw.sql(sql).rows() == want
        deadline = time.monotonic() + 10  # a reader rescans store.json at most every 100 ms
        while reader_gw.sql(sql).rows() != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reader_gw.sql(sql).rows() == want
        assert app.history("revenue")["partial"] is True and reader.history("per_min") is None
    finally:
        writer_gw.close()
        reader_gw.close()
        assert app.close(10)
