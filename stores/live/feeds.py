"""LiveFeeds: the live feeds of one process's source, one hub per store; ``open_feed`` for one-off callers."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

from ..changelog.topics import ChangelogLog
from ..iqv2.position import Position
from .access import StoreAccess, access_for
from .errors import SUBSCRIPTION_CLOSED, SubscriptionError
from .feed import DEFAULT_BUFFER_BYTES, Feed, KeyFilter
from .hub import Hub, HubLimits

__all__ = ["LiveFeeds", "open_feed"]

_registry: weakref.WeakKeyDictionary[Any, LiveFeeds] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


class LiveFeeds:
    """Feeds of the stores of ``source`` (a StreamsApp, StateDirReader or ReplicaSource).

    ``changelog``: the log to read changelogs from, where the source cannot say (a read-only process over a
    Kafka-fed app whose client options are not in ``app.json``); ``limits``: the hubs' backlog limits.
    Make one per process and source (the gateway's engine), close it at shutdown.
    """

    def __init__(self, source: Any, *, changelog: ChangelogLog | None = None, application_id: str | None = None,
                 limits: HubLimits | None = None) -> None:
        self.source = source
        self.access: StoreAccess = access_for(source, changelog, application_id)
        self.limits = limits or HubLimits()
        self._hubs: dict[str, Hub] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_source(cls, source: Any) -> LiveFeeds:
        """The process-wide LiveFeeds of ``source`` (made on first use; lives as long as the source)."""
        with _registry_lock:
            feeds = _registry.get(source)
            if feeds is None or feeds._closed:
                feeds = _registry[source] = cls(source)
            return feeds

    def hub(self, store: str) -> Hub:
        with self._lock:
            if self._closed:
                raise SubscriptionError(SUBSCRIPTION_CLOSED, "the live feeds of this server are closed")
            hub = self._hubs.get(store)
            if hub is None:
                self.access.serving(store)  # an unknown store raises UnknownStateStoreException here
                hub = self._hubs[store] = Hub(self.access, store, self.limits)
            return hub

    def open_feed(self, store: str, from_position: Position | None = None, snapshot: bool = True, *,
                  progress: bool = True, keys: Iterable[Any] | None = None,
                  key_ranges: Iterable[tuple[Any, Any]] | None = None, partitions: Iterable[int] | None = None,
                  buffer_bytes: int = DEFAULT_BUFFER_BYTES, heartbeat_s: float = 1.0, chunk_rows: int = 1024,
                  timeout_s: float = 30.0) -> Feed:
        """A feed of ``store``: with ``snapshot``, the whole answer at a Position at or past ``from_position``,
        then every change after it; without, every change after ``from_position`` (a Position a feed gave, or a
        batch's source Position; None: from now on).

        ``keys``/``key_ranges``/``partitions`` drop rows no subscription SQL could keep (the planner's pushed key
        predicates). ``buffer_bytes``: how far (in decoded changes) the feed may fall behind the store before it
        ends with SUBSCRIBER_TOO_SLOW. ``heartbeat_s``: the longest quiet time between events while progress is
        on. ``timeout_s``: how long starting may wait (the changelog opened, a snapshot at one batch).

        Raises SubscriptionError (a resume point too old or not of this store, no changelog), or
        UnknownStateStoreException for an unknown store, before anything is streamed.
        """
        if not isinstance(snapshot, bool) or not isinstance(progress, bool):
            raise TypeError("snapshot and progress are booleans")
        if from_position is not None and not isinstance(from_position, Position):
            raise TypeError(f"from_position must be a Position or None, got {type(from_position).__name__}")
        if buffer_bytes <= 0 or heartbeat_s <= 0 or chunk_rows <= 0 or timeout_s <= 0:
            raise ValueError("buffer_bytes, heartbeat_s, chunk_rows and timeout_s must be positive")
        hub = self.hub(store)
        hub.ensure_running(timeout_s)
        spec = hub.serving_now()[0].spec
        key_filter = (KeyFilter(spec, keys, key_ranges, partitions)
                      if keys is not None or key_ranges is not None or partitions is not None else None)
        return Feed(hub, from_position=from_position, snapshot=snapshot, progress=progress, key_filter=key_filter,
                    buffer_bytes=buffer_bytes, heartbeat_s=heartbeat_s, chunk_rows=chunk_rows, timeout_s=timeout_s)

    def stats(self) -> dict[str, Any]:
        """Per store: feeds open, batches and snapshots made, backlog entries and bytes (for /metrics, health)."""
        with self._lock:
            hubs = dict(self._hubs)
        out = {}
        for name, hub in sorted(hubs.items()):
            with hub.cond:
                first = hub.entries[0] if hub.entries else None
                held = 0 if first is None else hub.cum - (first.cum - first.nbytes)
                out[name] = {"feeds": len(hub.feeds), "backlog_entries": len(hub.entries), "backlog_bytes": held,
                             "running": hub.serving is not None, **hub.stats}
        return out

    def feeds_open(self) -> int:
        with self._lock:
            hubs = list(self._hubs.values())
        return sum(len(h.feeds) for h in hubs)

    def close(self) -> None:
        """End every feed (SUBSCRIPTION_CLOSED) and stop every tail."""
        with self._lock:
            self._closed = True
            hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            hub.close()
        self.access.close()

    def __enter__(self) -> LiveFeeds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_feed(source: Any, store: str, from_position: Position | None = None, snapshot: bool = True,
              **options: Any) -> Feed:
    """``LiveFeeds.for_source(source).open_feed(store, from_position, snapshot, **options)``."""
    return LiveFeeds.for_source(source).open_feed(store, from_position, snapshot, **options)
