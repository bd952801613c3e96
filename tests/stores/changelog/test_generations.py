"""Changelogs of rebuilt generations (issue 17 with issues 13/20), without Spark: a topic per generation, logged from
batch 0 by the same writer; a replica follows the highest generation beside the copy it answers from and swaps by
the active's rule (never back in time); a rebuild begun anew deletes its topic and replicas never mix attempts."""

from __future__ import annotations

import threading
import time

import pytest

from stores.app import layout
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType
from stores.changelog import EventLogChangelog, changelog_topic, store_of_topic
from stores.changelog.topics import generation_topics, parse_changelog_topic
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.query import RangeQuery
from stores.iqv2.request import StateQueryRequest
from stores.log.eventlog import TOPIC_NAME_RE, EventLog
from stores.pipeline.changelogs import ChangelogWriters
from stores.replica import Replica, ReplicaSource
from stores.replica.standby import DISCOVER_EVERY_S

from .helpers import APP, batch, contents, kv_spec, position

SPEC = kv_spec()
V2 = type(SPEC)(SPEC.name, SPEC.kind, SPEC.key, (*SPEC.values, Column("avg", SqlType.DOUBLE)), SPEC.partitions,
                SPEC.source_topics)


def v2_batch(i: int, keys: int = 20, salt: float = 0.0) -> list[Change]:
    return [Change(f"c{k}", (float(k * (i + 1)) + salt, i + 1, float(k) + salt)) for k in range(keys) if (k + i) % 5]


def wait_for(cond, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_topic_names_per_generation_and_discovery() -> None:
    assert changelog_topic("shop", "revenue") == changelog_topic("shop", "revenue", 0) == "shop-revenue-changelog"
    assert changelog_topic("shop", "revenue", 3) == "shop-revenue.g3-changelog"
    for g in (0, 1, 12):  # round trip, and legal topic names on the embedded log and Kafka ([A-Za-z0-9._-]{1,249})
        t = changelog_topic("my-app.v2", "rev_2", g)
        assert parse_changelog_topic("my-app.v2", t) == ("rev_2", g) and TOPIC_NAME_RE.match(t)
        assert store_of_topic("my-app.v2", t) == "rev_2"
    for bad in ("shop-revenue.g0-changelog", "shop-revenue.g01-changelog", "shop-revenue.gx-changelog",
                "shop-revenue.g-changelog", "shop-re-venue-changelog", "shop-.g1-changelog", "shop--changelog",
                "orders", "other-revenue-changelog", "shop-iqgate-heartbeats"):
        assert parse_changelog_topic("shop", bad) is None, bad
    with pytest.raises(ValueError, match="generation"):
        changelog_topic("shop", "revenue", -1)
    assert generation_topics("shop", ["shop-revenue-changelog", "shop-revenue.g2-changelog", "orders",
                                      "shop-last.g1-changelog", "other-revenue.g5-changelog"]) == {
        "revenue": {0: "shop-revenue-changelog", 2: "shop-revenue.g2-changelog"},
        "last": {1: "shop-last.g1-changelog"}}


def test_the_swap_rule_is_the_actives() -> None:
    target = Position.from_map({"orders": {0: 9, 1: 4}})
    assert Position.from_map({"orders": {0: 9, 1: 5}}).covers(target)
    assert not Position.from_map({"orders": {0: 8, 1: 5}}).covers(target)
    assert not Position.from_map({"orders": {0: 9}}).covers(target)  # a partition it has not seen
    assert Position.empty().covers(Position.empty())


class _Pipeline(StoreTopology):
    """What ChangelogWriters reads of a pipeline's Topology: its log (changelogs on)."""

    changelogs = True


@pytest.fixture
def active(tmp_path):
    log = EventLog(tmp_path / "log")

    class Topology(_Pipeline):
        pass

    Topology.log = log
    app = StreamsApp(Topology([SPEC]), application_id=APP, state_dir=str(tmp_path / "active"))
    app.start()
    writers = ChangelogWriters(Topology([SPEC]), app)
    yield log, app, writers, tmp_path / "active"
    app.close()


def _rebuild(app: StreamsApp, writers: ChangelogWriters, spec=V2) -> int:
    """What the runtime does when a rebuild begins (runtime._recover / upgrades.begin_upgrade)."""
    g = app.begin_rebuild("revenue", "test", spec=spec)
    writers.begin("revenue", g)
    return g


class Reads:
    """Queries the replica in a loop; records every answer's Position, columns, and any that went back in time."""

    def __init__(self, src: ReplicaSource) -> None:
        self.src, self.went_back, self.columns, self.answers, self.failed = src, [], set(), 0, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last: Position | None = None
        while not self._stop.wait(0.005):
            res = self.src.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds()))
            if not res.partition_results or not all(r.is_success for r in res.partition_results.values()):
                self.failed.append({p: r.failure_reason for p, r in res.partition_results.items()})
                continue
            pos = res.position
            if last is not None and not pos.covers(last):
                self.went_back.append((last, pos))
            last = pos if last is None else last.merge(pos)
            self.columns.add(len(self.src.catalog()["revenue"].values))
            self.answers += 1

    def __enter__(self) -> Reads:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)


