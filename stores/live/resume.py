"""Where a feed resumes: the Position a subscriber received, placed in the store's changelog.

Two kinds of resume point:

- a feed's own Position (the usual case: the last ``position`` received) names the changelog topic with the
  offset of the batch's record in each partition: the feed continues right after that batch, whatever its
  source Position (two batches can share one: a no-data batch that closes windows);
- a plain source Position (from a pull query, or written by hand) must be the Position of a batch of the
  answering generation: the feed continues after the first batch at exactly that Position (a later batch
  at the same Position is sent again; its changes are absolute rows, so applying them twice changes nothing).

A resume point inside the hub's backlog attaches to it at once; an older one is replayed from the changelog by
the feed's own reader until it meets the backlog; one the hub has not read yet is waited for. A point the log no
longer holds, or of a generation swapped out since, is SUBSCRIPTION_TOO_OLD with the oldest Position a feed can
resume from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..changelog.topics import parse_changelog_topic
from ..iqv2.position import Position
from .errors import (
    INVALID_RESUME_POSITION,
    RESUME_POSITION_AHEAD,
    SUBSCRIPTION_TOO_OLD,
    SubscriptionError,
)
from .locate import Locator, restricted
from .reader import token

__all__ = ["Attach", "Replay", "Await", "locate_resume", "oldest_position"]


class Hub(Protocol):
    """What a resume needs of the hub (``hub.Hub``): what answers, and the batches it holds."""

    store: str
    access: Any

    def serving_now(self) -> tuple[Any, int]: ...

    def topics(self, spec: Any) -> frozenset[str] | None: ...

    def find(self, pred: Callable[[Any], bool]) -> Any: ...

    def place(self, topic: str, batch_id: int) -> tuple[str, Any]: ...

    def first_batch(self, topic: str) -> int | None: ...


@dataclass(frozen=True)
class Attach:
    """Continue at the hub's entry ``seq``; the subscriber holds the answer at ``position``."""

    seq: int
    position: Position


@dataclass(frozen=True)
class Replay:
    """Read ``topic`` from ``starts`` (the records after batch ``batch_id``) until the hub's backlog."""

    topic: str
    starts: dict[int, int]
    batch_id: int
    position: Position


@dataclass(frozen=True)
class Await:
    """The hub has not read this far yet: skip entries until the one of batch ``batch_id`` (or, with ``source``,
    the first at exactly that source Position) and continue after it."""

    topic: str
    batch_id: int | None = None
    source: Position | None = None


def _invalid(message: str) -> SubscriptionError:
    return SubscriptionError(INVALID_RESUME_POSITION, message)


def oldest_position(hub: Hub) -> Position:
    """The oldest Position a feed of the answering generation can resume from (empty: nothing logged yet)."""
    serving, _ = hub.serving_now()
    locator = Locator(hub.access.changelog(), serving.topic)
    low, end = locator.bounds()
    firsts = [locator.record_at(p, low.get(p, 0)) for p in range(serving.spec.partitions)]
    if any(f is None for f in firsts):
        return Position.empty()
    b0 = max(f.record.batch_id for f in firsts if f is not None)
    items = [locator.batch_record(p, b0, low.get(p, 0), end.get(p, 0)) for p in range(serving.spec.partitions)]
    if any(i is None or i.record.batch_id != b0 for i in items):
        return Position.empty()
    source = Position.empty()
    for i in items:
        source = source.merge(i.record.position)  # type: ignore[union-attr]
    return token(source, serving.topic, {i.partition: i.offset for i in items if i is not None})


def _too_old(hub: Hub, why: str) -> SubscriptionError:
    oldest = oldest_position(hub)
    return SubscriptionError(SUBSCRIPTION_TOO_OLD, f"{why}; the oldest Position a subscription of store "
                             f"{hub.store!r} can resume from is {oldest.to_json()}", oldest=oldest)


def locate_resume(hub: Hub, resume: Position) -> Attach | Replay | Await:
    """Where a feed resuming from ``resume`` (received earlier, snapshot off) continues."""
    serving, _ = hub.serving_now()
    spec, topic = serving.spec, serving.topic
    app = hub.access.application_id
    mine = {t: parsed[1] for t in resume.topics()
            if (parsed := parse_changelog_topic(app, t)) is not None and parsed[0] == hub.store}
    if len(mine) > 1:
        raise _invalid(f"the resume Position names {len(mine)} changelogs of store {hub.store!r} "
                       f"({', '.join(sorted(mine))}); a feed's Position names one")
    if mine:
        return _by_offsets(hub, resume, *next(iter(mine.items())), topic, spec.partitions)
    return _by_source(hub, restricted(resume, hub.topics(spec)), topic, spec.partitions)


