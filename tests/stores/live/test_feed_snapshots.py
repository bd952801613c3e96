"""Snapshots at one batch although partitions commit one by one; snapshots at or past a Position; key filters;
an empty store; what cannot be followed is refused before anything is streamed."""

from __future__ import annotations

import pytest

from stores.errors import UnknownStateStoreException
from stores.iqv2.position import Position
from stores.live import (
    NOT_UP_TO_BOUND,
    SUBSCRIPTION_UNAVAILABLE,
    Changes,
    LiveFeeds,
    Progress,
    Snapshot,
    SubscriptionError,
)
from stores.log.eventlog import EventLog
from stores.pipeline.changelogs import ChangelogWriters

from .workload import (
    SPECS,
    LiveTopology,
    Subscriber,
    Writer,
    batch_of,
    crash_mid_batch,
    drain,
    open_app,
    source_position,
    workload,
)


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "log")
    app, writers = open_app(tmp_path / "state", log, SPECS["kv"], SPECS["ver"])
    yield log, app, writers, tmp_path
    app.close()


@pytest.mark.parametrize("kind", ["kv", "ver"])
def test_partitions_a_batch_apart_are_rolled_forward_to_one_batch(env, kind) -> None:
    """Batch 6 committed by partitions 0 and 1 only (the pipeline died between commits): the snapshot is the answer
    at batch 6, partition 2 rolled forward with the changelog's record; the restarted pipeline's replay of batch 6
    changes nothing the feed has not shown, and later batches follow."""
    log, app, writers, _ = env
    spec = SPECS[kind]
    changes = workload(kind, 12, seed=3)
    writer = Writer(app, writers, spec, changes)
    writer.write(6)
    crash_mid_batch(app, log, spec, 6, changes[6], committed={0, 1})
    assert [app.partition_store(kind, p).last_batch_id() for p in range(3)] == [6, 6, 5]
    writer.model.apply(changes[6])
    writer.answers[6], writer.done = writer.model.answer(), 7
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed(kind)
        first = feed.poll(5)
        assert isinstance(first, Snapshot) and batch_of(first.position, writer.topic()) == 6
        sub = Subscriber(spec)
        sub.apply(first)
        drain(feed, sub, lambda: sub.position is not None)
        assert sub.answer() == writer.answer_at(6)
        writer.writers = ChangelogWriters(app.topology, app)  # the restarted pipeline replays batch 6, then goes on
        writer.write(12)
        drain(feed, sub, lambda: sub.position is not None and batch_of(sub.position, writer.topic()) == 11)
        assert sub.answer() == writer.answer_at(11)
        assert [batch_of(p, writer.topic()) for p in sub.progress] == sorted(batch_of(p, writer.topic())
                                                                             for p in sub.progress)


def test_a_snapshot_waits_for_the_position_it_must_be_at_or_past(env) -> None:
    log, app, writers, _ = env
    writer = Writer(app, writers, SPECS["kv"], workload("kv", 10))
    writer.write(3)
    with LiveFeeds(app) as feeds:
        with pytest.raises(SubscriptionError) as err:
            feeds.open_feed("kv", source_position(9), timeout_s=0.5)
        assert err.value.code == NOT_UP_TO_BOUND and err.value.retryable and "did not reach" in err.value.message
        import threading

        t = threading.Timer(0.3, writer.write, args=(10,))
        t.start()
        feed = feeds.open_feed("kv", source_position(9), timeout_s=20)
        snap = feed.poll(5)
        t.join()
        assert isinstance(snap, Snapshot) and batch_of(snap.position, writer.topic()) == 9
        sub = Subscriber(SPECS["kv"])
        sub.apply(snap)
        drain(feed, sub, lambda: sub.position is not None)
        assert sub.answer() == writer.answer_at(batch_of(sub.position, writer.topic()))


