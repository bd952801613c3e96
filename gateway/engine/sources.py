"""What a source of store answers can do, declared as Protocols and checked once, when a Gateway is built.

A source is what the engine runs IQv2 requests against: a ``StreamsApp`` in
this process, a ``StateDirReader`` over another process's files, a replica's
copy, a serving process that follows its host (``serving.follower``), or a
``RoutedSource`` over one of them and its peers. Every source answers
``Source``; the rest are capabilities some have and some do not. The engine
never probes a source with ``getattr``: ``Capabilities.of(source)`` records
once which ones it has, and the engine asks the record (a missing capability
is ``None``, and the feature it serves says so instead of silently
changing). ``tests/gateway/test_source_contract.py`` runs one suite of
contract tests against every kind of source.

| capability | what it serves |
|---|---|
| ``PointReads`` | the point lane: a KeyQuery answered without IQv2 objects (issue 14) |
| ``ReportsStatus`` | ``/v1/health``, ``/v1/stores``, ``/metrics``, ``system.stores``: health beside the KIP-696 state |
| ``KnowsSourceEnds`` | waiting for a bound: a bound past the source's end is answered at once |
| ``Upgrades`` | COLUMN_NOT_YET_AVAILABLE and ``system.stores``' history (issue 20) |
| ``HasRoles`` / ``HasLags`` | ``system.partitions`` and ``/v1/partitions``: each partition's role, Position and lag |
| ``Routes`` | ``system.partitions`` of a routed server: its own partitions and every peer's |
| ``FollowsLive`` | live answers: the object whose stores' changelogs feeds follow, where it is not the source |
| ``ReadsStreams`` | pull queries on streams: a reader of a stream's records from its log (issue 51) |
| ``WakesWaiters`` | waiting for a bound: woken when a batch is applied, not at the next poll (issue 50) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from stores.catalog.schema import StoreSpec
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import StateQueryResult
from stores.iqv2.state import State

__all__ = ["Source", "PointReads", "ReportsStatus", "KnowsSourceEnds", "Upgrades", "HasRoles", "HasLags", "Routes",
           "FollowsLive", "ReadsStreams", "WakesWaiters", "DeclaresCapabilities", "Capabilities"]


@runtime_checkable
class Source(Protocol):
    """Every source: the KIP-696 state, the store catalog, and IQv2 ``query`` (KIP-216 exceptions and all)."""

    @property
    def state(self) -> State: ...

    def catalog(self) -> Mapping[str, StoreSpec]: ...

    def query(self, request: StateQueryRequest) -> StateQueryResult: ...


@runtime_checkable
class PointReads(Protocol):
    def point_read(self, store: str, partition: int, key: Any, bound: PositionBound) -> Any:
        """``(position, value, timestamp)`` of one key, or None where ``query`` must answer (see StreamsApp)."""
        ...


@runtime_checkable
class ReportsStatus(Protocol):
    def status(self) -> dict[str, Any]:
        """``{"state", "health": {status, reason, since, retry_s}, "stores": {name: StoreStatus}, …}``."""
        ...


@runtime_checkable
class KnowsSourceEnds(Protocol):
    def source_end_offsets(self, topics: Iterable[str]) -> Position | None: ...


@runtime_checkable
class Upgrades(Protocol):
    def upcoming_columns(self, name: str) -> dict[str, Any] | None: ...

    def history(self, name: str) -> dict[str, Any] | None: ...


@runtime_checkable
class HasRoles(Protocol):
    def partition_roles(self) -> dict[str, dict[int, str]]:
        """Per store and partition this source has: ``active``, ``standby`` or ``copy``."""
        ...


@runtime_checkable
class HasLags(Protocol):
    def partition_lags(self) -> list[Any]:
        """KIP-535 lags per store partition (a replica's ``PartitionLag`` objects)."""
        ...


@runtime_checkable
class Routes(Protocol):
    def partition_rows(self) -> list[tuple[Any, ...]]:
        """``system.partitions``: this server's store partitions, then every peer's."""
        ...


@runtime_checkable
class FollowsLive(Protocol):
    def live_source(self) -> Any:
        """What live feeds follow for this source (``stores.live.LiveFeeds``: a StreamsApp, a StateDirReader or
        a ReplicaSource); a source without it is followed itself."""
        ...


@runtime_checkable
class ReadsStreams(Protocol):
    def stream_reader(self, name: str) -> Any:
        """A ``stores.log.stream_reader.StreamReader`` of the stream ``name`` over its log."""
        ...


@runtime_checkable
class WakesWaiters(Protocol):
    """A source whose writer runs in this process (a StreamsApp) and can wake a statement waiting for a bound."""

    def applied_batches(self) -> int: ...

    def wait_applied(self, seen: int, timeout_s: float) -> int: ...


@runtime_checkable
class DeclaresCapabilities(Protocol):
    def capabilities(self) -> Capabilities:
        """What this source can do, said outright (a wrapper's differ from what it wraps)."""
        ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Which capabilities a source has: each is the bound method, or None."""

    point_read: Callable[..., Any] | None
    status: Callable[[], dict[str, Any]] | None
    source_end_offsets: Callable[[Iterable[str]], Position | None] | None
    upcoming_columns: Callable[[str], dict[str, Any] | None] | None
    history: Callable[[str], dict[str, Any] | None] | None
    partition_roles: Callable[[], dict[str, dict[int, str]]] | None
    partition_lags: Callable[[], list[Any]] | None
    partition_rows: Callable[[], list[tuple[Any, ...]]] | None
    live_source: Callable[[], Any] | None = None
    stream_reader: Callable[[str], Any] | None = None
    applied_batches: Callable[[], int] | None = None
    wait_applied: Callable[[int, float], int] | None = None

    @classmethod
    def of(cls, source: Any) -> Capabilities:
        """The source's capabilities: declared by ``capabilities()`` (a source wrapping another, such as routing),
        else the Protocols it implements; a TypeError naming what is missing if it is not a ``Source`` at all."""
        if not isinstance(source, Source):
            missing = [n for n in ("state", "catalog", "query") if not hasattr(source, n)]
            raise TypeError(f"a Gateway needs a source with state, catalog() and query() (a StreamsApp or a "
                            f"StateDirReader); {type(source).__name__} lacks {', '.join(missing) or 'them'}")
        if isinstance(source, DeclaresCapabilities):
            return source.capabilities()
        upgrades = isinstance(source, Upgrades)
        return cls(
            point_read=source.point_read if isinstance(source, PointReads) else None,
            status=source.status if isinstance(source, ReportsStatus) else None,
            source_end_offsets=source.source_end_offsets if isinstance(source, KnowsSourceEnds) else None,
            upcoming_columns=source.upcoming_columns if upgrades else None,
            history=source.history if upgrades else None,
            partition_roles=source.partition_roles if isinstance(source, HasRoles) else None,
            partition_lags=source.partition_lags if isinstance(source, HasLags) else None,
            partition_rows=source.partition_rows if isinstance(source, Routes) else None,
            live_source=source.live_source if isinstance(source, FollowsLive) else None,
            stream_reader=source.stream_reader if isinstance(source, ReadsStreams) else None,
            applied_batches=source.applied_batches if isinstance(source, WakesWaiters) else None,
            wait_applied=source.wait_applied if isinstance(source, WakesWaiters) else None,
        )

    def names(self) -> list[str]:
        """The capabilities present, by name (for ``/v1/health`` and tests)."""
        return [n for n in self.__slots__ if getattr(self, n) is not None]  # type: ignore[attr-defined]
