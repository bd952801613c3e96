"""The position bound of a statement, checked against the stores it reads.

A bound is ``{topic: {partition: offset}}``; topics a store does not read
are ignored by that store (docs/DESIGN.md §3), so one token can be reused across
stores — a bound naming another store's topic keeps that meaning. But a
bound whose topics no queried store reads and that names a topic no store
reads at all bounds nothing by mistake: almost always a misspelt topic, and
answering unbounded would silently lose read-your-writes. That is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from stores.catalog.schema import StoreSpec
from stores.iqv2.position import Position

from .errors import UnknownTopicError

__all__ = ["check_bound_topics"]


def check_bound_topics(bound: Position, queried: Iterable[StoreSpec], catalog: Iterable[StoreSpec]) -> None:
    """Raise UnknownTopicError when no topic of ``bound`` is an input of ``queried`` and some is no store's input.

    Stores that declare no source topics accept any bound (nothing to check against).
    """
    named = set(bound.topics())
    if not named:
        return
    read: set[str] = set()
    for spec in queried:
        if not spec.source_topics:
            return
        read.update(spec.source_topics)
    if named & read:
        return
    known = {t for spec in catalog for t in spec.source_topics}
    unknown = sorted(named - known)
    if not unknown:
        return  # every topic is some other store's: ignored here, as Kafka does
    raise UnknownTopicError(
        f"the position bound names topic(s) {', '.join(repr(t) for t in unknown)} that no store reads; the "
        f"queried store(s) read {', '.join(sorted(read))} (all stores read: {', '.join(sorted(known))}); "
        "check the spelling")