def _by_offsets(hub: Hub, resume: Position, named: str, generation: int, topic: str, n: int
                ) -> Attach | Replay | Await:
    if named != topic:
        parsed = parse_changelog_topic(hub.access.application_id, topic)
        current = parsed[1] if parsed is not None else None
        if current is not None and generation > current:
            raise SubscriptionError(RESUME_POSITION_AHEAD, f"the resume Position is of {named}, a generation of store "
                                    f"{hub.store!r} this server does not answer from yet (it answers from {topic}); "
                                    "try again shortly or on another server")
        raise _too_old(hub, f"the resume Position is of {named}, a generation of store {hub.store!r} that was "
                            f"rebuilt since (it answers from {topic} now)")
    offsets = dict(resume.partition_positions(named))
    if sorted(offsets) != list(range(n)):
        raise _invalid(f"the resume Position names partitions {sorted(offsets)} of {named}; store {hub.store!r} "
                       f"has {n} (0..{n - 1}), all of which a feed's Position names")
    held = hub.find(lambda e: e.batch is not None and e.batch.offsets == offsets)
    if held is not None:
        return Attach(held.seq + 1, held.batch.position)  # type: ignore[union-attr]
    locator = Locator(hub.access.changelog(), topic)
    low, _end = locator.bounds()
    items = {}
    for p, off in offsets.items():
        if off < low.get(p, 0):
            raise _too_old(hub, f"{named} partition {p} no longer holds offset {off} (it begins at {low.get(p, 0)})")
        item = locator.record_at(p, off)
        if item is None or item.offset != off:
            raise _invalid(f"{named} partition {p} has no record at offset {off}: not a Position of this store's "
                           "changelog (was it created again?)")
        items[p] = item
    batches = {it.record.batch_id for it in items.values()}
    if len(batches) != 1:
        raise _invalid(f"the resume Position's offsets are of different batches ({sorted(batches)}) of {named}")
    b = batches.pop()
    where, entry = hub.place(topic, b)
    if where == "held":  # read meanwhile: its offsets must be the resume Position's
        if entry is not None and entry.batch is not None and entry.batch.offsets == offsets:
            return Attach(entry.seq + 1, entry.batch.position)
        raise _invalid(f"batch {b} of {named} is held with other offsets than the resume Position's")
    if where == "ahead":
        return Await(topic, batch_id=b)
    source = Position.empty()
    for it in items.values():
        source = source.merge(it.record.position)
    return Replay(topic, {p: o + 1 for p, o in offsets.items()}, b, token(source, topic, offsets))


def _by_source(hub: Hub, q: Position, topic: str, n: int) -> Attach | Replay | Await:
    locator = Locator(hub.access.changelog(), topic)
    low, end = locator.bounds()
    if q.is_empty():  # the answer before any batch: every batch the topic holds, if it holds them from its start
        if any(low.get(p, 0) > 0 for p in range(n)):
            raise _too_old(hub, "resuming from the empty Position needs the changelog from its start, which was "
                                "deleted")
        return Replay(topic, {p: 0 for p in range(n)}, -1, Position.empty())
    topics = hub.topics(hub.serving_now()[0].spec)

    def at(e: Any) -> Position:
        return restricted(e.batch.source, topics)

    held = hub.find(lambda e: at(e).covers(q))
    first_held = hub.first_batch(topic)
    if held is not None:
        if at(held) == q:
            return Attach(held.seq + 1, held.batch.position)
        if held.batch.batch_id != first_held:
            raise _invalid(f"the store passed from a Position below {q.to_json()} to "
                           f"{at(held).to_json()} without stopping at it: resume from a Position a subscription "
                           "(or a pull query of this store) returned")
    found = locator.first(0, low.get(0, 0), end.get(0, 0),
                          lambda it: restricted(it.record.position, topics).covers(q))
    if found is None:
        return Await(topic, source=q)
    if restricted(found.record.position, topics) != q:
        first_item = locator.record_at(0, low.get(0, 0))
        if first_item is not None and first_item.offset == found.offset:
            raise _too_old(hub, f"the changelog {topic} begins past the Position {q.to_json()}")
        raise _invalid(f"the Position {q.to_json()} is not one store {hub.store!r} passed through: resume from a "
                       "Position a subscription (or a pull query of this store) returned")
    b = found.record.batch_id
    held_b = hub.find(lambda e: e.batch.batch_id == b)
    if held_b is not None:
        return Attach(held_b.seq + 1, held_b.batch.position)  # type: ignore[union-attr]
    offsets = {}
    for p in range(n):
        item = locator.batch_record(p, b, low.get(p, 0), end.get(p, 0))
        if item is None or item.record.batch_id != b:
            raise _invalid(f"{topic} partition {p} has no record of batch {b}")
        offsets[p] = item.offset
    return Replay(topic, {p: o + 1 for p, o in offsets.items()}, b, token(found.record.position, topic, offsets))
