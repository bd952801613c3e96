"""Feed: one subscriber's view of a store: a snapshot at a Position, then every change after it, with progress.

A feed holds no rows of its own while it follows: a cursor into its hub's shared backlog, and the events of the
step it is handing out. ``poll`` blocks up to a timeout; iterating blocks until the next event. The Position in
``position`` is always one the subscriber holds the whole answer at (after a snapshot's last chunk, a complete
batch, or a progress event): pass it back as the resume point, with the snapshot off, to continue exactly
there. A feed ends by raising ``SubscriptionError`` (never by going quiet): too slow for its buffer, its store's
changelog gone, the server's feeds closed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..catalog.schema import StoreSpec
from ..engine.codec import ValueCodec
from ..iqv2.position import Position
from ..log.eventlog import RecordsDeletedError
from .errors import (
    INVALID_RESUME_POSITION,
    SUBSCRIBER_TOO_SLOW,
    SUBSCRIPTION_CLOSED,
    SUBSCRIPTION_TOO_OLD,
    SUBSCRIPTION_UNAVAILABLE,
    SubscriptionError,
)
from .events import Changes, Event, Progress, Rebuilt, Snapshot
from .hub import Entry, FilterRow, Hub, batch_parts
from .locate import restricted
from .reader import ChangeReader, TopicRecreated
from .resume import Attach, Await, Replay, locate_resume
from .rows import RowMaker
from .snapshot import SnapshotData

__all__ = ["Feed", "KeyFilter", "DEFAULT_BUFFER_BYTES"]

DEFAULT_BUFFER_BYTES = 16 << 20  # of decoded changes; shared by the feeds behind together
REPLAY_POLL_S = 0.05


def _last_batch(store: Any) -> int:
    last = None if store is None else store.last_batch_id()
    return -1 if last is None else last


class KeyFilter:
    """Which rows a feed shows at all, by stored key and partition: ``keys`` (any of them), ``ranges`` (inclusive
    ``(lo, hi)``, None open), ``partitions``. A superset of the rows the subscription's SQL keeps (the planner's
    pushed key predicates), so dropping the rest here changes no answer and saves the engine its work."""

    def __init__(self, spec: StoreSpec, keys: Iterable[Any] | None = None,
                 ranges: Iterable[tuple[Any, Any]] | None = None, partitions: Iterable[int] | None = None) -> None:
        coerce = ValueCodec(spec).coerce_query_key
        self.keys = None if keys is None else frozenset(coerce(k) for k in keys)
        self.ranges = None if ranges is None else tuple(
            (None if lo is None else coerce(lo), None if hi is None else coerce(hi)) for lo, hi in ranges)
        self.partitions = None if partitions is None else frozenset(partitions)
        self.by_key = self.keys is not None or self.ranges is not None

    def keep(self, partition: int, key: Any) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        return self.keep_key(key)

    def keep_key(self, key: Any) -> bool:
        if not self.by_key:
            return True
        if self.keys is not None and key in self.keys:
            return True
        for lo, hi in self.ranges or ():
            try:
                if (lo is None or lo <= key) and (hi is None or key <= hi):
                    return True
            except TypeError:  # a bound of another type than the key: it matches nothing
                continue
        return False


class Feed:
    """One subscription to store ``store``. Made by ``LiveFeeds.open_feed``; see the module doc."""

    def __init__(self, hub: Hub, *, from_position: Position | None, snapshot: bool, progress: bool,
                 key_filter: KeyFilter | None, buffer_bytes: int, heartbeat_s: float, chunk_rows: int,
                 timeout_s: float) -> None:
        self.hub = hub
        self.store = hub.store
        self.buffer_bytes = int(buffer_bytes)
        self.position: Position | None = None
        self.progress = progress
        self.heartbeat_s = heartbeat_s
        self.chunk_rows = max(1, int(chunk_rows))
        self.timeout_s = timeout_s
        self._filter = key_filter
        self._lock = threading.Lock()
        self._cursor: int | None = None
        self._out: deque[Event] = deque()
        self._snap: SnapshotData | None = None
        self._snap_at = 0
        self._replay: ChangeReader | None = None
        self._replay_maker: RowMaker | None = None
        self._replay_batch = -1
        self._await: Await | None = None
        self._failed: SubscriptionError | None = None
        self._closed = False
        self._wakers: list[Callable[[], None]] = []
        self._last_out = time.monotonic()
        serving, _ = hub.serving_now()
        self.spec: StoreSpec = serving.spec
        hub.attach(self)
        try:
            self._begin(from_position, snapshot)
        except BaseException:
            self.close()
            raise

    # -- what the hub looks at ---------------------------------------------------------------------------
    @property
    def cursor(self) -> int | None:
        """The next hub entry this feed reads (None: not reading the hub's backlog now)."""
        return self._cursor

    @property
    def failed(self) -> SubscriptionError | None:
        """Why the feed ended, once it did (``poll`` raises it): for a server that stops polling a feed whose
        consumer is behind, to tell it is over without taking another event."""
        return self._failed

    def fail_too_slow(self) -> None:
        """The hub: this feed's pending changes outgrew its buffer (called with the hub's lock held; never waits for
        the feed's reader: plain assignments, read by it at its next step)."""
        if self._failed is None and not self._closed:
            at = self.position
            self._failed = SubscriptionError(
                SUBSCRIBER_TOO_SLOW,
                f"the subscription to store {self.store!r} fell more than its buffer ({self.buffer_bytes} bytes) "
                "behind the store" + (f"; resume from {at.to_json()}" if at is not None else
                                      "; it had not received a whole answer yet: subscribe again"),
                resume_from=at)
        self._cursor = None

    def offer(self, entry: Entry) -> bool:
        """The hub appended ``entry`` (its lock held): a feed following keys the batch does not touch passes it
        here, in the hub's thread, and is not woken; True when the feed has something to look at.

        Why: a thousand feeds each following a key would otherwise all wake and look at every batch.
        """
        f = self._filter
        batch = entry.batch
        if f is None or not f.by_key or f.keys is None or f.ranges is not None or batch is None:
            return True
        if not self._lock.acquire(blocking=False):  # its reader is at work: it takes this entry itself
            return True
        try:
            if (self._failed is not None or self._closed or self._cursor != entry.seq or self._await is not None
                    or self._snap is not None or self._out or batch.touches(f.keys)):
                return True
            self._cursor = entry.seq + 1
            if batch.complete:
                self.position = batch.position
            return False
        finally:
            self._lock.release()

    def wake(self) -> None:
        """New entries (or an end): tell whoever waits on this feed outside ``poll``."""
        for w in list(self._wakers):
            try:
                w()
            except Exception:  # noqa: BLE001 - a waker must not break the hub's thread
                pass

    def add_waker(self, fn: Callable[[], None]) -> None:
        """``fn()`` is called (from the hub's thread; keep it short) whenever this feed may have something new:
        for servers that wait on many feeds without a thread each."""
        self._wakers.append(fn)

    # -- starting ---------------------------------------------------------------------------------------------
    def _begin(self, from_position: Position | None, snapshot: bool) -> None:
        hub = self.hub
        if snapshot:
            bound = None
            if from_position is not None and not from_position.is_empty():
                bound = restricted(from_position, hub.topics(self.spec))
            self._use_snapshot(hub.snapshot(bound, self.timeout_s), rebuilt=False)
            return
        if from_position is None:  # from now on: after the batch the store's furthest partition has committed
            serving, _ = hub.serving_now()
            now = max(_last_batch(hub.access.partition(self.store, p)) for p in range(serving.spec.partitions))
            if now < 0:
                self._attach(hub.first_seq_of(serving.topic), None)
                return
            entry = hub.whole_batch_at_or_after(serving.topic, now, time.monotonic() + self.timeout_s)
            if entry is None or entry.batch is None:
                raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"the changelog of store {self.store!r} did not "
                                        f"reach batch {now} (the store's) within {self.timeout_s:.0f} s")
            self._attach(entry.seq + 1, entry.batch.position)
            return
        point = locate_resume(hub, from_position)
        if isinstance(point, Attach):
            self._attach(point.seq, point.position)
        elif isinstance(point, Replay):
            self._replay = ChangeReader(hub.access, self.store, self.spec, point.topic, point.starts, paced=False)
            self._replay_maker = RowMaker(self.spec)
            self.position = point.position
            self._replay_batch = point.batch_id
        else:
            self._await = point
            self._cursor = hub.first_seq_of(point.topic)

    def _attach(self, seq: int, position: Position | None) -> None:
        with self._lock:
            if self._failed is None:
                self._cursor = seq
            self.position = position

    def _use_snapshot(self, snap: SnapshotData, *, rebuilt: bool) -> None:
        self.spec = snap.spec
        self._snap, self._snap_at = snap, 0
        if rebuilt:
            self._out.append(Rebuilt(snap.position, snap.spec, snap.topic))
        with self._lock:
            if self._failed is None:
                self._cursor = snap.seq_after
        self.position = None  # until the snapshot's last chunk is handed out

    # -- reading ----------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        for _ in range(1 << 62):  # bounded only by the feed's end
            ev = self.poll(self.heartbeat_s)
            if ev is not None:
                return ev
        raise StopIteration  # pragma: no cover

    def poll(self, timeout_s: float) -> Event | None:
        """The next event, waiting up to ``timeout_s``; None if none came. Raises SubscriptionError at the end."""
        try:
            return self._poll(timeout_s)
        except SubscriptionError as exc:
            self.close()
            if exc.resume_from is None and exc.code != SUBSCRIPTION_CLOSED and self.position is not None:
                raise SubscriptionError(exc.code, exc.message, resume_from=self.position, oldest=exc.oldest) from None
            raise

    def _poll(self, timeout_s: float) -> Event | None:
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            self._check()
            if self._out:
                return self._hand(self._out.popleft())
            if self._snap is not None:
                return self._hand(self._next_chunk())
            left = deadline - time.monotonic()
            if self._replay is not None:
                self._step_replay(min(max(left, 0.0), REPLAY_POLL_S))
            else:
                cursor = self._cursor
                if cursor is None:  # failed meanwhile: _check raises
                    continue
                entry = self.hub.entry(cursor, max(0.0, min(left, self._until_heartbeat())))
                if entry is not None:
                    self._take(entry)
                    continue
            if self._out:
                continue
            if self.progress and self.position is not None and time.monotonic() - self._last_out >= self.heartbeat_s:
                return self._hand(Progress(self.position))
            if time.monotonic() >= deadline:
                return None

    def _until_heartbeat(self) -> float:
        return max(0.001, self.heartbeat_s - (time.monotonic() - self._last_out)) if self.progress else 3600.0

    def _check(self) -> None:
        if self._closed:
            raise SubscriptionError(SUBSCRIPTION_CLOSED, f"the subscription to store {self.store!r} was closed",
                                    resume_from=self.position)
        failed = self._failed
        if failed is not None:
            raise failed

    def _hand(self, ev: Event) -> Event:
        self._last_out = time.monotonic()
        if isinstance(ev, Progress):
            self.position = ev.position
        elif isinstance(ev, Changes) and ev.complete:
            self.position = ev.position
        elif isinstance(ev, Snapshot) and ev.last:
            self.position = ev.position
        return ev

    def _next_chunk(self) -> Snapshot:
        snap = self._snap
        assert snap is not None
        rows, i, n = [], self._snap_at, len(snap.rows)
        keep = self._filter.keep if self._filter is not None else None
        while i < n and len(rows) < self.chunk_rows:
            p, key, row = snap.rows[i]
            i += 1
            if keep is None or keep(p, key):
                rows.append(row)
        self._snap_at = i
        last = i >= n
        if last:
            self._snap = None
            if self.progress:
                self._out.append(Progress(snap.position))
        return Snapshot(snap.position, snap.spec, tuple(rows), last)

    def _take(self, entry: Entry) -> None:
        """Consume one hub entry: a rebuilt marker starts a new snapshot, a batch becomes this feed's events."""
        if entry.kind == "rebuilt":
            self._await = None
            self._use_snapshot(self.hub.snapshot(None, self.timeout_s), rebuilt=True)
            return
        batch = entry.batch
        assert batch is not None
        with self._lock:  # the hub's offer of the next entry waits for this one's events to be queued
            if self._failed is not None or self._cursor != entry.seq:
                return
            self._cursor = entry.seq + 1
            if self._await is not None:
                self._skip_to(entry)
                return
            f = self._filter
            if f is not None and f.by_key:
                touched = batch.keys()
                mine = [k for k in touched if f.keep_key(k)] if f.ranges is not None or f.keys is None \
                    or len(f.keys) > len(touched) else [k for k in f.keys if batch.touches((k,))]
                rows = tuple(r for k in mine for r in entry.rows_of(k) if f.keep(r[0], k))
                if not rows:
                    self._emit(None, (), batch)  # none of its keys: nothing built
                    return
                self._emit(Changes(batch.position, self.spec, tuple(r[2] for r in rows if not r[3]),
                                   tuple(r[2] for r in rows if r[3]), batch.complete), (), batch)
                return
            event, rows = entry.parts()
            self._emit(event, rows, batch)

    def _skip_to(self, entry: Entry) -> None:
        """Waiting for the resume point: pass entries until it, then go on after it."""
        w = self._await
        assert w is not None and entry.batch is not None
        if w.batch_id is not None:
            if entry.batch.batch_id >= w.batch_id:
                self._await = None
                self.position = entry.batch.position
            return
        at = restricted(entry.batch.source, self.hub.topics(self.spec))
        assert w.source is not None
        if at.covers(w.source):
            self._await = None
            if at != w.source:
                self._failed = SubscriptionError(
                    INVALID_RESUME_POSITION, f"the store passed from a Position below {w.source.to_json()} to "
                    f"{at.to_json()} without stopping at it: resume from a Position a subscription returned")
                return
            self.position = entry.batch.position

    def _emit(self, event: Changes | None, rows: tuple[FilterRow, ...], batch: Any) -> None:
        complete = batch.complete
        if event is None:
            if complete:
                self.position = batch.position
            return
        f = self._filter
        if f is not None and rows:
            ups = [r for p, k, r, deleted in rows if not deleted and f.keep(p, k)]
            dels = [r for p, k, r, deleted in rows if deleted and f.keep(p, k)]
            if len(ups) + len(dels) != len(event.upserts) + len(event.deletes):
                event = Changes(event.position, event.spec, tuple(ups), tuple(dels), event.complete)
        if event.upserts or event.deletes:
            self._out.append(event)
            if complete and self.progress:
                self._out.append(Progress(event.position))
        elif complete:
            self.position = event.position  # nothing to show: the Position moves on quietly (heartbeats say it)

    def _step_replay(self, wait_s: float) -> None:
        reader = self._replay
        assert reader is not None and self._replay_maker is not None
        try:
            batches = reader.poll(wait_s)
        except SubscriptionError:
            raise
        except TopicRecreated:  # the topic was created again under the replay: start over from a snapshot
            reader.close()
            self._replay = None
            self._use_snapshot(self.hub.snapshot(None, self.timeout_s), rebuilt=True)
            return
        except RecordsDeletedError as exc:
            raise SubscriptionError(SUBSCRIPTION_TOO_OLD, f"the changelog of store {self.store!r} was cut while "
                                    f"this subscription replayed it: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the log away: the subscriber resumes from its Position later
            raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"reading the changelog of store {self.store!r} "
                                    f"failed: {type(exc).__name__}: {exc}") from None
        for batch in batches:
            event, rows = batch_parts(self._replay_maker, batch)
            self._emit(event, rows, batch)
            self._replay_batch = batch.batch_id
        seq = self.hub.seq_after_batch(reader.topic, self._replay_batch)
        if seq is not None:  # the backlog reaches back to here: follow the shared tail from now on
            reader.close()
            self._replay = None
            with self._lock:
                if self._failed is None:
                    self._cursor = seq
        elif self.hub.serving_now()[0].topic != reader.topic:  # a rebuild swapped in during the replay
            reader.close()
            self._replay = None
            self._use_snapshot(self.hub.snapshot(None, self.timeout_s), rebuilt=True)

    # -- ending ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free everything now (a client gone). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cursor = None
        self._snap = None
        self._out.clear()
        if self._replay is not None:
            self._replay.close()
            self._replay = None
        self.hub.detach(self)
        self.wake()

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        at = None if self.position is None else self.position.to_json()
        return f"Feed(store={self.store!r}, position={at}, cursor={self._cursor})"
