"""The contracts between the parts of ``stores`` and the layers above.

- ``Queryable``: what the gateway runs StateQueryRequests against: a
  ``StreamsApp`` in the same process, or a ``StateDirReader`` that opens the
  store files of another process read-only.
- ``TopologyLike``/``Runtime``/``AppDriver``: how a pipeline (the Spark one in
  ``stores.pipeline``, or a plain store set in tests) plugs into ``StreamsApp``
  without ``StreamsApp`` importing pyspark.
- ``StoreWriter``: how a pipeline writes a batch of ``stores.engine.Change`` into a store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..catalog.schema import StoreSpec
from ..engine.change import Change
from ..iqv2.position import Position
from ..iqv2.request import StateQueryRequest
from ..iqv2.result import StateQueryResult
from ..iqv2.state import State, StreamThreadExceptionResponse
from .health import HealthTracker

__all__ = ["Queryable", "StoreWriter", "TopologyLike", "Runtime", "AppDriver"]


@runtime_checkable
class Queryable(Protocol):
    @property
    def state(self) -> State: ...

    def catalog(self) -> Mapping[str, StoreSpec]: ...

    def query(self, request: StateQueryRequest) -> StateQueryResult: ...


class StoreWriter(Protocol):
    """Writes batches into every partition of one store."""

    spec: StoreSpec

    def write_batch(self, batch_id: int, changes: Iterable[Change], position: Position) -> None:
        """Partition ``changes`` by key and apply them with ``position`` in one transaction per partition.

        Every partition gets ``position`` (a store partition has seen every
        source partition). A partition that already applied ``batch_id`` (or
        a later one) skips it, so replays after a crash are harmless.
        """
        ...

    def last_batch_id(self) -> int | None:
        """The smallest last-applied batch id over the partitions (None if some never applied one)."""
        ...


class Runtime(Protocol):
    """What drives the stores (the Spark pipeline). StreamsApp calls these; they must not block long."""

    def start(self) -> None:
        """Begin processing; called once after CREATED -> REBALANCING. Report progress through the AppDriver."""
        ...

    def replace(self, unit: str) -> None:
        """Restart the failed unit (a streaming query) from its checkpoint (REPLACE_THREAD)."""
        ...

    def stop(self, timeout_s: float) -> None:
        """Stop every unit and release resources; called on close and on the way to ERROR."""
        ...


class AppDriver(Protocol):
    """What a Runtime may ask of its StreamsApp."""

    application_id: str
    state_dir: Path

    @property
    def state(self) -> State: ...

    def writer(self, store_name: str) -> StoreWriter: ...

    def mark_rebalancing(self) -> None:
        """RUNNING -> REBALANCING (recovery, a unit restarting). No-op if already REBALANCING."""
        ...

    def mark_running(self) -> None:
        """REBALANCING -> RUNNING once every unit has caught up. No-op if already RUNNING."""
        ...

    def handle_uncaught(self, exc: BaseException, unit: str) -> StreamThreadExceptionResponse:
        """Give a unit's failure to the uncaught-exception handler and carry out its response."""
        ...

    def handle_store_failure(self, exc: BaseException, unit: str) -> None:
        """A store's query failed (not a fault, not a lost source): the handler if set, else the store fails alone."""
        ...

    @property
    def health(self) -> HealthTracker:
        """Per-store ingest status beside the client state (paused, rebuilding, failed)."""
        ...


class TopologyLike(Protocol):
    """The stores of a pipeline. A topology may also have ``stream_specs()`` (``StreamSpec``s: topics declared
    queryable as streams) and a ``log`` (the source log they, and the bounds, are read from)."""

    def store_specs(self) -> Sequence[StoreSpec]: ...

    def create_runtime(self, app: AppDriver) -> Runtime | None:
        """The runtime that maintains the stores, or None for stores written by hand (tests)."""
        ...
