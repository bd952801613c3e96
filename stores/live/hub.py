"""Hub: the one tail of a store's changelog that every feed of the store in this process shares.

A feed costs a cursor, not a reader: the hub's thread reads the changelog topic of the generation that answers,
decodes each whole batch once (``reader.ChangeReader``) and appends it to a backlog of entries; feeds read the
backlog at their own pace. The backlog keeps what the slowest attached feed still needs, within each feed's own
budget (past it the feed ends with SUBSCRIBER_TOO_SLOW) and a hard cap for the hub, and always the most recent
batches (snapshots roll lagging partitions forward with them; a client that reconnects resumes from them without
reading the log). When another generation starts answering (a rebuild swapped in, a topic created again) the
hub appends a ``rebuilt`` entry and follows the new topic; feeds take a new snapshot there.

The thread starts with the first feed and stops after a while without feeds; it reads from the batch the store's
furthest-behind partition is at, so a snapshot taken now finds the batches it may need.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from .access import Serving, StoreAccess
from .errors import SUBSCRIBER_TOO_SLOW, SUBSCRIPTION_CLOSED, SUBSCRIPTION_UNAVAILABLE, SubscriptionError
from .events import Changes
from .locate import Locator
from .reader import Batch, ChangeReader, TopicRecreated
from .rows import RowMaker, deleted_row
from .snapshot import SnapshotData, build_snapshot

__all__ = ["Hub", "Entry", "HubLimits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HubLimits:
    """``backlog_bytes``: the most a hub keeps for its feeds; ``keep_batches``: recent batches kept whatever the
    feeds (within ``backlog_bytes``); ``idle_stop_s``: how long the tail runs on without feeds; ``poll_s``: the
    longest wait for new records in one read; ``serving_check_s``: how often the answering generation is looked
    at."""

    backlog_bytes: int = 64 << 20
    keep_batches: int = 256
    idle_stop_s: float = 30.0
    poll_s: float = 0.05
    serving_check_s: float = 0.25


class Entry:
    """One step of the backlog: a whole batch (``batch``; its shared event and filter rows made on first use by
    ``parts``), or a ``rebuilt`` marker."""

    __slots__ = ("seq", "kind", "topic", "batch", "nbytes", "cum", "_maker", "_parts", "_by_key", "_tail")

    def __init__(self, seq: int, kind: str, topic: str, batch: Batch | None, nbytes: int, cum: int,
                 maker: RowMaker | None = None) -> None:
        self.seq, self.kind, self.topic, self.batch, self.nbytes, self.cum = seq, kind, topic, batch, nbytes, cum
        self._maker = maker
        self._parts: tuple[Changes, tuple[FilterRow, ...]] | None = None
        self._by_key: dict[Any, list[FilterRow]] = {}
        self._tail: str | None = None

    def parts(self) -> tuple[Changes, tuple[FilterRow, ...]]:
        """The batch's event (every feed without a key filter gets this very object) and its rows with what a
        key filter looks at; decoded once, by whichever feed asks first."""
        got = self._parts
        if got is None:
            assert self.batch is not None and self._maker is not None
            got = self._parts = batch_parts(self._maker, self.batch)
        return got

    def rows_of(self, key: Any) -> list[FilterRow]:
        """The rows of one stored key, as ``parts`` has them (made once per key, shared): a feed following a few
        keys builds only theirs."""
        got = self._by_key.get(key)
        if got is None:
            assert self.batch is not None and self._maker is not None
            maker = self._maker
            if self._tail is None:
                self._tail = self.batch.position.to_json()
            tail = self._tail
            got = [(p, key, (*(deleted_row(maker, ident) if row is None else row), p, tail), row is None)
                   for p, ident, row in self.batch.changes_of(key)]
            self._by_key[key] = got
        return got


FilterRow = tuple[int, Any, tuple[Any, ...], bool]  # (partition, stored key, row, deleted)


class Follower(Protocol):
    """What the hub sees of a feed: where it reads, its budget, and how to end, skip or wake it."""

    buffer_bytes: int

    @property
    def cursor(self) -> int | None: ...

    def fail_too_slow(self) -> None: ...

    def offer(self, entry: Entry) -> bool: ...

    def wake(self) -> None: ...


def batch_parts(maker: RowMaker, batch: Batch) -> tuple[Changes, tuple[FilterRow, ...]]:
    """A whole batch → its shared event, and its rows with what a feed's key filter looks at."""
    tail = batch.position.to_json()
    rows: list[FilterRow] = []
    upserts: list[tuple[Any, ...]] = []
    deletes: list[tuple[Any, ...]] = []
    records = batch.records() if maker.whole_columns else None
    if records is not None:
        for p, rec in sorted(records.items()):
            ups, dels, marked = rec.whole(p, tail)
            upserts += ups
            deletes += dels
            rows += marked
        return Changes(batch.position, maker.spec, tuple(upserts), tuple(deletes), batch.complete), tuple(rows)
    for p, changes in sorted(batch.changes.items()):
        for ident, row in changes.items():
            full = (*(deleted_row(maker, ident) if row is None else row), p, tail)
            (deletes if row is None else upserts).append(full)
            rows.append((p, ident[0] if maker.windowed else ident, full, row is None))
    return Changes(batch.position, maker.spec, tuple(upserts), tuple(deletes), batch.complete), tuple(rows)