def _same(active_dir, replica_dir, spec, parts=range(3)) -> bool:
    """The replica's answering copy holds the active's current generation's rows, Position and last batch."""
    try:
        return all(contents(active_dir, spec, p, None) == contents(replica_dir, spec, p, None) for p in parts)
    except Exception:  # noqa: BLE001 - a file being swapped: not equal yet
        return False


def test_a_rebuilt_generation_is_logged_and_the_replica_swaps_only_once_it_has_caught_up(active, tmp_path) -> None:
    log, app, writers, active_dir = active
    cl = EventLogChangelog(log)
    old_topic, topic = changelog_topic(APP, "revenue"), changelog_topic(APP, "revenue", 1)
    for i in range(4):
        writers.get("revenue", None).write_batch(i, batch(i), position(i))
    rep = Replica(cl, APP, tmp_path / "replica").start()
    src = ReplicaSource(rep)
    try:
        wait_for(rep.caught_up, "the replica restored generation 0")
        with Reads(src) as reads:
            assert _rebuild(app, writers) == 1
            for i in range(3):  # the new generation, from its batch 0, still behind the old one's Position
                writers.get("revenue", 1).write_batch(i, v2_batch(i), position(i))
            assert [_batch_ids(log, topic, p) for p in range(3)] == [[0, 1, 2]] * 3
            wait_for(lambda: rep.generations()["revenue"]["building_lag"] == 0, "the replica restored generation 1")
            time.sleep(0.3)  # rounds in which a wrong rule would swap
            assert rep.generations()["revenue"]["serving"] == old_topic, "swapped before reaching the Position"
            writers.get("revenue", 1).write_batch(3, v2_batch(3), position(3))  # reaches the old Position
            wait_for(lambda: rep.generations()["revenue"]["serving"] == topic, "the replica's swap")
            app.finish_rebuild("revenue")  # the active swaps; its query goes on writing generation 1's topic
            writers.get("revenue", 1).write_batch(4, v2_batch(4), position(4))
            writers.get("revenue", None).write_batch(5, v2_batch(5), position(5))
            wait_for(lambda: old_topic not in log.list_topics(), "generation 0's topic deleted")
            wait_for(lambda: _same(active_dir, tmp_path / "replica", V2), "the replica equal to the active")
            wait_for(rep.caught_up, "caught up")
            wait_for(lambda: 3 in reads.columns, "an answer with the new column")
        assert reads.answers > 0 and reads.went_back == [] and reads.failed == [], (reads.went_back + reads.failed)[:3]
        assert reads.columns == {2, 3}  # answers from both generations, the new column after the swap
        assert [_batch_ids(log, topic, p) for p in range(3)] == [[0, 1, 2, 3, 4, 5]] * 3
        assert rep.generations()["revenue"] == {"serving": topic, "local_generation": 1, "swaps": 1,
                                                "building": None, "building_lag": None}
        wait_for(lambda: not layout.partition_path(tmp_path / "replica", "revenue", 0).exists(), "old copy deleted")
    finally:
        src.reader.close()
        rep.close()
    # a replica started now restores straight from generation 1's topic, and a restarted one resumes it
    for _ in range(2):
        with Replica(cl, APP, tmp_path / "fresh") as fresh:
            wait_for(fresh.caught_up, "a fresh replica caught up")
            assert _same(active_dir, tmp_path / "fresh", V2)
            assert fresh.generations()["revenue"]["serving"] == topic


