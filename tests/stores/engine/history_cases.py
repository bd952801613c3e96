"""What the history tests write and ask, per store kind: random batches and every query type the kind answers.

Shared by test_history.py (the differential tests) and test_history_reads.py; the answers are normalized to
plain Python values so a state read as of a snapshot can be compared with the one read when it was current.
"""

from __future__ import annotations

import random
from typing import Any

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.arrow_reads import ArrowQuery, ArrowRows
from stores.engine.base import PartitionStore
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    MultiVersionedKeyQuery,
    MultiVersionedRangeQuery,
    RangeQuery,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.result import QueryResult

UNBOUNDED = PositionBound.unbounded()
KINDS = [StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE, StoreKind.WINDOW, StoreKind.SESSION,
         StoreKind.VERSIONED]
KEYS = range(10)
RETENTION_MS = 40  # a versioned store's history retention: old versions are dropped as batches go by


def spec_of(kind: StoreKind, name: str = "h", partitions: int = 1, **options: Any) -> StoreSpec:
    extra: dict[str, Any] = {}
    if kind is StoreKind.WINDOW:
        extra["window_size_ms"] = 10
    if kind is StoreKind.SESSION:
        extra["gap_ms"] = 5
    if kind is StoreKind.VERSIONED:
        extra["history_retention_ms"] = RETENTION_MS
    return StoreSpec(name, kind, Column("k", SqlType.BIGINT), (Column("n", SqlType.BIGINT), Column("s", SqlType.VARCHAR)),
                     partitions=partitions, source_topics=("t",),
                     options={"history_batches": 64, "history_ms": 0, **options}, **extra)


def random_batch(kind: StoreKind, rng: random.Random, i: int) -> list[Change]:
    """Inserts, updates and deletes (tombstones for versioned stores), several changes of one row in a batch, and
    now and then an empty batch."""
    out = []
    for _ in range(rng.choice((0, 1, 3, 6, 10))):
        k = rng.choice(KEYS)
        value = None if rng.random() < 0.25 else (rng.randrange(100), rng.choice(("a", "b", None, f"s{i}")))
        if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
            out.append(Change(k, value, 1000 + i * 10 + rng.randrange(10)))
        elif kind is StoreKind.WINDOW:
            ws = rng.choice((0, 10, 20, 30))
            out.append(Change(k, value, None, ws, ws + 10))
        elif kind is StoreKind.SESSION:
            ws = rng.randrange(0, 40)
            out.append(Change(k, value, ws, ws, ws + rng.randrange(0, 6)))
        else:  # versioned: record times around the batch's, some out of order
            out.append(Change(k, value, max(0, i * 10 + rng.randrange(-25, 10))))
    return out


def queries(kind: StoreKind) -> list[tuple[str, Any]]:
    """Every query type the kind answers, ArrowQuery included, over the whole key range."""
    if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
        qs: list[tuple[str, Any]] = [(f"key {k}", KeyQuery.with_key(k)) for k in (*KEYS, 99)]
        qs += [("all", RangeQuery.with_no_bounds()), ("2..7 desc", RangeQuery.with_range(2, 7).with_descending_keys()),
               (">= 5", RangeQuery.with_lower_bound(5)), ("<= 3", RangeQuery.with_upper_bound(3)),
               ("keys", MultiKeyQuery.with_keys([1, 3, 5, 8, 99])),
               ("arrow all", ArrowQuery(RangeQuery.with_no_bounds(), batch_rows=3)),
               ("arrow 3..8 desc", ArrowQuery(RangeQuery.with_range(3, 8).with_descending_keys()))]
        if kind is StoreKind.TIMESTAMPED_KEY_VALUE:
            qs += [(f"ts key {k}", TimestampedKeyQuery.with_key(k)) for k in KEYS]
            qs += [("ts all", TimestampedRangeQuery.with_no_bounds()),
                   ("ts 1..6", TimestampedRangeQuery.with_range(1, 6)),
                   ("arrow ts all", ArrowQuery(TimestampedRangeQuery.with_no_bounds(), batch_rows=4))]
        return qs
    if kind is StoreKind.WINDOW:
        qs = [(f"windows of {k}", WindowKeyQuery.with_key_and_window_start_range(k, 0, 25)) for k in KEYS]
        return qs + [("starts 0..100", WindowRangeQuery.with_window_start_range(0, 100)),
                     ("starts 10..20", WindowRangeQuery.with_window_start_range(10, 20)),
                     ("arrow starts", ArrowQuery(WindowRangeQuery.with_window_start_range(0, 100), batch_rows=5))]
    if kind is StoreKind.SESSION:
        return [(f"sessions of {k}", WindowRangeQuery.with_key(k)) for k in (*KEYS, 99)]
    qs = [(f"latest {k}", VersionedKeyQuery.with_key(k)) for k in KEYS]
    qs += [(f"{k} as of {t}", VersionedKeyQuery.with_key(k).as_of(t)) for k in (1, 4, 7) for t in (5, 33, 60, 95)]
    qs += [(f"versions of {k}", MultiVersionedKeyQuery.with_key(k).with_ascending_timestamps()) for k in KEYS]
    qs += [("versions of 3, 20..70 desc", MultiVersionedKeyQuery.with_key(3).from_time(20).to_time(70)),
           ("all versions", MultiVersionedRangeQuery.with_no_key_bounds()),
           ("2..8, 20..80", MultiVersionedRangeQuery.with_key_range(2, 8).from_time(20).to_time(80)
            .with_descending_keys().with_ascending_timestamps()),
           ("arrow versions", ArrowQuery(MultiVersionedRangeQuery.with_no_key_bounds(), batch_rows=4))]
    return qs


def plain(result: Any) -> Any:
    """A result as plain, comparable values (an Arrow stream is read to its end, which ends its snapshot)."""
    if isinstance(result, ArrowRows):
        return [row for batch in result.batches() for row in batch.to_pylist()]
    if hasattr(result, "remaining"):
        return list(result)
    return result


def answers(store: PartitionStore, qs: list[tuple[str, Any]], snapshot: Position | None = None,
            bound: PositionBound = UNBOUNDED) -> tuple[set[Position], dict[str, Any]]:
    """Every query's answer (failures raise, naming the query) and the Positions they carried."""
    out: dict[str, Any] = {}
    positions = set()
    for name, q in qs:
        r: QueryResult = store.query(q, bound, snapshot=snapshot)
        assert r.is_success, (name, snapshot, r)
        positions.add(r.position)
        out[name] = plain(r.result)
    return positions, out
