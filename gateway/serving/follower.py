"""What a serving process answers from: the state dir's files, under the state its supervisor publishes.

Every serving process of a server reads the store files (``StateDirReader``:
SQLite WAL, any number of reading processes beside the one writer) and takes
the app's KIP-696 state, its health and every store's status from the
supervisor's state board (``state_board.py``), never from a view of its own.
So every process answers the same request the same way, within the board's
heartbeat of each other (``age_ms`` in health says how old a process's view
is).

The rule for answering depends on what the server serves (``mode``):

- ``hosted`` (``serve <pipeline>``, ``demo``): the KIP-216 rule of the
  hosted app, as ``StreamsApp.query`` applies it: CREATED answers
  StreamsNotStarted; PENDING_SHUTDOWN, NOT_RUNNING, PENDING_ERROR and ERROR
  answer StreamsStopped, on every process alike;
- ``read-only`` (``serve --state-dir``) and ``replica``: the files are a
  durable copy, so queries are answered whatever the writer's state; health
  says which.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from stores.app.health import StoreStatus
from stores.app.reader import StateDirReader
from stores.catalog.schema import StoreSpec
from stores.iqv2.errors import StreamsNotStartedException, StreamsStoppedException
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import StateQueryResult
from stores.iqv2.state import State

from ..engine.partitions import PartitionInfo
from ..engine.sources import Capabilities
from .state_board import StateBoard

__all__ = ["Follower", "MODES"]

MODES = ("hosted", "read-only", "replica")
_STOPPED = (State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.PENDING_ERROR, State.ERROR)


class Follower:
    """A source over ``reader`` that answers as the board says (see the module doc)."""

    def __init__(self, reader: StateDirReader, board: StateBoard, mode: str, index: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"serving mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.index = index
        self.reader = reader
        self.board = board
        self.mode = mode
        self._reader_caps = Capabilities.of(reader)

    def capabilities(self) -> Capabilities:
        """The reader's, with this server's status and (on a replica) the lags its supervisor publishes."""
        return Capabilities(
            point_read=self.point_read, status=self.status,
            source_end_offsets=self._reader_caps.source_end_offsets,
            upcoming_columns=self._reader_caps.upcoming_columns, history=self._reader_caps.history,
            partition_roles=self._reader_caps.partition_roles,
            partition_lags=self.partition_lags if self.mode == "replica" else None, partition_rows=None,
            live_source=self.live_source, stream_reader=self._reader_caps.stream_reader)

    def live_source(self) -> StateDirReader:
        """Live answers follow the state dir's stores and their changelogs (where ``app.json`` says they are)."""
        return self.reader

    # -- the source -----------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        raw = self.board.read().doc.get("state")
        try:
            return State(raw) if raw else State.CREATED
        except ValueError:
            return State.CREATED

    def catalog(self) -> Mapping[str, StoreSpec]:
        return self.reader.catalog()

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        self.reader.catalog()  # notice a swap to a rebuilt generation (store.json rewritten) before reading
        self._check_state(request.store_name)
        return self.reader.query(request)

    def point_read(self, store: str, partition: int, key: Any, bound: PositionBound) -> Any:
        self._check_state(store)
        return self.reader.point_read(store, partition, key, bound)

    def _check_state(self, store: str) -> None:
        """KIP-216's exceptions for the hosted app's state (an unknown store is named first, as Kafka does)."""
        if self.mode != "hosted":
            return
        state = self.state
        if state.is_running_or_rebalancing():
            return
        self.reader._spec(store)  # noqa: SLF001 - UnknownStateStoreException before the state, as StreamsApp
        if state is State.CREATED:
            raise StreamsNotStartedException("KafkaStreams has not been started, you can retry after calling start().")
        if state in _STOPPED:
            why = self.board.read().doc.get("reason")
            raise StreamsStoppedException(f"KafkaStreams has been stopped ({state}). This instance can no longer "
                                          f"serve queries.{' ' + why if why else ''}")

    # -- capabilities ---------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The supervisor's published status, with how old this process's view of it is."""
        view = self.board.read()
        doc = view.doc
        out: dict[str, Any] = {key: value for key, value in doc.items() if key not in ("stores", "health")}
        out["state"] = doc.get("state", State.CREATED.value)
        out["health"] = dict(doc.get("health") or {"status": "starting", "reason": "the server is starting",
                                                   "since": None, "retry_s": None})
        out["stores"] = {n: StoreStatus.from_json(s) for n, s in (doc.get("stores") or {}).items()}
        out["view_age_ms"] = view.age_ms
        out["process"] = {"index": self.index, "pid": os.getpid()}
        if view.stale:
            out["health"] = {**out["health"], "status": "stopped",
                             "reason": f"the supervisor has not refreshed the state for {view.age_ms} ms"}
        return out

    def partition_lags(self) -> list[PartitionInfo]:
        """A replica's KIP-535 lags, as its supervisor (which runs the restoring) last published them."""
        return [PartitionInfo.from_json(raw) for raw in self.board.read().doc.get("partitions") or ()]

    def source_end_offsets(self, topics: Iterable[str]) -> Position | None:
        ends = self._reader_caps.source_end_offsets
        return ends(topics) if ends is not None else None

    def close(self) -> None:
        self.reader.close()
