"""A gateway's live answers: its subscriptions, their limit, their pump, and what /metrics and health show.

One per Gateway, made on the first subscription. Feeds come from ``stores.live.LiveFeeds.for_source`` (one
set of store tails per process and source, shared with anything else in the process that follows the same
stores); the source is the one the gateway reads, or what it names as the one to follow (a serving process
follows the state dir its supervisor writes: ``Follower.live_source``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from planner.plan import Subscription as SubscriptionPlan
from stores.iqv2.position import Position
from stores.live import LiveFeeds, ShownKeys
from stores.live import SubscriptionError as FeedError

from ..config import GatewayConfig
from ..errors import GatewayError, SubscriptionError, translate
from .changes import Applier, Columns, subscription_columns
from .pump import HEARTBEAT_S, Live, Pump, live_error
from .subscription import Subscription

__all__ = ["LiveAnswers", "SHOWN_BYTES"]

SHOWN_BYTES = 256 << 10  # what a subscription filtering on value columns remembers of the rows it showed


class LiveAnswers:
    """Opens subscriptions of one gateway and counts them (see the module doc)."""

    def __init__(self, source: Any, config: GatewayConfig, cursor: Callable[[], Any], watch: Callable[[], Any]
                 ) -> None:
        self._source = source
        self._config = config
        self._cursor = cursor
        self._lock = threading.Lock()
        self._open: dict[int, Live] = {}
        self._starting = 0
        self._started = 0
        self._ended: dict[str, int] = {}
        self._closed = False
        self._pump = Pump(cursor(), watch, self._ended_by_pump)

    # -- opening ----------------------------------------------------------------------------------------------
    def open(self, plan: SubscriptionPlan, text: str, *, position: Position | None, resume: Position | None,
             replan: Callable[[], tuple[SubscriptionPlan, Any]], catalog: Any) -> Subscription:
        """A running subscription of ``plan``: from ``resume`` on (snapshot off) when given, else as the
        statement says (``position`` in place of its AS OF POSITION when given)."""
        limit = self._config.max_subscriptions
        with self._lock:
            if self._closed:
                raise SubscriptionError("this server is closing its live answers", code="SUBSCRIPTION_CLOSED")
            if len(self._open) + self._starting >= limit:
                raise SubscriptionError(f"this server already runs {limit} subscriptions (its limit, "
                                        "--max-subscriptions): close one, or try again later",
                                        code="TOO_MANY_SUBSCRIPTIONS")
            self._starting += 1
        try:
            return self._start(plan, text, position, resume, replan, catalog)
        finally:
            with self._lock:
                self._starting -= 1

    def _start(self, plan: SubscriptionPlan, text: str, position: Position | None, resume: Position | None,
               replan: Callable[[], tuple[SubscriptionPlan, Any]], catalog: Any, again: int = 2) -> Subscription:
        spec = catalog[plan.store]
        columns = self._columns(plan, spec)
        snapshot = plan.snapshot if resume is None else False
        start = resume if resume is not None else position if position is not None else plan.resume
        keys = plan.keys
        try:
            feeds = LiveFeeds.for_source(self._source)
            feed = feeds.open_feed(plan.store, start, snapshot, progress=plan.progress,
                                   keys=None if keys is None else keys.keys,
                                   key_ranges=None if keys is None else keys.ranges,
                                   partitions=None if keys is None else keys.partitions,
                                   buffer_bytes=self._config.subscription_buffer_bytes, heartbeat_s=HEARTBEAT_S,
                                   timeout_s=max(1.0, self._config.statement_timeout_ms / 1000))
        except FeedError as exc:
            raise live_error(exc) from None
        except GatewayError:
            raise
        except Exception as exc:  # noqa: BLE001 - an unknown store (KIP-216) and the like, in the gateway's terms
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
        if feed.spec != spec and again > 0:  # a swap to a rebuilt generation between planning and the feed
            feed.close()
            new, new_catalog = replan()
            return self._start(new, text, position, resume, replan, new_catalog, again - 1)
        try:
            def replanned() -> tuple[SubscriptionPlan, Columns]:
                new, new_catalog = replan()
                return new, self._columns(new, new_catalog[new.store])

            shown = ShownKeys(SHOWN_BYTES)
            if not snapshot and start is not None:
                # resumed: the rows the subscriber holds were shown by another subscription, so any of them may
                # be one to delete when it leaves the filter ("maybe shown": a delete of a row not held is a no-op)
                shown.overflowed = True
            applier = Applier(plan, columns, shown, replanned)
            sub = Subscription(text=text, store=plan.store, columns=columns, identity=plan.identity, appended=plan.added,
                               snapshot=snapshot, progress=plan.progress, start=None if snapshot else feed.position,
                               on_close=self._closed_by_reader)
            live = Live(sub, feed, applier)
            live.last_mark = feed.position
            with self._lock:
                self._open[id(sub)] = live
                self._started += 1
            self._pump.add(live)
            return sub
        except BaseException:
            feed.close()
            raise

    def _columns(self, plan: SubscriptionPlan, spec: Any) -> Columns:
        cur = self._cursor()
        try:
            return subscription_columns(cur, plan, spec)
        finally:
            cur.close()

    # -- ending -----------------------------------------------------------------------------------------------
    def _closed_by_reader(self, sub: Subscription) -> None:
        with self._lock:
            live = self._open.pop(id(sub), None)
            if live is not None:
                why = sub.close_reason or "CLOSED_BY_CLIENT"
                self._ended[why] = self._ended.get(why, 0) + 1
        if live is not None:
            live.done = True
            live.feed.close()

    def _ended_by_pump(self, live: Live, error: GatewayError) -> None:
        with self._lock:
            if self._open.pop(id(live.sub), None) is not None:
                self._ended[error.code] = self._ended.get(error.code, 0) + 1
        live.feed.close()

    def close(self, feeds: bool = False) -> None:
        """End every subscription (SUBSCRIPTION_CLOSED, with each one's resume point) and stop the pump; with
        ``feeds``, the process's feeds of the source too (the gateway owned the source: nobody else follows it)."""
        with self._lock:
            self._closed = True
            lives = list(self._open.values())
            self._open.clear()
        for live in lives:
            live.done = True
            live.sub.end(SubscriptionError("the server is shutting down its live answers: resume from the "
                                           "Position given", code="SUBSCRIPTION_CLOSED",
                                           resume_from=live.feed.position))
            live.feed.close()
        self._pump.stop()
        if feeds:
            LiveFeeds.for_source(self._source).close()

    # -- counting ---------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Open subscriptions against the limit, started since the start, ended by reason: /metrics and health."""
        with self._lock:
            return {"open": len(self._open), "limit": self._config.max_subscriptions, "started": self._started,
                    "ended": dict(sorted(self._ended.items()))}
