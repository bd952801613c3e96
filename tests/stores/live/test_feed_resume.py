"""Resuming: after a dropped feed, a restarted server (a read-only process over the state dir), from a point
older than the shared backlog (the feed reads the changelog itself until it meets it), from a pull query's
Position; and what cannot be resumed is refused with a stable code, never answered with a gap."""

from __future__ import annotations

import pytest

from gateway import Gateway
from stores.app.reader import StateDirReader
from stores.iqv2.position import Position
from stores.live import (
    INVALID_RESUME_POSITION,
    RESUME_POSITION_AHEAD,
    SUBSCRIBER_TOO_SLOW,
    SUBSCRIPTION_TOO_OLD,
    SUBSCRIPTION_UNAVAILABLE,
    Changes,
    HubLimits,
    LiveFeeds,
    SubscriptionError,
)
from stores.log.eventlog import EventLog

from .workload import SPECS, Subscriber, Writer, batch_of, drain, open_app, pull_answer, workload


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "log")
    app, writers = open_app(tmp_path / "state", log, SPECS["kv"], SPECS["win"], SPECS["ver"])
    yield log, app, writers, tmp_path
    app.close()


def _to(feed, sub: Subscriber, writer: Writer, batch: int) -> list[int]:
    """Drain to a progress at ``batch``, checking the answer at every whole Position on the way."""
    seen: list[int] = []

    def there() -> bool:
        if sub.position is None or sub.position.is_empty():
            return False
        b = batch_of(sub.position, writer.topic())
        if not seen or seen[-1] != b:
            assert sub.answer() == writer.answer_at(b), f"batch {b}"
            seen.append(b)
        return b >= batch

    drain(feed, sub, there)
    return seen


@pytest.mark.parametrize("kind", ["kv", "win", "ver"])
def test_a_dropped_feed_resumes_exactly_after_its_position(env, kind) -> None:
    log, app, writers, _ = env
    spec = SPECS[kind]
    writer = Writer(app, writers, spec, workload(kind, 30))
    writer.write(5)
    with LiveFeeds(app) as feeds:
        sub = Subscriber(spec)
        feed = feeds.open_feed(kind)
        _to(feed, sub, writer, 4)
        writer.write(12)
        _to(feed, sub, writer, 9)
        at = sub.position
        feed.close()  # the connection drops
        writer.write(20)
        again = feeds.open_feed(kind, at, snapshot=False)
        seen = _to(again, sub, writer, 19)
        assert seen[0] >= 9 and seen == sorted(seen)


def test_a_restarted_server_resumes_from_the_changelog(env) -> None:
    """The feed's server goes away; a read-only process over the same state dir takes the resume point."""
    log, app, writers, tmp_path = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 25))
    writer.write(6)
    sub = Subscriber(spec)
    with LiveFeeds(app) as feeds:
        _to(feeds.open_feed("kv"), sub, writer, 5)
    at = sub.position
    writer.write(15)
    reader = StateDirReader(tmp_path / "state")
    try:
        with LiveFeeds(reader) as feeds:  # the changelog's whereabouts come from app.json
            feed = feeds.open_feed("kv", at, snapshot=False)
            writer.write(25)
            seen = _to(feed, sub, writer, 24)
            assert seen == sorted(seen) and seen[-1] == 24
    finally:
        reader.close()


@pytest.mark.parametrize("kind", ["kv", "ver"])
def test_a_point_older_than_the_backlog_is_replayed_from_the_changelog(env, kind) -> None:
    log, app, writers, _ = env
    spec = SPECS[kind]
    writer = Writer(app, writers, spec, workload(kind, 40, seed=11))
    writer.write(4)
    with LiveFeeds(app, limits=HubLimits(keep_batches=2)) as feeds:
        sub = Subscriber(spec)
        first = feeds.open_feed(kind)
        _to(first, sub, writer, 3)
        first.close()
        at = sub.position
        # keep a feed attached so the hub runs on, and keeps only the last batches
        other = feeds.open_feed(kind, snapshot=False)
        writer.write(30)
        drain(other, Subscriber(spec), lambda: other.position is not None and batch_of(other.position,
                                                                                       writer.topic()) == 29)
        writer.write(31)  # the backlog lets go of what no feed needs as the next batch comes
        drain(other, Subscriber(spec), lambda: batch_of(other.position, writer.topic()) == 30)
        hub = feeds.hub(kind)
        assert hub.first_batch(writer.topic()) > 20, "the backlog still holds the resume point"
        feed = feeds.open_feed(kind, at, snapshot=False)
        assert feed.cursor is None  # reading the changelog itself
        writer.write(40)
        seen = _to(feed, sub, writer, 39)
        for _ in range(100):  # the replay may reach the last batch before the shared tail has it: a moment more
            if feed.cursor is not None:
                break
            feed.poll(0.05)
        # a versioned catch-up merges the batches it replays behind the store into whole answers (fewer progress points)
        assert seen[0] == 3 and (len(seen) > 5 or kind == "ver") and feed.cursor is not None  # follows the shared tail
        assert sub.answer() == writer.answer_at(39)


