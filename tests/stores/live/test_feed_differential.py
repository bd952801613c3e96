"""A subscriber that applies a feed's snapshot and changes holds, at every progress Position, exactly the store's
answer at that Position: for every store kind, while a pipeline-like writer keeps writing (partitions commit one
by one, so snapshots meet partitions a batch apart), and through a pull query for the kinds SELECT * reads."""

from __future__ import annotations

import threading
import time

import pytest

from gateway import Gateway
from stores.live import Changes, LiveFeeds, Progress, Snapshot
from stores.log.eventlog import EventLog

from .workload import KINDS, SPECS, Writer, batch_of, open_app, pull_answer, source_position, workload

BATCHES = 40


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("live")
    log = EventLog(d / "log")
    app, writers = open_app(d / "state", log, *SPECS.values())
    yield log, app, writers
    app.close()


def _follow(feed, writer: Writer, sub, until_batch: int, checks: list[int], timeout_s: float = 60.0) -> None:
    """Apply events until a progress at ``until_batch``; at every progress check the answer there."""
    deadline = time.monotonic() + timeout_s
    topic = writer.topic()
    while time.monotonic() < deadline:
        ev = feed.poll(0.5)
        if ev is None:
            continue
        sub.apply(ev)
        if isinstance(ev, (Progress, Changes, Snapshot)) and sub.position is not None and (
                isinstance(ev, Progress) or getattr(ev, "complete", False) or getattr(ev, "last", False)):
            b = batch_of(sub.position, topic)
            assert sub.answer() == writer.answer_at(b), f"batch {b}: the subscriber's rows differ from the store's"
            assert sub.position.partition_positions("orders") == source_position(b).partition_positions("orders")
            checks.append(b)
            if isinstance(ev, Progress) and b >= until_batch:
                return
    raise AssertionError(f"no progress at batch {until_batch} within {timeout_s} s (last checks {checks[-3:]})")


@pytest.mark.parametrize("kind", KINDS)
def test_snapshot_then_changes_equal_the_store_at_every_progress(env, kind) -> None:
    from .workload import Subscriber

    log, app, writers = env
    spec = SPECS[kind]
    writer = Writer(app, writers, spec, workload(kind, BATCHES))
    writer.write(6)
    gw = Gateway(app)
    if kind != "ses":  # a session store answers pull queries by key only
        assert pull_answer(gw, spec) == writer.answer_at(5), "the model is not the store's answer"
    with LiveFeeds(app) as feeds:
        feed = feeds.open_feed(kind)
        sub = Subscriber(spec)
        bg = threading.Thread(target=_paced_write, args=(writer, BATCHES), daemon=True)
        bg.start()
        checks: list[int] = []
        try:
            _follow(feed, writer, sub, BATCHES - 1, checks)
        finally:
            bg.join(30)
        assert checks[0] >= 5 and checks == sorted(checks), checks  # Position order, never back
        assert len(set(checks)) >= 10, checks  # progress all along, not only at the end
        if kind != "ses":
            assert pull_answer(gw, spec) == writer.answer_at(BATCHES - 1)
        feed.close()


def _paced_write(writer: Writer, upto: int) -> None:
    for i in range(writer.done + 1, upto + 1):
        writer.write(i)
        time.sleep(0.003 * (i % 3))
