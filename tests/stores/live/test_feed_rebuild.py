"""A store rebuilt into a new generation (an upgrade with a new column) while feeds follow it: at the swap each
feed gets ``Rebuilt``, a snapshot of the new generation (its new columns) and then its changes, exact at every
progress; a resume point of the swapped-out generation is SUBSCRIPTION_TOO_OLD, one of the new generation resumes."""

from __future__ import annotations

import pytest

from stores.catalog.schema import Column, SqlType
from stores.changelog import changelog_topic
from stores.engine.change import Change
from stores.live import SUBSCRIPTION_TOO_OLD, LiveFeeds, Rebuilt, SubscriptionError
from stores.log.eventlog import EventLog

from .workload import APP, SPECS, Subscriber, Writer, batch_of, drain, open_app, workload

SPEC = SPECS["kv"]
V2 = type(SPEC)(SPEC.name, SPEC.kind, SPEC.key, (*SPEC.values, Column("avg", SqlType.DOUBLE)), SPEC.partitions,
                SPEC.source_topics)


def _v2(changes: list[list[Change]]) -> list[list[Change]]:
    """The same input through the new definition: one more value column."""
    return [[c if c.value is None else c._replace(value=(*c.value, c.value[0] / (c.value[1] + 1))) for c in b]
            for b in changes]


def test_feeds_follow_a_rebuild_from_the_swap(tmp_path) -> None:
    log = EventLog(tmp_path / "log")
    app, writers = open_app(tmp_path / "state", log, SPEC)
    try:
        changes = workload("kv", 30, seed=9)
        old = Writer(app, writers, SPEC, changes)
        old.write(10)
        with LiveFeeds(app) as feeds:
            sub = Subscriber(SPEC)
            feed = feeds.open_feed("kv")
            drain(feed, sub, lambda: sub.position is not None and batch_of(sub.position, old.topic()) == 9)
            assert sub.answer() == old.answer_at(9)
            old_token = sub.position
            g = app.begin_rebuild("kv", "a new column", spec=V2)
            writers.begin("kv", g)
            new = Writer(app, writers, V2, _v2(changes), generation=g)
            new.write(10)  # caught up with the old generation's Position
            app.finish_rebuild("kv")
            new.write(12)
            events = []

            def swapped() -> bool:
                return sub.rebuilt == 1 and sub.position is not None and new.topic() in sub.position.topics() \
                    and batch_of(sub.position, new.topic()) == 11

            while not swapped():
                ev = feed.poll(10)
                assert ev is not None, "no event after the swap"
                events.append(ev)
                sub.apply(ev)
                if sub.position is not None and new.topic() in sub.position.topics() and not sub.in_snapshot:
                    assert sub.answer() == new.answer_at(batch_of(sub.position, new.topic()))
            rebuilt = next(e for e in events if isinstance(e, Rebuilt))
            assert rebuilt.spec == V2 and rebuilt.topic == changelog_topic(APP, "kv", 1)
            assert all(len(r) == len(V2.columns()) for r in sub.rows.values())  # the new column is there
            new.write(20)
            drain(feed, sub, lambda: batch_of(sub.position, new.topic()) == 19)
            assert sub.answer() == new.answer_at(19)
            new_token = sub.position
            with pytest.raises(SubscriptionError) as err:
                feeds.open_feed("kv", old_token, snapshot=False)
            assert err.value.code == SUBSCRIPTION_TOO_OLD and changelog_topic(APP, "kv", 1) in err.value.oldest.topics()
            assert "rebuilt since" in err.value.message
            new.write(25)
            again = Subscriber(V2)
            again.rows = dict(sub.rows)
            resumed = feeds.open_feed("kv", new_token, snapshot=False)
            drain(resumed, again, lambda: batch_of(again.position or new_token, new.topic()) == 24)
            assert again.answer() == new.answer_at(24)
    finally:
        app.close()