def test_a_rebuild_begun_anew_starts_its_topic_over_and_replicas_never_mix_attempts(active, tmp_path) -> None:
    log, app, writers, active_dir = active
    cl = EventLogChangelog(log)
    topic = changelog_topic(APP, "revenue", 1)
    for i in range(2):
        writers.get("revenue", None).write_batch(i, batch(i), position(i))
    with Replica(cl, APP, tmp_path / "replica") as rep:
        wait_for(rep.caught_up, "generation 0 restored")
        _rebuild(app, writers)
        for i in range(2):  # attempt 1: other values, stopped before it reached the old Position
            writers.get("revenue", 1).write_batch(i, v2_batch(i, salt=1000.0), position(0))
        first_id = cl.topic_id(topic)
        wait_for(lambda: rep.generations()["revenue"]["building_lag"] == 0, "attempt 1 restored beside")
        # the pipeline restarts mid-rebuild: the generation starts over, files, checkpoint and changelog
        app.close()
        app2 = StreamsApp(type(app.topology)([SPEC]), application_id=APP, state_dir=str(active_dir))
        app2.start()
        try:
            writers2 = ChangelogWriters(type(app.topology)([SPEC]), app2)
            assert _rebuild(app2, writers2) == 1
            for i in range(4):  # attempt 2, quickly: a replica reading on at its old offsets would mix them
                writers2.get("revenue", 1).write_batch(i, v2_batch(i), position(i))
            assert cl.topic_id(topic) != first_id
            assert [_batch_ids(log, topic, p) for p in range(3)] == [[0, 1, 2, 3]] * 3
            wait_for(lambda: rep.generations()["revenue"]["serving"] == topic, "the replica's swap")
            app2.finish_rebuild("revenue")
            wait_for(lambda: _same(active_dir, tmp_path / "replica", V2), "the replica equal to attempt 2")
            rows = [r for p in range(3) for r in contents(tmp_path / "replica", V2, p, None)[0]]
            assert rows and not any(v >= 1000.0 for r in rows for v in r if isinstance(v, float))
            time.sleep(DISCOVER_EVERY_S * 1.5)  # a round of discovery: a copy of mixed attempts would be rebuilt
            assert rep.generations()["revenue"]["swaps"] == 1, "the replica answered from a copy mixing attempts"
        finally:
            app2.close()


def test_a_fresh_replica_during_a_rebuild_answers_from_the_old_generation_first(active, tmp_path) -> None:
    log, app, writers, active_dir = active
    cl = EventLogChangelog(log)
    for i in range(3):
        writers.get("revenue", None).write_batch(i, batch(i), position(i))
    _rebuild(app, writers)
    writers.get("revenue", 1).write_batch(0, v2_batch(0), position(0))
    with Replica(cl, APP, tmp_path / "replica") as rep:
        wait_for(lambda: rep.generations().get("revenue", {}).get("building_lag") == 0, "both restored")
        assert rep.generations()["revenue"]["serving"] == changelog_topic(APP, "revenue")
        assert rep.catalog()["revenue"] == SPEC
        for i in range(1, 3):
            writers.get("revenue", 1).write_batch(i, v2_batch(i), position(i))
        wait_for(lambda: rep.catalog()["revenue"] == V2, "the swap")
        app.finish_rebuild("revenue")
        wait_for(lambda: _same(active_dir, tmp_path / "replica", V2), "equal to the active")


def _batch_ids(log: EventLog, topic: str, p: int) -> list[int]:
    from stores.changelog import ChangelogRecord

    return [ChangelogRecord.from_value(r.value, "t").batch_id for r in log.read(topic, p)]


