"""StreamsApp: the Kafka Streams client facade over the stores (KIP-696 FSM, IQv2 query, IQv1 handles).

The app owns the store files under its state directory, the client state
machine, and the uncaught-exception handling of KIP-671; the pipeline that
fills the stores plugs in through ``TopologyLike.create_runtime`` (the Spark
runtime) and drives the app through the ``AppDriver`` methods. Without a
runtime (``StoreTopology``) the app is drivable by hand, which is how the
contract is tested without Spark.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..catalog.streams import Catalog
from ..engine import PartitionStore, open_partition
from ..engine.kv import PointRead
from ..engine.writer import PartitionedWriter
from ..iqv2.errors import (
    IllegalStateException,
    InvalidStateStorePartitionException,
    StreamsNotStartedException,
    StreamsStoppedException,
    UnknownStateStoreException,
)
from ..iqv2.position import Position, PositionBound
from ..iqv2.request import StateQueryRequest
from ..iqv2.result import StateQueryResult
from ..iqv2.state import State, StreamThreadExceptionResponse
from ..log.stream_reader import StreamReader
from . import layout
from .assignment import Hosting, initial_hosting, reassigned
from .coordination import ShutdownCoordinator
from .dispatch import run_request
from .generations import StoreFiles
from .handles import open_handle
from .health import HealthTracker, annotate_bound_failures, overall, restoring
from .lifecycle import ClientStateMachine
from .protocol import Runtime, TopologyLike
from .queryable_streams import declared_streams, reader_of
from .rebuilds import StoreRebuilds
from .store_topology import StoreTopology
from .upgrade import UpgradePlan, Upgrades, mark_removed, plan_upgrade

__all__ = ["StreamsApp", "StoreTopology"]  # StoreTopology: store_topology.py

log = logging.getLogger(__name__)

UncaughtHandler = Callable[[BaseException], StreamThreadExceptionResponse]

_STOPPED = (State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.PENDING_ERROR, State.ERROR)


class StreamsApp(StoreRebuilds):
    """One application instance: stores, state machine, queries.

    ``hosted_partitions`` are the active partitions this instance serves (a
    store not named there: every partition that is not a standby),
    ``standby_partitions`` the standby copies (they answer unless
    ``require_active``); any other partition is NOT_PRESENT. Hosting only
    decides what this instance serves: the files of every partition are
    opened, and ``writer(name)`` writes all of them (the pipeline computes
    every partition).
    """

    def __init__(
        self,
        topology: TopologyLike,
        application_id: str,
        state_dir: str | os.PathLike[str],
        *,
        hosted_partitions: Mapping[str, Iterable[int]] | None = None,
        standby_partitions: Mapping[str, Iterable[int]] | None = None,
        synchronous: str = "FULL",
        coordination_base: str | os.PathLike[str] | None = None,
        shutdown_poll_s: float = 0.5,
        rebuild_from_available: bool | Iterable[str] = False,
    ) -> None:
        if not isinstance(application_id, str) or not application_id.strip():
            raise ValueError(f"application_id must be a non-empty string, got {application_id!r}")
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, got {synchronous!r}")
        self.application_id = application_id
        self.state_dir = Path(state_dir)
        self.topology = topology
        specs = list(topology.store_specs())
        self._specs: dict[str, StoreSpec] = {}
        for s in specs:
            if s.name in self._specs:
                raise ValueError(f"duplicate store name {s.name!r} in topology")
            self._specs[s.name] = s
        self._streams = declared_streams(topology, self._specs)
        self._hosting: Hosting = initial_hosting(self._specs, hosted_partitions, standby_partitions)
        self._synchronous = synchronous.upper()
        self._stores: dict[str, dict[int, PartitionStore]] = {}
        self._generation: dict[str, int] = {n: 0 for n in self._specs}
        self._writers: dict[tuple[str, int | None], PartitionedWriter] = {}
        self._files: dict[str, StoreFiles] = {}
        self._views: dict[str, tuple[dict[int, PartitionStore], frozenset[int]]] = {}
        self._lock = threading.RLock()
        self._start_lock = threading.Lock()
        self._handler: UncaughtHandler | None = None
        self._fatal: BaseException | None = None  # why the client went to ERROR, for every later error message
        self._runtime: Runtime | None = None
        self._coordinator = ShutdownCoordinator(application_id, self, coordination_base, shutdown_poll_s)
        self._json_lock = threading.Lock()
        self._state_since = time.time()
        #: per-store ingest status beside the client state (paused by a fault, rebuilding, failed): health.py
        self.health = HealthTracker(self._specs, on_change=lambda: self._write_app_json(self.state))
        self._fsm = ClientStateMachine(application_id, on_change=self._state_changed)
        #: issue 20: what changed since the stores on disk were built (upgrade.py); set when the stores open
        self.upgrades = Upgrades(UpgradePlan(), rebuild_from_available)
        self._rebuild_from_available = rebuild_from_available
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._write_app_json(State.CREATED)

    # -- state ----------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._fsm.state

    def set_state_listener(self, listener: Callable[[State, State], None] | None) -> None:
        """``listener(new, old)`` on every transition, called outside the app's locks."""
        self._fsm.set_listener(listener)

    def set_uncaught_exception_handler(self, handler: UncaughtHandler) -> None:
        """Only in CREATED (as Kafka); the default response is SHUTDOWN_CLIENT."""
        if self.state is not State.CREATED:
            raise IllegalStateException("Can only set UncaughtExceptionHandler before calling start(). "
                                        f"Current state is: {self.state}")
        if not callable(handler):
            raise TypeError("the uncaught exception handler must be callable")
        self._handler = handler

    def _state_changed(self, new: State, old: State) -> None:
        self._state_since = time.time()
        self._write_app_json(new)

    def _write_app_json(self, state: State) -> None:
        hosted, standby = self._hosting
        data = {
            "application_id": self.application_id,
            "state": state.value,
            "state_since": self._state_since,
            "pid": os.getpid(),
            "updated_at": time.time(),
            "hosted": {n: sorted(ps) for n, ps in hosted.items()},
            "standby": {n: sorted(ps) for n, ps in standby.items()},
            "source": layout.source_location(getattr(self.topology, "log", None)),
            "stores": {n: s.to_json() for n, s in self.health.snapshot().items()},
        }
        with self._json_lock:
            try:
                layout.write_json_atomic(layout.app_json_path(self.state_dir), data)
            except OSError as exc:  # a full or read-only disk must not break the state machine
                log.warning("stream-client %s: cannot write %s: %s", self.application_id,
                            layout.app_json_path(self.state_dir), exc)

    def status(self) -> dict[str, Any]:
        """Health beside the KIP-696 state: ``{"state", "health": {status, reason, since, retry_s}, "stores"}``."""
        stores = self.health.snapshot()
        state = self.state
        out = {"state": state.value, "health": overall(state, stores, self._state_since), "stores": stores}
        if self._fatal is not None:  # why it stopped: every serving process says it (issue 52)
            out["fatal"] = self._why().strip()
        return out

    def applied_batches(self) -> int:
        """Batches this app's stores have applied so far (``wait_applied``'s ``seen``: read it before a read)."""
        return self.health.applied_batches()

    def wait_applied(self, seen: int, timeout_s: float) -> int:
        """Block until a batch beyond ``seen`` is applied here, or ``timeout_s``; the count then.

        For statements waiting for a Position bound in this process: woken by the commit, not by their next
        poll (health.py). A store written without the runtime (a test writing directly) does not wake it: the
        waiter's own timeout still polls.
        """
        return self.health.wait_applied(seen, timeout_s)

    def source_end_offsets(self, topics: Iterable[str]) -> Position | None:
        """The last offset per partition of the source topics (None without a source log, e.g. hand-written stores).

        The gateway asks before it waits for a position bound: a bound beyond the end cannot be reached.
        """
        src = getattr(self.topology, "log", None)
        return layout.source_end_offsets(src, topics) if src is not None else None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        """CREATED -> REBALANCING, open the stores, start the runtime (or go RUNNING without one)."""
        with self._start_lock:  # only from CREATED: Kafka's start() from RUNNING would silently "rebalance"
            try:
                moved = self.state is State.CREATED and self._fsm.transition(State.REBALANCING)
            except IllegalStateException:
                moved = False
        if not moved:
            raise IllegalStateException("The client is either already started or already stopped, cannot re-start")
        try:
            self._open_stores()
            layout.publish_streams(self.state_dir, self._streams.values())
            self._runtime = self.topology.create_runtime(self)
        except BaseException:
            log.exception("stream-client %s: failed to open its stores", self.application_id)
            self._close_to_error()
            raise
        self._coordinator.watch(lambda: self.state.is_running_or_rebalancing(), self._close_to_error)
        if self._runtime is None:
            self.mark_running()
        else:
            try:
                self._runtime.start()
            except BaseException as exc:  # noqa: BLE001 - a runtime that cannot start is an uncaught failure
                self.handle_uncaught(exc, "<start>")

    def _open_stores(self) -> None:
        """Open every store's current generation; damaged or missing partition files become lost partitions."""
        definitions = getattr(self.topology, "store_definitions", None)
        plan = plan_upgrade(self.state_dir, self._specs, definitions() if definitions is not None else None)
        self.upgrades = Upgrades(plan, self._rebuild_from_available)
        for change in plan.changes:  # a new store is news only beside existing ones (not on a first start)
            quiet = (change.action == "unchanged" and not change.rebuilt_with) or (change.action == "new" and
                                                     all(c.action == "new" for c in plan.changes))
            log.log(logging.INFO if quiet else logging.WARNING,
                    "stream-client %s: upgrade: %s", self.application_id, change.line())
        with self._lock:
            for name, spec in list(self._specs.items()):
                spec = self._specs[name] = self.upgrades.serving_spec(name, spec)  # the old one until the swap
                files = StoreFiles(self.state_dir, spec, self._synchronous)
                files.open(self.upgrades.open_extras(name))
                self._files[name] = files
                self._stores[name] = files.parts
                if files.lost:
                    self.health.set(name, "rebuilding", self.rebuild_needed(name))
            self._views = {}
        for change in plan.of("removed"):
            mark_removed(self.state_dir, change.store)

    def _close_stores(self) -> None:
        with self._lock:
            for name, files in self._files.items():
                self._generation[name] += 1
                files.close()
            self._files = {}
            self._stores = {}
            self._writers = {}
            self._views = {}

    def close(self, timeout_s: float | None = None) -> bool:
        """Shut down; True once NOT_RUNNING (or already ERROR), False if ``timeout_s`` passed first.

        Called from a state listener it starts the shutdown but does not wait (it would wait for itself).
        """
        if timeout_s is not None and timeout_s < 0:
            raise ValueError("Timeout can't be negative.")
        state = self.state
        if self._fsm.in_listener():
            timeout_s = 0.0  # a listener waiting for a later state would wait for itself
        if state in (State.ERROR, State.PENDING_ERROR):
            log.warning("stream-client %s: close() in %s is a no-op: the client is (going to) ERROR",
                        self.application_id, state)
            return self._fsm.wait_for({State.ERROR}, timeout_s)
        if state is State.NOT_RUNNING:
            return True
        try:
            moved = self._fsm.transition(State.PENDING_SHUTDOWN)
        except IllegalStateException:
            moved = False
        if moved:
            threading.Thread(target=self._shutdown, args=(State.NOT_RUNNING,),
                             name=f"iqgate-{self.application_id}-close", daemon=True).start()
        return self._fsm.wait_for({State.NOT_RUNNING, State.ERROR}, timeout_s)

    def _close_to_error(self) -> None:
        try:
            moved = self._fsm.transition(State.PENDING_ERROR)
        except IllegalStateException:
            log.warning("stream-client %s: cannot go to ERROR from %s", self.application_id, self.state)
            return
        if moved:
            threading.Thread(target=self._shutdown, args=(State.ERROR,),
                             name=f"iqgate-{self.application_id}-error", daemon=True).start()

    def _shutdown(self, final: State) -> None:
        self._coordinator.stop()
        runtime = self._runtime
        if runtime is not None:
            try:
                runtime.stop(30.0)
            except Exception:  # noqa: BLE001 - shutting down regardless
                log.exception("stream-client %s: runtime failed to stop", self.application_id)
        self._close_stores()
        self._fsm.transition(final)

    # -- AppDriver (what the runtime calls) ----------------------------------------------
    def mark_rebalancing(self) -> None:
        if self.state is State.RUNNING:
            self._fsm.transition(State.REBALANCING)

    def mark_running(self) -> None:
        """REBALANCING -> RUNNING; the runtime calls it once every store caught up, so none is still starting."""
        if self.state is State.REBALANCING:
            for name, st in self.health.snapshot().items():
                if st.status == "starting":
                    self.health.set(name, "running")
            self._fsm.transition(State.RUNNING)

    def handle_uncaught(self, exc: BaseException, unit: str) -> StreamThreadExceptionResponse:
        """Ask the handler (default SHUTDOWN_CLIENT) and carry out its response."""
        response = StreamThreadExceptionResponse.SHUTDOWN_CLIENT
        if self._handler is not None:
            try:
                got = self._handler(exc)
                if isinstance(got, StreamThreadExceptionResponse):
                    response = got
                else:
                    log.error("uncaught exception handler returned %r, not a StreamThreadExceptionResponse;"
                              " shutting the client down", got)
            except Exception:  # noqa: BLE001
                log.exception("uncaught exception handler failed; shutting the client down")
        log.error("stream-client %s: unit %s failed (%s: %s); response %s", self.application_id, unit,
                  type(exc).__name__, exc, response.name)
        if response is StreamThreadExceptionResponse.REPLACE_THREAD:
            if self.state.is_running_or_rebalancing():
                self.mark_rebalancing()
                if self._runtime is not None:
                    try:
                        self._runtime.replace(unit)
                    except Exception:  # noqa: BLE001
                        log.exception("stream-client %s: replacing unit %s failed", self.application_id, unit)
                        self._close_to_error()
        elif response is StreamThreadExceptionResponse.SHUTDOWN_CLIENT:
            self._fatal = self._fatal or exc
            self._close_to_error()
        else:
            self._fatal = self._fatal or exc
            self._request_application_shutdown()
        return response

    def handle_store_failure(self, exc: BaseException, unit: str) -> None:
        """A store's query failed for a reason retrying cannot fix (not a fault, not a lost source).

        With a handler set by the user, KIP-671 applies: the handler decides.
        Without one, the store fails alone (docs/DESIGN.md §8): it keeps answering at
        its last Position, health says why, and every other store goes on.
        """
        if self._handler is not None:
            self.handle_uncaught(exc, unit)
            return
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.error("stream-client %s: store %s failed and stops advancing (%s: %s); the other stores go on",
                  self.application_id, unit, type(exc).__name__, text)
        if unit in self._specs:
            self.health.set(unit, "failed", f"{type(exc).__name__}: {text}")

    def _why(self) -> str:
        """`` It stopped because …`` when an uncaught exception stopped it (KIP-662's reason reaches the user)."""
        exc = self._fatal
        if exc is None:
            return ""
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f" It stopped because of {type(exc).__name__}: {text}"

    def _request_application_shutdown(self) -> None:
        """SHUTDOWN_APPLICATION: every instance with this application_id, in this process and others."""
        self._coordinator.request()
        for app in self._coordinator.peers():
            app._close_to_error()

    # -- stores ----------------------------------------------------------------------------
    def catalog(self) -> Catalog:
        """The stores, with the streams the topology declared queryable beside them (``Catalog.streams``)."""
        return Catalog(self._specs, self._streams)

    def stream_reader(self, name: str) -> StreamReader:
        """A reader of the stream ``name``'s records from the topology's log (``stores.log.stream_reader``)."""
        return reader_of(self._streams, name, getattr(self.topology, "log", None), "the topology names no source log")

    def spec(self, name: str) -> StoreSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownStateStoreException(
                f"Cannot get state store {name} because no such store is registered in the topology."
            )
        return spec

    def writer(self, store_name: str, generation: int | None = None) -> PartitionedWriter:
        """The StoreWriter of one store (of the generation being rebuilt, if named); while REBALANCING or RUNNING."""
        spec = self.spec(store_name)
        with self._lock:
            w = self._writers.get((store_name, generation))
            if w is None:
                files = self._files.get(store_name)
                if files is None:
                    raise IllegalStateException(
                        f"store {store_name!r} is not open: the app is {self.state}; writers need start() first"
                    )
                if generation is not None and generation != files.generation:
                    if generation != files.next_generation or files.next_spec is None:
                        raise IllegalStateException(f"store {store_name!r} has no generation {generation} being built")
                    spec, stores = files.next_spec, files.next_parts
                else:
                    stores = files.parts
                w = PartitionedWriter(spec, stores, lambda: self._check_writable(store_name))
                self._writers[(store_name, generation)] = w
            return w

    @property
    def synchronous(self) -> str:
        """SQLite's ``synchronous`` for the stores: FULL (every commit synced, the default), NORMAL or EXTRA."""
        return self._synchronous

    def _check_writable(self, name: str) -> None:
        """Writes are refused once the stores are (being) closed; a batch in flight while the runtime is being
        stopped (PENDING_SHUTDOWN/PENDING_ERROR) still commits whole: the stores close only after it."""
        if self.state in (State.CREATED, State.NOT_RUNNING, State.ERROR):
            raise IllegalStateException(f"cannot write to store {name!r}: the app is {self.state}")

    def positions(self) -> dict[str, Position]:
        """Per store, the position merged over its local (hosted and standby) partitions."""
        hosted, standby = self._hosting
        out = {}
        with self._lock:
            for name, parts in self._stores.items():
                pos = Position.empty()
                for p in sorted(hosted[name] | standby[name]):
                    if p in parts:  # a lost partition (being restored) has no position
                        pos = pos.merge(parts[p].current_position())
                out[name] = pos
        return out

    def kept_positions(self, store: str) -> dict[int, list[Position]]:
        """Per local partition of ``store``: its current Position, then each earlier one it can be read as of
        (``StateQueryRequest.with_snapshot``), newest first."""
        self.spec(store)
        return {p: s.kept_positions() for p, s in self._local_view(store)[0].items()}

    def partition_store(self, name: str, partition: int) -> PartitionStore:
        """The open store of one partition (fixtures write straight into it with ``apply_batch``)."""
        self.spec(name)
        with self._lock:
            parts = self._stores.get(name)
            if parts is None:
                raise IllegalStateException(f"store {name!r} is not open (state {self.state})")
            if partition not in parts:
                raise InvalidStateStorePartitionException(
                    f"The specified partition {partition} for store {name} does not exist."
                )
            return parts[partition]

    def partition_roles(self) -> dict[str, dict[int, str]]:
        """Per store partition this instance has: ``active`` (hosted, while running or rebalancing), ``standby``,
        or ``copy`` (hosted by a client that is not running)."""
        hosted, standby = self._hosting
        live = self.state in (State.RUNNING, State.REBALANCING)
        out: dict[str, dict[int, str]] = {}
        for name in self._specs:
            roles = {p: ("active" if live else "copy") for p in hosted.get(name, ())}
            roles.update({p: "standby" for p in standby.get(name, ())})
            out[name] = roles
        return out

    def hosting(self) -> tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]:
        """(hosted, standby) partitions per store."""
        hosted, standby = self._hosting
        return dict(hosted), dict(standby)

    def reassign_partitions(
        self, hosted: Mapping[str, Iterable[int]] | None = None, standby: Mapping[str, Iterable[int]] | None = None
    ) -> None:
        """Move partitions in or out of this instance: a rebalance; handles of changed stores go stale."""
        if not self.state.is_running_or_rebalancing():
            raise IllegalStateException(f"cannot reassign partitions in state {self.state}")
        old_h, old_s = self._hosting
        h, s = reassigned(self._specs, self._hosting, hosted, standby)
        was_running = self.state is State.RUNNING
        self.mark_rebalancing()
        with self._lock:
            for n in self._specs:
                if h[n] != old_h[n] or s[n] != old_s[n]:
                    self._generation[n] += 1
            self._hosting = (h, s)
            self._views = {}
        self._write_app_json(self.state)
        if was_running:
            self.mark_running()

    def reset_store(self, name: str) -> None:
        """Empty every partition of a store (data, position, last batch id), e.g. to rebuild it from the log.

        Each partition resets in one transaction; existing handles go stale.
        """
        self.spec(name)
        with self._lock:
            parts = self._stores.get(name)
            if parts is None:
                raise IllegalStateException(f"store {name!r} is not open (state {self.state})")
            for s in parts.values():
                s.reset()
            self._generation[name] += 1

    def reopen_store(self, name: str) -> None:
        """Close and reopen a store's files (as a task migration would); existing handles go stale."""
        spec = self.spec(name)
        with self._lock:
            parts = self._stores.get(name)
            if parts is None:
                raise IllegalStateException(f"store {name!r} is not open (state {self.state})")
            for s in parts.values():
                s.close()
            self._generation[name] += 1
            gen = self.current_generation(name)
            parts.clear()  # the StoreFiles shares this dict
            parts.update({
                p: open_partition(spec, p, layout.partition_path(self.state_dir, name, p, gen),
                                  synchronous=self._synchronous)
                for p in range(spec.partitions)
            })
            for key in [k for k in self._writers if k[0] == name]:
                del self._writers[key]
            self._views.pop(name, None)

    # -- IQv2 --------------------------------------------------------------------------------
    def query(self, request: StateQueryRequest) -> StateQueryResult:
        """IQv2 ``KafkaStreams.query``: unknown store, then not started, then stopped; else per-partition results."""
        spec = self.spec(request.store_name)
        state = self._queryable_state()
        local, act = self._local_view(spec.name)
        result = run_request(request, spec, local, act, state is State.RUNNING, state.value)
        files = self._files.get(spec.name)
        if files is not None and files.lost:
            result = restoring(result, spec.name, files.lost, request.partitions)
        return annotate_bound_failures(result, self.health.get(spec.name).note())

    def point_read(self, store: str, partition: int, key: Any, bound: PositionBound) -> PointRead | None:
        """One KeyQuery on one partition as ``KeyValueStore.point_read`` answers it, or None where ``query()``
        must answer (not a local partition, a lost file being restored, anything the store leaves to it).

        Raises what ``query()`` raises for the store name and the client state. Why beside ``query()``: the
        gateway's point lookups (issue 14); the same partition stores answer, in the same states.
        """
        self.spec(store)
        self._queryable_state()
        part = self._local_view(store)[0].get(partition)
        files = self._files.get(store)
        if part is None or (files is not None and files.lost):
            return None
        read = getattr(part, "point_read", None)
        return None if read is None else read(key, bound)

    def _queryable_state(self) -> State:
        """The state, if queries may run in it: KIP-216's exceptions for a client not started or stopped."""
        state = self.state
        if state is State.CREATED:
            raise StreamsNotStartedException(
                "KafkaStreams has not been started, you can retry after calling start()."
            )
        if state in _STOPPED:
            raise StreamsStoppedException(
                f"KafkaStreams has been stopped ({state}). This instance can no longer serve queries.{self._why()}"
            )
        return state

    def _local_view(self, name: str) -> tuple[dict[int, PartitionStore], frozenset[int]]:
        """(hosted and standby open partition stores, active partitions), cached until stores or hosting change."""
        view = self._views.get(name)
        if view is None:
            with self._lock:
                hosted, standby = self._hosting
                stores = self._stores.get(name, {})
                view = ({p: stores[p] for p in sorted(hosted[name] | standby[name]) if p in stores}, hosted[name])
                if stores:
                    self._views[name] = view
        return view

    # -- IQv1 handles ---------------------------------------------------------------------
    def store(self, name: str, store_type: Any, partition: int | None = None) -> Any:
        """A read-only view (key-value, window or session) of a store, as ``KafkaStreams.store``."""
        return open_handle(self, name, store_type, partition)

    def _current(self, name: str) -> tuple[int, frozenset[int], dict[int, PartitionStore]]:
        """(generation, hosted partitions, open partition stores) of a store, for handles."""
        with self._lock:
            return self._generation[name], self._hosting[0][name], self._stores.get(name, {})

    def __enter__(self) -> StreamsApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StreamsApp({self.application_id!r}, state={self.state}, state_dir={str(self.state_dir)!r})"