def test_a_key_filter_shows_only_its_keys_in_the_snapshot_and_the_changes(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 20))
    writer.write(8)
    wanted = {"c01", "c02", "c07", "c11"}
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed("kv", keys=sorted(wanted), key_ranges=[("c20", "c21")])
        sub = Subscriber(spec)
        drain(feed, sub, lambda: sub.position is not None)
        writer.write(20)
        drain(feed, sub, lambda: batch_of(sub.position, writer.topic()) == 19)
        shown = {r[0] for r in sub.rows.values()}
        expected = {r for r in writer.answer_at(19) if r[0] in wanted or "c20" <= r[0] <= "c21"}
        assert sub.answer() == expected and shown <= wanted | {"c20", "c21"}
        by_partition = feeds.open_feed("kv", partitions=[1])
        only = Subscriber(spec)
        drain(by_partition, only, lambda: only.position is not None and batch_of(only.position, writer.topic()) == 19)
        from stores.catalog.partitioner import partition_for_key

        assert only.answer() == {r for r in writer.answer_at(19) if partition_for_key(r[0], 3) == 1}


def test_an_empty_store_has_an_empty_snapshot_then_every_batch(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 5))
    with LiveFeeds(app) as feeds:
        writers.get("kv", None).prepare()  # the changelog topic exists before the first batch, as in a pipeline
        import time

        for _ in range(200):
            if writer.topic() in log.list_topics():
                break
            time.sleep(0.01)
        feed = feeds.open_feed("kv")
        snap = feed.poll(5)
        assert isinstance(snap, Snapshot) and snap.rows == () and snap.last and snap.position == Position.empty()
        writer.write(5)
        sub = Subscriber(spec)
        sub.apply(snap)
        drain(feed, sub, lambda: sub.position is not None and not sub.position.is_empty()
              and batch_of(sub.position, writer.topic()) == 4)
        assert sub.answer() == writer.answer_at(4)


def test_progress_comes_every_heartbeat_when_nothing_changes(env) -> None:
    log, app, writers, _ = env
    writer = Writer(app, writers, SPECS["kv"], workload("kv", 3))
    writer.write(3)
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed("kv", heartbeat_s=0.1)
        kinds = []
        for _ in range(8):
            ev = feed.poll(1.0)
            assert ev is not None, "a quiet feed must still send progress"
            kinds.append(type(ev))
        assert kinds[0] is Snapshot and kinds.count(Progress) >= 6
        quiet = feeds.open_feed("kv", snapshot=False, progress=False, heartbeat_s=0.1)
        assert quiet.poll(0.3) is None  # no progress asked for: nothing to send
        assert quiet.position is not None and batch_of(quiet.position, writer.topic()) == 2


def test_changes_are_shared_and_name_their_rows(env) -> None:
    """Every feed gets the same decoded batch; a delete names the row's identity and nothing else."""
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 6))
    writer.write(2)
    with LiveFeeds(app) as feeds:
        a, b = feeds.open_feed("kv", snapshot=False), feeds.open_feed("kv", snapshot=False)
        writer.changes[2] = [c for c in writer.changes[2]] + [writer.changes[0][0]._replace(value=None)]
        writer.write(3)
        ea = next(e for e in iter(lambda: a.poll(5), None) if isinstance(e, Changes))
        eb = next(e for e in iter(lambda: b.poll(5), None) if isinstance(e, Changes))
        assert ea is eb
        assert ea.deletes and all(r[1:4] == (None, None, None) and r[4] in range(3) for r in ea.deletes)
        assert all(len(r) == len(spec.columns()) + 2 and r[-1] == ea.position.to_json() for r in ea.upserts)


def test_what_cannot_be_followed_is_refused_at_open(env, tmp_path) -> None:
    log, app, writers, _ = env
    with LiveFeeds(app) as feeds:
        with pytest.raises(UnknownStateStoreException):
            feeds.open_feed("nope")
        with pytest.raises(SubscriptionError) as err:  # no batch yet, so no changelog topic yet
            feeds.open_feed("ver", timeout_s=2)
        assert err.value.code == SUBSCRIPTION_UNAVAILABLE and "no changelog topic" in err.value.message
        with pytest.raises(TypeError):
            feeds.open_feed("kv", from_position={"orders": {0: 1}})  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            feeds.open_feed("kv", buffer_bytes=0)

    class Off(LiveTopology):
        changelogs = False

    topology = Off([SPECS["kv"]])
    topology.log = log
    from stores.app.streams import StreamsApp

    other = StreamsApp(topology, application_id="other", state_dir=str(tmp_path / "off"))
    other.start()
    try:
        with LiveFeeds(other) as feeds, pytest.raises(SubscriptionError) as err:
            feeds.open_feed("kv")
        assert err.value.code == SUBSCRIPTION_UNAVAILABLE and "changelogs=False" in err.value.message
    finally:
        other.close()