def test_a_replica_whose_topic_was_deleted_while_it_was_away_answers_from_its_copy_then_swaps(active, tmp_path):
    """The old generation's topic is deleted once the new one is current; a replica that was still on it (here:
    stopped through the whole rebuild) keeps answering from its copy at the Position it reached, restores the new
    generation beside it and swaps; the old topic's absence is no error."""
    log, app, writers, active_dir = active
    cl = EventLogChangelog(log)
    for i in range(3):
        writers.get("revenue", None).write_batch(i, batch(i), position(i))
    with Replica(cl, APP, tmp_path / "replica") as rep:
        wait_for(rep.caught_up, "generation 0 restored")
    writers.get("revenue", None).write_batch(3, batch(3), position(3))  # the replica misses this one
    _rebuild(app, writers)
    for i in range(5):
        writers.get("revenue", 1).write_batch(i, v2_batch(i), position(i))
    app.finish_rebuild("revenue")
    writers.get("revenue", None).write_batch(5, v2_batch(5), position(5))
    wait_for(lambda: changelog_topic(APP, "revenue") not in log.list_topics(), "generation 0's topic deleted")
    rep = Replica(cl, APP, tmp_path / "replica")
    src = ReplicaSource(rep)
    try:
        rep.start()
        res = src.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds()))
        assert res.position == Position.from_map(position(2))  # its copy, as far as it had got
        wait_for(lambda: rep.catalog()["revenue"] == V2 and _same(active_dir, tmp_path / "replica", V2), "the swap")
        assert rep.generations()["revenue"]["swaps"] == 1 and rep.errors == {}
        wait_for(lambda: src.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds()))
                 .position == Position.from_map(position(5)), "answers from the new copy")  # once its reader rescans
    finally:
        src.close()
    # stopped before the old copy's files went (their removal is a timer): the next start removes them
    store_dir = layout.store_dir(tmp_path / "replica", "revenue")
    (store_dir / "partition-0.db").write_bytes(b"left over")
    (store_dir / "gen-7").mkdir()
    with Replica(cl, APP, tmp_path / "replica") as rep:
        wait_for(rep.caught_up, "restarted")
        assert not (store_dir / "partition-0.db").exists() and not (store_dir / "gen-7").exists()
        assert _same(active_dir, tmp_path / "replica", V2) and rep.generations()["revenue"]["local_generation"] == 1


def test_the_building_generation_is_logged_exactly_once_like_generation_0(active, tmp_path) -> None:
    """A replayed batch of generation 1 is neither logged nor applied twice; a crash between its append and its
    commit applies the logged record, not the replay's rows (the same steps as generation 0)."""
    import pyarrow as pa

    from stores.catalog.partitioner import partition_for_key
    from stores.changelog import ChangelogRecord, ChangelogWriter

    log, app, writers, active_dir = active
    cl = EventLogChangelog(log)
    writers.get("revenue", None).write_batch(0, batch(0), position(0))
    g = _rebuild(app, writers)
    topic = changelog_topic(APP, "revenue", g)
    writers.get("revenue", g).write_batch(0, v2_batch(0), position(0))
    writers.get("revenue", g).write_batch(0, v2_batch(0), position(0))  # Spark replays it
    assert [_batch_ids(log, topic, p) for p in range(3)] == [[0]] * 3
    p = partition_for_key("c1", 3)
    rows = pa.table({"k": ["c1"], "ts": pa.nulls(1, pa.int64()), "ws": pa.nulls(1, pa.int64()),
                     "we": pa.nulls(1, pa.int64()), "del": [False], "v0": [111.0], "v1": [1], "v2": [5.0]})
    cl.append(topic, {p: ChangelogRecord(V2, 1, Position.from_map(position(1)), None, rows, cl.topic_id(topic))})
    # the restarted pipeline (its rebuild goes on from its checkpoint) replays batch 1 with other rows
    ChangelogWriter(app.writer("revenue", generation=g), cl, APP, g).write_batch(1, [Change("c1", (9.0, 9, 9.0))],
                                                                               position(1))
    got, pos, last = contents(active_dir, V2, p, g)
    [c1] = [r for r in got if r[0] == "c1"]
    assert last == 1 and 111.0 in c1 and 9.0 not in c1, c1
    assert [_batch_ids(log, topic, q) for q in range(3)] == [[0, 1]] * 3
    assert _batch_ids(log, changelog_topic(APP, "revenue"), 0) == [0]  # generation 0's topic untouched


def test_writers_closed_by_a_stopping_runtime_delete_nothing_and_the_next_start_does(active) -> None:
    """The old generation's topic is deleted in the background at generation 1's first batch as current. Writers
    already closed (the runtime stopped) leave it for the next start instead of working on after the stop."""
    log, app, writers, _ = active
    writers.get("revenue", None).write_batch(0, batch(0), position(0))
    _rebuild(app, writers)
    writers.get("revenue", 1).write_batch(0, v2_batch(0), position(0))
    app.finish_rebuild("revenue")
    old = changelog_topic(APP, "revenue")
    writers.close()
    writers.prepare("revenue")  # no background work either
    writers.get("revenue", None)  # generation 1 current: this is what starts the deletion
    time.sleep(0.5)  # the deletion takes milliseconds when it runs (the next start's, below)
    assert old in log.list_topics()
    writers.close()  # twice: nothing more to do
    again = ChangelogWriters(type(app.topology)([SPEC]), app)
    again.get("revenue", None)
    wait_for(lambda: old not in log.list_topics(), "generation 0's topic deleted by the next start")