def test_a_pull_querys_position_is_a_resume_point(env) -> None:
    """The snapshot by a pull query, the changes after it by a feed (no race: the Position places it)."""
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 20))
    writer.write(8)
    result = Gateway(app).sql("SELECT * FROM kv")
    sub = Subscriber(spec)
    for row in pull_answer(Gateway(app), spec):
        sub.rows[(row[0],)] = row
    assert sub.answer() == writer.answer_at(7)
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed("kv", result.position, snapshot=False)
        writer.write(20)
        seen = _to(feed, sub, writer, 19)
        assert seen[0] >= 8
        # batch 3 repeats batch 2's source Position: resuming from it sends batch 3 again, harmlessly
        from .workload import source_position

        replay = Subscriber(spec)
        replay.rows = {(r[0],): r for r in writer.answer_at(2)}
        twice = feeds.open_feed("kv", source_position(2), snapshot=False)
        first = next(e for e in iter(lambda: twice.poll(5), None) if isinstance(e, Changes))
        assert batch_of(first.position, writer.topic()) == 3
        replay.apply(first)
        _to(twice, replay, writer, 19)


def test_what_cannot_be_resumed_is_refused(env) -> None:
    log, app, writers, tmp_path = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 12))
    writer.write(12)
    topic = writer.topic()
    token = lambda offsets: Position.from_map({"orders": {0: 9}, topic: offsets})  # noqa: E731
    with LiveFeeds(app) as feeds:
        for bad, why in ((token({0: 3, 1: 3}), "names partitions"), (token({0: 3, 1: 4, 2: 3}), "different batches"),
                         (token({0: 3, 1: 3, 2: 99}), "no record at offset"),
                         (Position.from_map({"orders": {0: 15, 1: 4}}), "not one store 'kv' passed through")):
            with pytest.raises(SubscriptionError) as err:
                feeds.open_feed("kv", bad, snapshot=False)
            assert err.value.code == INVALID_RESUME_POSITION and why in err.value.message, err.value
        with pytest.raises(SubscriptionError) as err:
            feeds.open_feed("kv", Position.from_map({f"{topic[:-len('-changelog')]}.g3-changelog": {0: 1}}),
                            snapshot=False)
        assert err.value.code == RESUME_POSITION_AHEAD and err.value.retryable
    log.delete_records(topic, {p: 5 for p in range(3)})  # retention took the start of the changelog
    with LiveFeeds(app) as feeds:  # a fresh server: nothing held in memory
        for old in (token({0: 2, 1: 2, 2: 2}), Position.from_map({"orders": {0: 19, 1: 14}})):
            with pytest.raises(SubscriptionError) as err:
                feeds.open_feed("kv", old, snapshot=False)
            assert err.value.code == SUBSCRIPTION_TOO_OLD and not err.value.retryable, err.value
            assert batch_of(err.value.oldest, topic) == 5 and err.value.oldest.to_json() in err.value.message
        sub = Subscriber(spec)
        sub.rows = {(r[0],): r for r in writer.answer_at(5)}
        _to(feeds.open_feed("kv", err.value.oldest, snapshot=False), sub, writer, 11)


def test_a_slow_subscriber_ends_with_the_position_to_resume_from(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 40))
    writer.write(3)
    with LiveFeeds(app) as feeds:
        sub = Subscriber(spec)
        slow = feeds.open_feed("kv", buffer_bytes=6_000)
        _to(slow, sub, writer, 2)
        writer.write(40)  # the subscriber reads nothing meanwhile
        with pytest.raises(SubscriptionError) as err:
            drain(slow, sub, lambda: False, timeout_s=10)
        assert err.value.code == SUBSCRIBER_TOO_SLOW and err.value.retryable
        assert err.value.resume_from == sub.position and "6000 bytes" in err.value.message
        assert slow not in feeds.hub("kv").feeds  # it holds nothing any more
        _to(feeds.open_feed("kv", err.value.resume_from, snapshot=False), sub, writer, 39)


def test_a_replay_cut_by_retention_ends_too_old_and_a_lost_changelog_ends_every_feed(env) -> None:
    log, app, writers, _ = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 20))
    writer.write(5)
    with LiveFeeds(app) as feeds:
        sub = Subscriber(spec)
        _to(feeds.open_feed("kv"), sub, writer, 4)
    writer.write(20)
    with LiveFeeds(app) as feeds:  # a fresh server: the resume point is read from the changelog
        feed = feeds.open_feed("kv", sub.position, snapshot=False)
        assert feed.cursor is None
        log.delete_records(writer.topic(), {p: 12 for p in range(3)})
        with pytest.raises(SubscriptionError) as err:
            drain(feed, sub, lambda: False, timeout_s=10)
        assert err.value.code == SUBSCRIPTION_TOO_OLD and "was cut" in err.value.message
        live = feeds.open_feed("kv", snapshot=False)
        log.delete_topic(writer.topic())  # the changelog is gone while feeds follow it
        with pytest.raises(SubscriptionError) as err:
            drain(live, Subscriber(spec), lambda: False, timeout_s=10)
        assert err.value.code == SUBSCRIPTION_UNAVAILABLE and err.value.resume_from is not None
