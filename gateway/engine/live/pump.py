"""The pump: one thread that moves every subscription of a gateway from its feed to its reader.

Why one thread and not one per subscription: a thousand subscriptions that each waited on their store's feed
would all wake for every batch. Feeds wake the pump only when they may have news for it (``Feed.add_waker``: a
feed following keys a batch does not touch is not woken at all), and the pump polls each woken feed without
waiting, runs the subscription's SQL over what it got (``changes.Applier``, on the pump's own DuckDB cursor) and
hands the messages to the subscription's outbox, where the face's thread takes them. A feed owes a progress
message after a second without news; the pump keeps each subscription's due time in a heap and polls it then.

Fairness: a subscription gets at most ``TURN`` events per turn (a big snapshot does not hold up the others). A
full outbox stops its feed (the reader is behind: its place in the shared backlog grows until the hub ends it
with SUBSCRIBER_TOO_SLOW); the reader wakes the pump again once it took half.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from stores.iqv2.position import Position
from stores.live import SubscriptionError as FeedError

from ..errors import GatewayError, GatewayInternalError, NotUpToBoundError, SubscriptionError
from .changes import Applier
from .subscription import Subscription

__all__ = ["Pump", "Live", "live_error", "HEARTBEAT_S"]

log = logging.getLogger("iqgate.live")

HEARTBEAT_S = 1.0   # the longest quiet time between messages of a subscription with progress on
TURN = 16           # events one subscription may take per turn
_SLACK_S = 0.002    # a feed's heartbeat is due once a whole HEARTBEAT_S has passed: poll just after


def live_error(exc: BaseException) -> GatewayError:
    """A ``stores.live`` SubscriptionError as the gateway's (its code, resume point and oldest Position kept)."""
    code = getattr(exc, "code", "SUBSCRIPTION_UNAVAILABLE")
    message = getattr(exc, "message", str(exc))
    if code == "NOT_UP_TO_BOUND":
        return NotUpToBoundError(message)
    return SubscriptionError(message, code=code, resume_from=getattr(exc, "resume_from", None),
                             oldest=getattr(exc, "oldest", None))


class Live:
    """What the pump keeps of one subscription: its feed, its SQL, when its next heartbeat is due."""

    __slots__ = ("sub", "feed", "applier", "due", "queued", "last_mark", "done")

    def __init__(self, sub: Subscription, feed: Any, applier: Applier) -> None:
        self.sub = sub
        self.feed = feed
        self.applier = applier
        self.due = time.monotonic() + HEARTBEAT_S + _SLACK_S
        self.queued = False
        self.last_mark: Position | None = None
        self.done = False


class Pump:
    """Runs subscriptions (see the module doc). ``cursor``: a DuckDB cursor of the gateway's locked-down
    connection, used by this thread only; ``watch(timeout_ms)``: the gateway's statement guard, so a
    subscription's SQL over one batch has the statement time budget; ``on_end(live, error)``: an ended one."""

    def __init__(self, cursor: Any, watch: Callable[[], Any], on_end: Callable[[Live, GatewayError], None]) -> None:
        self._cursor = cursor
        self._watch = watch
        self._on_end = on_end
        self._cond = threading.Condition()
        self._ready: deque[Live] = deque()
        self._heap: list[tuple[float, int, Live]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="iqgate-live-pump", daemon=True)
        self._thread.start()

    def add(self, live: Live) -> None:
        """Start running ``live`` (its feed wakes the pump from now on)."""
        live.sub._wake_pump = lambda: self.wake(live)
        live.feed.add_waker(lambda: self.wake(live))
        with self._cond:
            heapq.heappush(self._heap, (live.due, next(self._seq), live))
        self.wake(live)

    def wake(self, live: Live) -> None:
        """``live`` may have news (its feed's waker, or its reader that took half of a full outbox)."""
        with self._cond:
            if live.queued or live.done:
                return
            live.queued = True
            self._ready.append(live)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)

    # -- the thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    self._due(now)
                    if self._ready:
                        turn = list(self._ready)
                        self._ready.clear()
                        for live in turn:
                            live.queued = False
                        break
                    wait = self._heap[0][0] - now if self._heap else 5.0
                    self._cond.wait(max(0.0, min(wait, 5.0)))
            for live in turn:
                if not live.done:
                    try:
                        self._serve(live)
                    except Exception:  # noqa: BLE001 - one subscription's bug must not stop the others
                        log.exception("a live subscription failed in the pump")
                        self._end(live, GatewayInternalError("the subscription failed inside the server"))

    def _due(self, now: float) -> None:
        """Move the subscriptions whose heartbeat is due to the ready queue (the lock held)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, live = heapq.heappop(heap)
            if live.done:
                continue
            if live.due > at:  # it had news since: its heartbeat moved
                heapq.heappush(heap, (live.due, next(self._seq), live))
                continue
            live.due = now + 0.05  # polled now; _serve sets the next heartbeat when the feed hands something
            heapq.heappush(heap, (live.due, next(self._seq), live))
            if not live.queued:
                live.queued = True
                self._ready.append(live)

    def _serve(self, live: Live) -> None:
        sub, feed = live.sub, live.feed
        if sub.closed:
            return
        if sub.full():
            failed = feed.failed
            if failed is not None:  # the reader was behind for too long: it ends after what it holds
                self._end(live, live_error(failed))
            return
        handed = 0
        try:
            while handed < TURN:
                ev = feed.poll(0)
                if ev is None:
                    break
                handed += 1
                if ev.kind in ("snapshot", "changes"):
                    watch = self._watch()
                    watch.attach(self._cursor.interrupt)
                    try:
                        changes = live.applier.changes(ev, self._cursor, watch)
                    finally:
                        watch.attach(None)
                        watch.close()
                else:
                    changes = live.applier.changes(ev, self._cursor)
                mark = feed.position
                if mark is live.last_mark:
                    mark = None
                else:
                    live.last_mark = mark
                sub.deliver(changes, mark)
                if sub.full():
                    break
            if feed.position is not live.last_mark:  # passed batches it shows nothing of (progress off)
                live.last_mark = feed.position
                sub.deliver([], live.last_mark)
        except GatewayError as exc:
            self._end(live, exc)
            return
        except FeedError as exc:
            self._end(live, live_error(exc))
            return
        if handed:
            live.due = time.monotonic() + HEARTBEAT_S + _SLACK_S
        if handed >= TURN and not sub.full():
            self.wake(live)

    def _end(self, live: Live, error: GatewayError) -> None:
        if live.done:
            return
        live.done = True
        live.sub.end(error)
        self._on_end(live, error)
