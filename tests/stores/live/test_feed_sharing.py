"""Many feeds of one store share one tail: one thread and one changelog reader per store, one snapshot for the
feeds that start together, each batch decoded once into events every feed gets (the same objects); a feed that
goes away frees its share at once, and the tail stops when the last feed is gone."""

from __future__ import annotations

import threading
import time

import pytest

from stores.live import Changes, HubLimits, LiveFeeds, Progress, Snapshot
from stores.log.eventlog import EventLog

from .workload import SPECS, Subscriber, Writer, batch_of, open_app, workload

FEEDS = 1000


def _tails() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("iqgate-live-")]


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "log")
    app, writers = open_app(tmp_path / "state", log, SPECS["kv"])
    yield app, writers
    app.close()


def test_a_thousand_feeds_share_one_tail_and_its_events(env) -> None:
    app, writers = env
    spec = SPECS["kv"]
    writer = Writer(app, writers, spec, workload("kv", 12))
    writer.write(4)
    before = set(_tails())
    with LiveFeeds(app, limits=HubLimits(idle_stop_s=0.2, keep_batches=4)) as feeds:
        feeds_ = [feeds.open_feed("kv", heartbeat_s=30) for _ in range(FEEDS)]
        hub = feeds.hub("kv")
        assert set(_tails()) - before == {"iqgate-live-kv"} and hub.stats["snapshots"] == 1
        snaps = [f.poll(1) for f in feeds_]
        assert all(isinstance(s, Snapshot) and s.last for s in snaps)
        assert len({id(s.rows[0][:-2]) for s in snaps}) == 1  # one decoded snapshot row, shown to all
        [f.poll(0) for f in feeds_]  # the progress after the snapshot
        writer.write(12)
        got: list[list[Changes]] = [[] for _ in feeds_]
        deadline = time.monotonic() + 60
        subs = [Subscriber(spec) for _ in range(3)]
        for sub, snap in zip(subs, snaps):
            sub.apply(snap)
        for i, f in enumerate(feeds_):
            while time.monotonic() < deadline:
                ev = f.poll(2)
                assert ev is not None, f"feed {i} stalled at {f.position}"
                if i < 3:
                    subs[i].apply(ev)
                if isinstance(ev, Changes):
                    got[i].append(ev)
                if isinstance(ev, Progress) and batch_of(ev.position, writer.topic()) == 11:
                    break
        assert all(len(g) == len(got[0]) and all(a is b for a, b in zip(g, got[0])) for g in got)  # shared objects
        assert all(s.answer() == writer.answer_at(11) for s in subs)
        assert hub.stats["batches"] <= 12 and len(feeds.stats()["kv"]) > 0 and feeds.feeds_open() == FEEDS
        for f in feeds_[1:]:
            f.close()  # clients going away
        assert feeds.feeds_open() == 1
        feeds_[0].close()
        deadline = time.monotonic() + 10
        while "iqgate-live-kv" in _tails() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "iqgate-live-kv" not in _tails(), "the tail outlived its last feed"
        again = feeds.open_feed("kv", snapshot=False)  # a new feed starts the tail again
        assert "iqgate-live-kv" in _tails() and batch_of(again.position, writer.topic()) == 11


def test_a_feed_gone_lets_the_backlog_go(env) -> None:
    app, writers = env
    writer = Writer(app, writers, SPECS["kv"], workload("kv", 40))
    writer.write(2)
    with LiveFeeds(app, limits=HubLimits(keep_batches=3)) as feeds:
        idle = feeds.open_feed("kv", snapshot=False)  # never read
        reader = feeds.open_feed("kv", snapshot=False)
        writer.write(40)
        while reader.position is None or batch_of(reader.position, writer.topic()) < 39:
            reader.poll(1)
        hub = feeds.hub("kv")
        assert len(hub.entries) >= 35  # kept for the idle feed
        idle.close()
        assert len(hub.entries) <= 3
        assert feeds.stats()["kv"]["feeds"] == 1 and feeds.stats()["kv"]["backlog_entries"] <= 3
