"""Feeds on a standby replica: its changes come from the changelogs it applies (paced by its copy), exact at every
progress; a Position a feed on the active gave resumes exactly on the replica, and the other way round."""

from __future__ import annotations

import pytest

from stores.changelog import EventLogChangelog
from stores.live import LiveFeeds
from stores.log.eventlog import EventLog
from stores.replica import Replica, ReplicaSource

from .workload import APP, SPECS, Subscriber, Writer, batch_of, drain, open_app, workload


@pytest.mark.parametrize("kind", ["kv", "ver", "ses"])
def test_a_replica_feeds_exactly_and_takes_the_actives_resume_points(tmp_path, kind) -> None:
    log = EventLog(tmp_path / "log")
    spec = SPECS[kind]
    app, writers = open_app(tmp_path / "state", log, spec)
    writer = Writer(app, writers, spec, workload(kind, 30, seed=21))
    writer.write(5)
    replica = Replica(EventLogChangelog(log), APP, tmp_path / "replica").start()
    source = ReplicaSource(replica)
    try:
        topic = writer.topic()

        checked: dict[int, object] = {}

        def exact(sub: Subscriber, upto: int):
            def there() -> bool:  # checked where the Position moves: between two, changes of the next may be applied
                if sub.position is None or sub.position.is_empty():
                    return False
                b = batch_of(sub.position, topic)
                if checked.get(id(sub)) != sub.position:
                    assert sub.answer() == writer.answer_at(b), f"batch {b}"
                    checked[id(sub)] = sub.position
                return b >= upto
            return there

        with LiveFeeds(app) as on_active, LiveFeeds(source) as on_replica:
            import time

            for _ in range(500):
                if kind in source.catalog():
                    break
                time.sleep(0.02)
            sub = Subscriber(spec)
            feed = on_replica.open_feed(kind)
            drain(feed, sub, exact(sub, 4))
            writer.write(15)
            drain(feed, sub, exact(sub, 14))
            # a subscriber of the active moves to the replica with its Position
            moved = Subscriber(spec)
            a = on_active.open_feed(kind)
            drain(a, moved, exact(moved, 14))
            at = moved.position
            a.close()
            writer.write(22)
            drain(on_replica.open_feed(kind, at, snapshot=False), moved, exact(moved, 21))
            # and back: the replica's Position resumes on the active
            back = on_active.open_feed(kind, moved.position, snapshot=False)
            writer.write(30)
            drain(back, moved, exact(moved, 29))
            drain(feed, sub, exact(sub, 29))
    finally:
        source.close()
        app.close()
