"""ReplicaSource: what ``iqgate replica`` serves — the replica's state dir, read like any state dir, plus its lags."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..app.reader import StateDirReader
from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from ..iqv2.request import StateQueryRequest
from ..iqv2.result import StateQueryResult
from ..iqv2.state import State
from .standby import PartitionLag, Replica

__all__ = ["ReplicaSource"]


class ReplicaSource:
    """A Queryable over a running ``Replica``: answers from its files at the Position each partition reached."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.reader = StateDirReader(replica.state_dir)

    @property
    def state(self) -> State:
        return self.reader.state

    def catalog(self) -> Mapping[str, StoreSpec]:
        return self.reader.catalog()

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        # notice a swap to a new copy (store.json rewritten) even when no statement asked for the catalog first:
        # the copy swapped out is deleted a little later
        self.reader.catalog()
        return self.reader.query(request)

    def point_read(self, store: str, partition: int, key: Any, bound: Any) -> Any:
        """``StateDirReader.point_read`` on the replica's files (a swap is noticed first, as ``query`` does)."""
        self.reader.catalog()
        return self.reader.point_read(store, partition, key, bound)

    def kept_positions(self, store: str) -> dict[int, list[Position]]:
        """``StateDirReader.kept_positions`` on the replica's files (its copies keep history as the active does)."""
        self.reader.catalog()
        return self.reader.kept_positions(store)

    def app_info(self) -> Any:
        return self.reader.app_info()

    def partition_lags(self) -> list[PartitionLag]:
        return self.replica.lags()

    def positions(self) -> dict[str, Position]:
        return self.reader.positions()

    def source_end_offsets(self, topics: Iterable[str]) -> Position | None:
        return self.reader.source_end_offsets(topics)

    def status(self) -> dict[str, Any]:
        out = dict(self.reader.status())
        out["partitions"] = [lag.to_json() for lag in self.replica.lags()]  # KIP-535 lags, in health and metrics
        out["changelogs"] = self.replica.generations()  # which generation's topic each store follows
        if self.replica.errors:
            out["health"] = {**out["health"], "status": "degraded",
                             "reason": "; ".join(f"store {n}: {e}" for n, e in sorted(self.replica.errors.items()))}
        return out

    def close(self) -> None:
        self.replica.close()
        self.reader.close()
