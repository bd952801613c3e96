"""StateDirReader: serve IQv2 queries from another process's store files, read-only.

Gateway worker processes use it while the pipeline process writes: SQLite
WAL gives each read a snapshot, so the data and Position in a result always
agree. Connections open lazily, one per thread and partition.

What the files cannot tell is decided as follows (documented choices):

- ``state`` comes from ``app.json``; if that file is missing, or names a
  process that is no longer alive while claiming a live state, the state is
  NOT_RUNNING.
- Queries are answered from the files in every writer state: the files are
  a durable, read-only replica, so a gateway keeps serving after the
  pipeline stopped. A partition whose file does not exist is NOT_PRESENT.
- ``require_active`` succeeds only for partitions the writer hosts as active
  while it is alive and RUNNING; otherwise NOT_ACTIVE.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..catalog.streams import Catalog
from ..engine import PartitionStore, open_partition
from ..engine.base import EXISTS_CHECK_S
from ..engine.kv import PointRead
from ..iqv2.errors import UnknownStateStoreException
from ..iqv2.position import Position, PositionBound
from ..iqv2.request import StateQueryRequest
from ..iqv2.result import StateQueryResult
from ..iqv2.state import State
from ..log.stream_reader import StreamReader
from . import layout
from .dispatch import run_request
from .health import StoreStatus, annotate_bound_failures, overall
from .queryable_streams import PublishedStreams, reader_of

__all__ = ["StateDirReader", "AppInfo"]


class AppInfo:
    """What ``app.json`` says about the writing app."""

    __slots__ = ("state", "claimed", "pid", "alive", "hosted", "standby", "application_id", "source", "stores",
                 "since")

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        raw = raw or {}
        self.application_id = raw.get("application_id")
        self.pid = raw.get("pid")
        try:
            self.claimed = State(raw.get("state", State.NOT_RUNNING.value))
        except ValueError:
            self.claimed = State.NOT_RUNNING
        self.refresh()
        self.hosted = {n: frozenset(ps) for n, ps in (raw.get("hosted") or {}).items()}
        self.standby = {n: frozenset(ps) for n, ps in (raw.get("standby") or {}).items()}
        self.source = raw.get("source") if isinstance(raw.get("source"), dict) else None
        self.since = raw.get("state_since") if isinstance(raw.get("state_since"), (int, float)) else None
        stores = raw.get("stores") if isinstance(raw.get("stores"), dict) else {}
        self.stores = {n: StoreStatus.from_json(v) for n, v in stores.items() if isinstance(v, dict)}

    def refresh(self) -> None:
        """Re-check that the writer lives: a killed writer leaves a stale live state in app.json."""
        self.alive = isinstance(self.pid, int) and _pid_alive(self.pid)
        claimed = self.claimed
        self.state = claimed if self.alive or claimed.has_completed_shutdown() else State.NOT_RUNNING


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StateDirReader:
    """A read-only Queryable over ``<state_dir>``; cheap to keep for a process's lifetime."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        if not self.state_dir.is_dir():
            what = "is not a directory" if self.state_dir.exists() else "does not exist"
            raise FileNotFoundError(f"state directory {self.state_dir} {what}")
        self._lock = threading.Lock()
        self._specs: dict[str, StoreSpec] = {}
        self._specs_mtime: int | None = None
        self._specs_checked = float("-inf")
        self._gens: dict[str, int] = {}
        self._history: dict[str, dict[str, Any]] = {}  # stores rebuilt from partial history (store.json)
        self._retired: list[PartitionStore] = []
        self._seen: dict[str, int | None] = {}
        self._stores: dict[tuple[str, int, int], PartitionStore] = {}  # (store, generation, partition)
        self._info: AppInfo = AppInfo(None)
        self._info_mtime: int | None = None
        self._source: tuple[Any, Any] | None = None
        self._streams = PublishedStreams(self.state_dir)
        self._catalog: tuple[Any, Any, Catalog] | None = None  # (specs, streams, the Catalog of both)

    # -- metadata -----------------------------------------------------------------------
    def _rescan(self, *, force: bool = False) -> None:
        """Re-read the store specs if the stores changed; at most every EXISTS_CHECK_S unless forced.

        The catalog is read on every statement; a store created or dropped by
        the writer shows up within 100 ms (an unknown name forces a rescan).
        """
        now = time.monotonic()
        if not force and now - self._specs_checked < EXISTS_CHECK_S:
            return
        d = layout.stores_dir(self.state_dir)
        try:
            mtime = d.stat().st_mtime_ns
        except FileNotFoundError:
            return
        seen = self._spec_mtimes()
        if mtime == self._specs_mtime and seen == self._seen:
            self._specs_checked = now
            return
        specs: dict[str, StoreSpec] = {}
        gens: dict[str, int] = {}
        history: dict[str, dict[str, Any]] = {}
        for sub in sorted(d.iterdir()):
            f = sub / "store.json"
            try:
                spec, gen, extras = layout.split_store_json(f.read_text(encoding="utf-8"))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{f}: not a valid store spec: {exc}") from None
            if extras.get("removed"):  # the pipeline dropped it (issue 20 item 5): files kept, no longer served
                continue
            specs[sub.name], gens[sub.name] = spec, gen
            if isinstance(extras.get("history"), dict):
                history[sub.name] = dict(extras["history"])
        with self._lock:
            for old in self._retired:  # retired by the previous scan: no statement still uses them
                old.close()
            self._retired = [s for k, s in self._stores.items() if gens.get(k[0]) != k[1]]
            for k in [k for k in self._stores if gens.get(k[0]) != k[1]]:
                del self._stores[k]
            self._specs = specs
            self._gens = gens
            self._history = history
            self._specs_mtime = mtime
            self._seen = self._spec_mtimes(specs)
            self._specs_checked = now  # only a scan that succeeded counts: a corrupt spec keeps failing

    def _spec_mtimes(self, names: Any = None) -> dict[str, int | None]:
        """Each known store's store.json mtime: a rewrite (a rebuilt generation swapped in) changes it."""
        out: dict[str, int | None] = {}
        for n in (self._specs if names is None else names):
            try:
                out[n] = layout.spec_path(self.state_dir, n).stat().st_mtime_ns
            except FileNotFoundError:
                out[n] = None
        return out

    def catalog(self) -> Catalog:
        """The stores, and beside them the streams the pipeline published (``queryable_streams``): one object
        while neither changed (asked on every statement: a lookup's copy of both cost ~2% of a serving loop)."""
        self._rescan()
        specs, streams = self._specs, self._streams.current()
        made = self._catalog
        if made is None or made[0] is not specs or made[1] is not streams:  # a rescan replaced one: a new one
            made = self._catalog = (specs, streams, Catalog(specs, streams))
        return made[2]

    def stream_reader(self, name: str) -> StreamReader:
        """A reader of stream ``name``'s records, from the source log ``app.json`` names."""
        streams = self._streams.current()
        if name not in streams:
            streams = self._streams.current(force=True)
        return reader_of(streams, name, self._source_log(),
                         "app.json names no source log (a Kafka source with client options is not written down)")

    def history(self, name: str) -> dict[str, Any] | None:
        """Like ``StreamsApp.history``: the partial-history marker ``store.json`` holds, if any."""
        self._rescan()
        return self._history.get(name)

    def upcoming_columns(self, name: str) -> dict[str, Any] | None:
        """Like ``StreamsApp.upcoming_columns``, from what the writer last published in ``app.json``."""
        info = self.app_info()
        status = info.stores.get(name) if info.alive else None
        progress = status.progress if status is not None and status.status == "rebuilding" else None
        columns = (progress or {}).get("upcoming_columns")
        spec = self.catalog().get(name)
        if not columns or spec is None:
            return None
        return {"columns": list(columns), "serving": [c.name for c in spec.columns()], "progress": progress}

    def _spec(self, name: str) -> StoreSpec:
        spec = self._specs.get(name)
        if spec is None:
            self._rescan(force=True)
            spec = self._specs.get(name)
            if spec is None:
                raise UnknownStateStoreException(
                    f"Cannot get state store {name} because no such store exists under {self.state_dir}."
                )
        return spec

    def app_info(self) -> AppInfo:
        path = layout.app_json_path(self.state_dir)
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            self._info, self._info_mtime = AppInfo(None), None
            return self._info
        if mtime != self._info_mtime:
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return self._info  # replaced between stat and read: keep the previous view
            self._info, self._info_mtime = AppInfo(raw), mtime
        else:
            self._info.refresh()
        return self._info

    @property
    def state(self) -> State:
        return self.app_info().state

    # -- stores ------------------------------------------------------------------------
    def _partition(self, spec: StoreSpec, p: int) -> PartitionStore | None:
        gen = self._gens.get(spec.name, 0)
        key = (spec.name, gen, p)
        store = self._stores.get(key)
        if store is not None:
            return store
        path = layout.partition_path(self.state_dir, spec.name, p, gen)
        if not path.exists():
            return None
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                try:
                    store = open_partition(spec, p, path, read_only=True)
                except FileNotFoundError:
                    return None
                self._stores[key] = store
        return store

    def partition_store(self, store: str, partition: int) -> PartitionStore | None:
        """The open read-only store of one partition of the generation ``store.json`` names (None: no such file).

        For readers that need more than IQv2 answers from the files: a live feed reads a partition's rows with
        its last batch id in one snapshot (``stores.live``).
        """
        spec = self._spec(store)
        return self._partition(spec, partition) if 0 <= partition < spec.partitions else None

    def generation(self, store: str) -> int:
        """The generation of ``store`` that answers (``store.json``'s; a replica's is its own local number)."""
        self._spec(store)
        return self._gens.get(store, 0)

    def point_read(self, store: str, partition: int, key: Any, bound: PositionBound) -> PointRead | None:
        """``StreamsApp.point_read`` over the files: a KeyQuery on one partition file, or None where ``query()``
        must answer (no such file, anything the partition store leaves to it)."""
        spec = self._spec(store)
        part = self._partition(spec, partition) if 0 <= partition < spec.partitions else None
        read = getattr(part, "point_read", None)
        return None if read is None else read(key, bound)

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        """The same per-partition dispatch as ``StreamsApp.query`` over the files (see module doc)."""
        spec = self._spec(request.store_name)
        wanted = range(spec.partitions) if request.partitions is None else request.partitions
        local = {}
        for p in wanted:
            if 0 <= p < spec.partitions:
                s = self._partition(spec, p)
                if s is not None:
                    local[p] = s
        if request.active_required:
            info = self.app_info()
            running = info.alive and info.state is State.RUNNING
            active = info.hosted.get(spec.name, frozenset())
            label = str(info.state)
        else:
            running, active, label = True, frozenset(local), "RUNNING"
        result = run_request(request, spec, local, active, running, label)
        info = self._info
        if info.alive and spec.name in info.stores:
            result = annotate_bound_failures(result, info.stores[spec.name].note())
        return result

    def kept_positions(self, store: str) -> dict[int, list[Position]]:
        """Per partition file of ``store``: its current Position, then each earlier one it can be read as of
        (``StateQueryRequest.with_snapshot``), newest first."""
        spec = self._spec(store)
        out = {}
        for p in range(spec.partitions):
            s = self._partition(spec, p)
            if s is not None:
                out[p] = s.kept_positions()
        return out

    def status(self) -> dict[str, Any]:
        """The writer's health as it wrote it to app.json (a stopped writer's stores are no longer ingesting)."""
        info = self.app_info()
        stores = info.stores if info.alive else {}
        return {"state": info.state.value, "health": overall(info.state, stores, info.since), "stores": stores}

    def partition_roles(self) -> dict[str, dict[int, str]]:
        """Per store partition: ``standby`` (app.json's standby copies), ``active`` (hosted by a writer that is
        alive and RUNNING or REBALANCING) or ``copy`` (files whose writer is gone or not hosting them)."""
        info = self.app_info()
        live = info.alive and info.state in (State.RUNNING, State.REBALANCING)
        out: dict[str, dict[int, str]] = {}
        for name, spec in self.catalog().items():
            standby, hosted = info.standby.get(name, ()), info.hosted.get(name, ())
            out[name] = {p: "standby" if p in standby else "active" if live and p in hosted else "copy"
                         for p in range(spec.partitions)}
        return out

    def source_end_offsets(self, topics: Iterable[str]) -> Position | None:
        """The source's last offsets, where app.json says where the source is (else None: the gateway just waits)."""
        src = self._source_log()
        return None if src is None else layout.source_end_offsets(src, topics)

    def _source_log(self) -> Any:
        """The source log app.json names (an EventLog or a KafkaSource), or None."""
        where = self.app_info().source
        if not where:
            return None
        key = tuple(sorted(where.items()))
        if self._source is None or self._source[0] != key:
            if "eventlog" in where:
                from ..log.eventlog import EventLog

                src: Any = EventLog(where["eventlog"])
            elif "kafka" in where:
                from ..log.kafka import KafkaSource

                src = KafkaSource(where["kafka"], timeout_s=2.0)
            else:
                return None
            self._source = (key, src)
        return self._source[1]

    def positions(self) -> dict[str, Position]:
        out = {}
        for name, spec in self.catalog().items():
            pos = Position.empty()
            for p in range(spec.partitions):
                s = self._partition(spec, p)
                if s is not None:
                    pos = pos.merge(s.current_position())
            out[name] = pos
        return out

    def close(self) -> None:
        with self._lock:
            for s in [*self._stores.values(), *self._retired]:
                s.close()
            self._stores.clear()
            self._retired = []

    def __enter__(self) -> StateDirReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
