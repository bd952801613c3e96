"""The IQv2 acceptance fixture of Kafka's tests (reference §5.1), shared by the stores tests.

The acceptance fixture (reference §5.1) is written straight into the
partition stores, as Kafka's test topology puts key k on input partition
k % 2, so the expected per-partition tables port unchanged.
"""

from __future__ import annotations

from stores.app.streams import StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position

TOPIC = "input-topic"
MIN = 60_000
WS = 1_700_000_100_000 // (5 * MIN) * (5 * MIN)  # a fixed 5-minute boundary (Kafka uses now; fixed is reproducible)
INPUT_POSITION = Position.from_map({TOPIC: {0: 5, 1: 3}})
POSITION_0 = Position.from_map({TOPIC: {0: 5}})
POSITION_1 = Position.from_map({TOPIC: {1: 3}})

RECORDS = [(i // 2, i, WS + 2 * MIN * i) for i in range(10)]  # (key, value, timestamp)


def spec_for(kind: StoreKind, name: str | None = None, partitions: int = 2, **kw: object) -> StoreSpec:
    extra: dict[str, object] = {}
    if kind is StoreKind.WINDOW:
        extra["window_size_ms"] = 5 * MIN
    if kind is StoreKind.SESSION:
        extra["gap_ms"] = 5 * MIN
    if kind is StoreKind.VERSIONED:
        extra["history_retention_ms"] = 86_400_000
    extra.update(kw)
    return StoreSpec(
        name or f"{kind.value}_store", kind, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),),
        partitions=partitions, source_topics=(TOPIC,), **extra,  # type: ignore[arg-type]
    )


def fixture_changes(kind: StoreKind, flavor: str = "dsl") -> dict[int, list[Change]]:
    """Per store partition (key % 2), the changes Kafka's fixture topology leaves in a store of ``kind``.

    ``dsl`` aggregates with sum (5-minute tumbling windows, 5-minute-gap
    sessions); ``papi`` keeps the last value per window and one session per record.
    """
    out: dict[int, list[Change]] = {0: [], 1: []}
    if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE, StoreKind.VERSIONED):
        for k, v, ts in RECORDS:
            out[k % 2].append(Change(k, (v,), ts))
    elif kind is StoreKind.WINDOW:
        agg: dict[tuple[int, int], int] = {}
        for k, v, ts in RECORDS:
            start = ts // (5 * MIN) * (5 * MIN)
            agg[(k, start)] = agg.get((k, start), 0) + v if flavor == "dsl" else v
        for (k, start), v in agg.items():
            out[k % 2].append(Change(k, (v,), None, start, start + 5 * MIN))
    elif kind is StoreKind.SESSION:
        if flavor == "dsl":
            sessions: dict[int, list[int]] = {}
            for k, v, ts in RECORDS:  # records of a key are 2 minutes apart: one session per key
                s = sessions.setdefault(k, [ts, ts, 0])
                s[1], s[2] = ts, s[2] + v
            for k, (start, end, total) in sessions.items():
                out[k % 2].append(Change(k, (total,), end, start, end))
        else:
            for k, v, ts in RECORDS:
                out[k % 2].append(Change(k, (v,), ts, ts, ts))
    return out


def write_fixture(app: StreamsApp, name: str, kind: StoreKind, flavor: str = "dsl") -> None:
    """Write Kafka's fixture straight into partitions 0 and 1 (key k on partition k % 2).

    Both partitions get INPUT_POSITION: in our model a store partition has
    seen every source partition (docs/DESIGN.md §3), where Kafka's partition 0 only
    has POSITION_0. So results carry INPUT_POSITION where Kafka's carry
    POSITION_0 -- the one deliberate change to the ported tables.
    """
    per = fixture_changes(kind, flavor)
    app.partition_store(name, 0).apply_batch(1, per[0], INPUT_POSITION)
    app.partition_store(name, 1).apply_batch(1, per[1], INPUT_POSITION)
