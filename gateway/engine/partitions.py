"""Each store partition a source has: its role, Position and lag (``system.partitions``, ``/v1/partitions``).

The role says how far to trust a partition's answer: ``active`` (the
pipeline host applies batches to it), ``standby`` (a replica tails its
changelog), ``copy`` (files whose writer is gone). Routing (``gateway.routing``)
exchanges these between peers; the engine answers ``system.partitions`` with
them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from stores.iqv2.position import Position
from stores.iqv2.request import StateQueryRequest

from .scans import probe_query
from .sources import Capabilities

__all__ = ["PartitionInfo", "local_partitions", "partition_row", "local_partition_rows"]


@dataclass(frozen=True)
class PartitionInfo:
    store: str
    partition: int
    role: str                      # active | standby | copy
    position: Position
    offset_lag: int = 0
    time_lag_ms: int = 0
    current_offset: int | None = None
    end_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "partition": self.partition, "role": self.role,
                "position": self.position.to_json_map(), "offset_lag": self.offset_lag,
                "time_lag_ms": self.time_lag_ms, "current_offset": self.current_offset,
                "end_offset": self.end_offset}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PartitionInfo:
        return cls(str(raw["store"]), int(raw["partition"]), str(raw["role"]), Position.from_map(raw["position"]),
                   int(raw.get("offset_lag") or 0), int(raw.get("time_lag_ms") or 0), raw.get("current_offset"),
                   raw.get("end_offset"))


def local_partitions(source: Any, caps: Capabilities, only: Collection[str] | None = None) -> list[PartitionInfo]:
    """What ``source`` serves: role, Position and lag of every store partition it has (of the stores in ``only``).

    A replica reports its lags (they carry roles and Positions); any other source is asked its roles and, per
    store, one cheap IQv2 probe for the Positions (never of a store outside ``only``: a user's view).
    """
    if caps.partition_lags is not None:
        return [PartitionInfo(lag.store, lag.partition, lag.role, lag.position, lag.offset_lag, lag.time_lag_ms,
                              lag.current_offset, lag.end_offset) for lag in caps.partition_lags()]
    roles = caps.partition_roles() if caps.partition_roles is not None else {}
    out = []
    for name, spec in sorted(source.catalog().items()):
        if only is not None and name not in only:
            continue
        try:
            answer = source.query(StateQueryRequest.in_store(name).with_query(probe_query(spec)))
        except Exception:  # noqa: BLE001 - a store that cannot answer has no Position to report
            continue
        for p, qr in answer.partition_results.items():
            if qr.is_failure and qr.position is None:
                continue
            out.append(PartitionInfo(name, p, roles.get(name, {}).get(p, "copy"), qr.position or Position.empty()))
    return out


def partition_row(host: str | None, i: PartitionInfo, alive: bool) -> tuple[Any, ...]:
    """One row of ``system.partitions``."""
    return (host, i.store, i.partition, i.role, i.position.to_json(), i.offset_lag, i.time_lag_ms,
            i.current_offset, i.end_offset, alive)


def local_partition_rows(source: Any, caps: Capabilities, only: Collection[str] | None = None) -> list[tuple[Any, ...]]:
    """``system.partitions`` of a server without peers (a routed one answers ``Routes.partition_rows``); of the
    stores in ``only`` when given."""
    if caps.partition_rows is not None:
        rows = caps.partition_rows()
        return rows if only is None else [r for r in rows if r[1] in only]
    infos = sorted(local_partitions(source, caps, only), key=lambda i: (i.store, i.partition))
    return [partition_row(None, i, True) for i in infos]
