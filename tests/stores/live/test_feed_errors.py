"""What ends a feed or refuses one, each with its stable code: a changelog lacking a batch a store applied, a
topic created again under a reader, a store's changelog out of reach from a read-only process, closed feeds."""

from __future__ import annotations

import pytest

from stores.app.reader import StateDirReader
from stores.app.streams import StoreTopology, StreamsApp
from stores.live import SUBSCRIPTION_CLOSED, SUBSCRIPTION_UNAVAILABLE, LiveFeeds, SubscriptionError
from stores.live.reader import ChangeReader, TopicRecreated
from stores.log.eventlog import EventLog

from .workload import SPECS, Subscriber, Writer, crash_mid_batch, drain, open_app, workload


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "log")
    app, writers = open_app(tmp_path / "state", log, SPECS["kv"])
    yield log, app, writers, tmp_path
    app.close()


def test_a_changelog_lacking_a_batch_ends_the_feeds_instead_of_skipping_it(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    changes = workload("kv", 10)
    writer = Writer(app, writers, spec, changes)
    writer.write(5)
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed("kv", snapshot=False)
        crash_mid_batch(app, log, spec, 5, changes[5], committed=set(), logged={0, 1})  # partition 2 never got it
        crash_mid_batch(app, log, spec, 6, changes[6], committed={0, 1, 2})
        with pytest.raises(SubscriptionError) as err:
            drain(feed, Subscriber(spec), lambda: False, timeout_s=10)
        assert err.value.code == SUBSCRIPTION_UNAVAILABLE and "lacks batch 5 in partition(s) [2]" in err.value.message


def test_a_reader_never_mixes_two_topics_or_two_definitions(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    changes = workload("kv", 10)
    writer = Writer(app, writers, spec, changes)
    writer.write(3)
    feeds = LiveFeeds(app)
    try:
        other = type(spec)(spec.name, spec.kind, spec.key, spec.values[:1], spec.partitions, spec.source_topics)
        reader = ChangeReader(feeds.access, "kv", other, writer.topic(), {p: 0 for p in range(3)}, paced=False)
        with pytest.raises(TopicRecreated, match="another definition"):
            for _ in range(50):
                reader.poll(0.05)
        reader.close()
        crash_mid_batch(app, log, spec, 3, changes[3], committed=set(), topic_id="another-epoch")
        reader = ChangeReader(feeds.access, "kv", spec, writer.topic(), {p: 0 for p in range(3)}, paced=False)
        with pytest.raises(TopicRecreated, match="another-epoch"):
            for _ in range(50):
                reader.poll(0.05)
        reader.close()
    finally:
        feeds.close()


def test_a_read_only_process_that_cannot_find_the_changelog_says_so(tmp_path) -> None:
    app = StreamsApp(StoreTopology([SPECS["kv"]]), application_id="bare", state_dir=str(tmp_path / "s"))
    app.start()  # no log: app.json names no source
    reader = StateDirReader(tmp_path / "s")
    try:
        with LiveFeeds(reader) as feeds, pytest.raises(SubscriptionError) as err:
            feeds.open_feed("kv")
        assert err.value.code == SUBSCRIPTION_UNAVAILABLE and "LiveFeeds(changelog=...)" in err.value.message
        with pytest.raises(TypeError, match="StreamsApp, a StateDirReader or a ReplicaSource"):
            LiveFeeds(object())
    finally:
        reader.close()
        app.close()


def test_closed_feeds_say_so_with_their_position(env) -> None:
    log, app, writers, _ = env
    writer = Writer(app, writers, SPECS["kv"], workload("kv", 4))
    writer.write(4)
    feeds = LiveFeeds(app)
    a, b = feeds.open_feed("kv"), feeds.open_feed("kv")
    sub = Subscriber(SPECS["kv"])
    drain(a, sub, lambda: sub.position is not None)
    a.close()
    with pytest.raises(SubscriptionError) as err:
        a.poll(0.1)
    assert err.value.code == SUBSCRIPTION_CLOSED and err.value.resume_from == sub.position
    feeds.close()  # the server's feeds end: every open feed is told
    with pytest.raises(SubscriptionError) as err:
        drain(b, Subscriber(SPECS["kv"]), lambda: False, timeout_s=5)
    assert err.value.code == SUBSCRIPTION_CLOSED
    with pytest.raises(SubscriptionError):
        feeds.open_feed("kv")