class Hub:
    """The shared tail of store ``store`` over ``access``."""

    def __init__(self, access: StoreAccess, store: str, limits: HubLimits | None = None) -> None:
        self.access = access
        self.store = store
        self.limits = limits or HubLimits()
        self.cond = threading.Condition()
        self.entries: deque[Entry] = deque()
        self.next_seq = 0
        self.cum = 0
        self.serving: Serving | None = None
        self.mark = 0  # bumped when another generation starts answering
        self.error: SubscriptionError | None = None
        self.feeds: weakref.WeakSet[Follower] = weakref.WeakSet()
        self._evicted: dict[str, int] = {}  # topic -> the furthest batch evicted from the backlog
        self._began: dict[str, int] = {}  # topic -> the first batch appended (the hub read from there)
        self._maker: RowMaker | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._snap_lock = threading.Lock()
        self._snap: SnapshotData | None = None
        self._last_feed = time.monotonic()
        self.stats = {"batches": 0, "snapshots": 0, "rebuilds": 0}

    # -- lifecycle ------------------------------------------------------------------------------
    def ensure_running(self, timeout_s: float = 30.0) -> None:
        """Start the tail if it is not running, and wait until it follows a topic (or failed)."""
        with self.cond:
            if self._closed:
                raise SubscriptionError(SUBSCRIPTION_CLOSED, "the live feeds of this server are closed")
            if self._thread is None or not self._thread.is_alive():
                self.error = None
                self.serving = None
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name=f"iqgate-live-{self.store}", daemon=True)
                self._thread.start()
            deadline = time.monotonic() + timeout_s
            while self.serving is None and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"the changelog of store {self.store!r} could "
                                            f"not be opened within {timeout_s:.0f} s")
                self.cond.wait(left)
            if self.error is not None:
                raise self.error

    def close(self) -> None:
        with self.cond:
            self._closed = True
            self.error = SubscriptionError(SUBSCRIPTION_CLOSED, "the live feeds of this server are closed")
            self.cond.notify_all()
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(5.0)
        self._wake_all()

    def attach(self, feed: Follower) -> None:
        with self.cond:
            self.feeds.add(feed)
            self._last_feed = time.monotonic()

    def detach(self, feed: Follower) -> None:
        with self.cond:
            self.feeds.discard(feed)
            self._last_feed = time.monotonic()
            self._evict()

    # -- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        reader: ChangeReader | None = None
        try:
            serving = self.access.serving(self.store)
            reader = self._open_reader(serving)
            self._publish(serving, rebuilt=False)
            next_check = time.monotonic() + self.limits.serving_check_s
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + self.limits.serving_check_s
                    latest = self.access.serving(self.store)
                    if latest.key != serving.key:
                        reader, serving = self._switch(reader, latest), latest
                    if self._idle(now):
                        break
                try:
                    batches = reader.poll(self.limits.poll_s)
                except TopicRecreated as exc:
                    log.warning("live feeds of store %s: %s; taking a new snapshot", self.store, exc)
                    serving = self.access.serving(self.store)
                    reader = self._switch(reader, serving)
                    continue
                except SubscriptionError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the topic gone under a swap: look at what answers now
                    latest = self.access.serving(self.store)
                    if latest.key != serving.key:
                        reader, serving = self._switch(reader, latest), latest
                        continue
                    raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"reading the changelog of store "
                                            f"{self.store!r} failed: {type(exc).__name__}: {exc}") from exc
                for b in batches:
                    self._append_batch(b)
        except SubscriptionError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - every feed is told why, none hangs
            log.exception("live feeds of store %s stopped", self.store)
            self._fail(SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"the live feed of store {self.store!r} stopped: "
                                         f"{type(exc).__name__}: {exc}"))
        finally:
            if reader is not None:
                reader.close()

    def _idle(self, now: float) -> bool:
        with self.cond:
            if self.feeds:
                self._last_feed = now
                return False
            if now - self._last_feed < self.limits.idle_stop_s:
                return False
            self._thread = None  # the next feed starts a new one
            self.serving = None
            self.entries.clear()
            self._evicted.clear()
            self._began.clear()
            self._snap = None
            return True

    def _fail(self, exc: SubscriptionError) -> None:
        with self.cond:
            self.error = exc
            self._thread = None
            self.cond.notify_all()
        self._wake_all()

    def _open_reader(self, serving: Serving) -> ChangeReader:
        """A reader of ``serving``'s topic from the batch the furthest-behind partition is at."""
        changelog = self.access.changelog()
        if serving.topic not in changelog.list_topics():
            raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"store {self.store!r} has no changelog topic "
                                    f"{serving.topic!r} in {changelog.describe()} (changelogs off?)")
        lowest = None
        for p in range(serving.spec.partitions):
            store = self.access.partition(self.store, p)
            last = None if store is None else store.last_batch_id()
            last = -1 if last is None else last
            lowest = last if lowest is None else min(lowest, last)
        locator = Locator(changelog, serving.topic)
        low, end = locator.bounds()
        starts = dict(low)
        if lowest is not None and lowest >= 0:
            for p in range(serving.spec.partitions):
                item = locator.batch_record(p, lowest, low.get(p, 0), end.get(p, 0))
                starts[p] = end.get(p, 0) if item is None else item.offset
        return ChangeReader(self.access, self.store, serving.spec, serving.topic, starts)

    def _publish(self, serving: Serving, *, rebuilt: bool) -> None:
        with self.cond:
            self.serving = serving
            self._maker = RowMaker(serving.spec)
            if rebuilt:
                self.mark += 1
                self._snap = None
                self.stats["rebuilds"] += 1
                self._push(Entry(self.next_seq, "rebuilt", serving.topic, None, 64, self.cum + 64))  # wakes all
            self.cond.notify_all()
        if rebuilt:
            self._wake_all()

    def _switch(self, old: ChangeReader, serving: Serving) -> ChangeReader:
        """Another generation answers: follow its topic, after a ``rebuilt`` entry."""
        old.close()
        reader = self._open_reader(serving)
        self._publish(serving, rebuilt=True)
        return reader

    # -- the backlog ---------------------------------------------------------------------------------
    def _append_batch(self, batch: Batch) -> None:
        with self.cond:
            self.stats["batches"] += 1
            self._began.setdefault(batch.topic, batch.batch_id)
            woken = self._push(Entry(self.next_seq, "batch", batch.topic, batch, batch.nbytes,
                                     self.cum + batch.nbytes, self._maker))
        for f in woken:
            f.wake()

    def _push(self, entry: Entry) -> list[Follower]:
        """Append (the lock held); the feeds with something to look at (the others passed it: ``offer``); hold
        feeds to their budgets and evict what nobody needs.

        A feed's budget counts what it has not taken of the batches before the newest one: the newest is behind
        every feed the moment it arrives, however big it is.
        """
        self.entries.append(entry)
        self.next_seq += 1
        self.cum = entry.cum
        feeds = list(self.feeds)
        woken = [f for f in feeds if f.offer(entry)]
        settled = self.cum - entry.nbytes
        for f in feeds:
            cursor = f.cursor
            if cursor is not None and settled - self._cum_before(cursor) > f.buffer_bytes:
                f.fail_too_slow()
        self._evict()
        self.cond.notify_all()
        return woken

    def _cum_before(self, seq: int) -> int:
        if not self.entries or seq >= self.next_seq:
            return self.cum
        first = self.entries[0].seq
        if seq <= first:
            return self.entries[0].cum - self.entries[0].nbytes
        e = self.entries[seq - first]
        return e.cum - e.nbytes

    def _evict(self) -> None:
        cursors = [f.cursor for f in self.feeds if f.cursor is not None]
        needed = min(cursors, default=self.next_seq)
        limits = self.limits
        while self.entries:
            first = self.entries[0]
            span = self.cum - (first.cum - first.nbytes)
            over = span > limits.backlog_bytes
            if not over and (first.seq >= needed or len(self.entries) <= limits.keep_batches):
                break
            self.entries.popleft()
            if first.batch is not None:
                self._evicted[first.topic] = max(self._evicted.get(first.topic, -1), first.batch.batch_id)
            if over:
                for f in list(self.feeds):
                    if f.cursor is not None and f.cursor <= first.seq:
                        f.fail_too_slow()

    def _wake_all(self) -> None:
        for f in list(self.feeds):
            f.wake()

    # -- what feeds ask -----------------------------------------------------------------------------------
    def serving_now(self) -> tuple[Serving, int]:
        with self.cond:
            if self.error is not None:
                raise self.error
            if self.serving is None:
                raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"the live feed of store {self.store!r} stopped")
            return self.serving, self.mark

    def topics(self, spec: StoreSpec) -> frozenset[str] | None:
        return frozenset(spec.source_topics) or None

    def entry(self, seq: int, timeout_s: float) -> Entry | None:
        """The entry ``seq``, waiting up to ``timeout_s`` for it; None if it has not come. A seq already evicted
        raises SUBSCRIBER_TOO_SLOW (the caller's resume point goes with it)."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                if self.error is not None:
                    raise self.error
                if seq < self.next_seq:
                    if not self.entries or seq < self.entries[0].seq:
                        raise SubscriptionError(SUBSCRIBER_TOO_SLOW, "the changes after this feed's position are "
                                                "no longer held")
                    return self.entries[seq - self.entries[0].seq]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def head(self) -> Entry | None:
        """The last whole batch of the topic that answers now (None: none read yet)."""
        with self.cond:
            for e in reversed(self.entries):
                if e.kind == "rebuilt":
                    return None
                if e.batch is not None and e.batch.complete:
                    return e
            return None

    def find(self, pred: Callable[[Entry], bool]) -> Entry | None:
        """The first held batch entry of the answering topic for which ``pred`` holds."""
        with self.cond:
            topic = self.serving.topic if self.serving is not None else None
            for e in self.entries:
                if e.batch is not None and e.topic == topic and pred(e):
                    return e
            return None

    def place(self, topic: str, batch_id: int) -> tuple[str, Entry | None]:
        """Where batch ``batch_id`` of ``topic`` stands, in one look: ("held", its entry), ("ahead", None: not read
        yet), ("older", None: before what is held, or the hub follows another topic)."""
        with self.cond:
            if self.serving is None or self.serving.topic != topic:
                return "older", None
            held = [e for e in self.entries if e.topic == topic and e.batch is not None]
            for e in held:
                if e.batch.batch_id == batch_id:  # type: ignore[union-attr]
                    return "held", e
            if held and batch_id > held[-1].batch.batch_id:  # type: ignore[union-attr]
                return "ahead", None
            if not held and self._began.get(topic) is not None and batch_id >= self._began[topic]:
                return "ahead", None
            return "older", None

    def first_batch(self, topic: str) -> int | None:
        """The oldest batch of ``topic`` held (None: none)."""
        with self.cond:
            for e in self.entries:
                if e.batch is not None and e.topic == topic:
                    return e.batch.batch_id
            return None

    def seq_after_batch(self, topic: str, batch_id: int) -> int | None:
        """Where a feed that has every batch of ``topic`` up to ``batch_id`` continues in the backlog (None: the
        backlog does not reach back to it yet, or has moved past it)."""
        with self.cond:
            if self.serving is None or self.serving.topic != topic:
                return None
            began = self._began.get(topic)
            if began is None or began > batch_id + 1 or self._evicted.get(topic, -1) > batch_id:
                return None
            for e in self.entries:
                if e.topic == topic and e.batch is not None and e.batch.batch_id > batch_id:
                    return e.seq
            last = next((e for e in reversed(self.entries) if e.topic == topic and e.batch is not None), None)
            return self.next_seq if last is not None and last.batch.batch_id == batch_id else None  # type: ignore[union-attr]

    def first_seq_of(self, topic: str) -> int:
        with self.cond:
            for e in self.entries:
                if e.topic == topic and e.batch is not None:
                    return e.seq
            return self.next_seq

    def whole_batch_at_or_after(self, topic: str, batch_id: int, deadline: float) -> Entry | None:
        """The first whole batch ``>= batch_id`` of ``topic``, waiting for it until ``deadline``."""
        with self.cond:
            while True:
                if self.error is not None:
                    raise self.error
                if self.serving is None or self.serving.topic != topic:
                    return None
                for e in self.entries:
                    if e.topic == topic and e.batch is not None and e.batch.batch_id >= batch_id and e.batch.complete:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def batches_between(self, topic: str, lo: int, hi: int) -> list[Batch] | None:
        """The batches (lo, hi] of ``topic``, or None if the hub does not hold all of them (it began after ``lo``,
        or evicted some)."""
        with self.cond:
            began = self._began.get(topic)
            if began is None or began > lo + 1 or self._evicted.get(topic, -1) > lo:
                return None
            out = [e.batch for e in self.entries if e.topic == topic and e.batch is not None
                   and lo < e.batch.batch_id <= hi]
        return out if out and out[-1].batch_id == hi else None

    def snapshot(self, bound: Position | None, timeout_s: float) -> SnapshotData:
        """A snapshot of the answering generation, at or past ``bound``: the cached one while it is still
        followed by held batches (one snapshot serves every feed that starts meanwhile), else a new one."""
        with self._snap_lock:
            snap = self._snap
            if snap is not None:
                with self.cond:
                    fresh = (self.serving is not None and snap.topic == self.serving.topic
                             and (not self.entries or snap.seq_after >= self.entries[0].seq)
                             and self._evicted.get(snap.topic, -1) <= snap.batch_id)
                if fresh and (bound is None or snap.source.covers(bound)):
                    return snap
            snap = build_snapshot(self, bound, timeout_s)
            self._snap = snap
            self.stats["snapshots"] += 1
            return snap
