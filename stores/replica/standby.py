"""Replica: restore store partitions from changelog topics into a state dir, keep tailing, report lag.

One thread per store reads its changelog partitions (``Tail``) and applies
every record with ``PartitionStore.apply_rows``: one SQLite transaction per
record holding the rows, the Position and the batch id, so a reader of the
replica's files sees a whole batch or none, with the Position that batch
left on the active. Records for a batch already applied are skipped (a
restart re-reads from the offsets saved in ``replica.json``, which may be a
little behind the stores).

``app.json`` says the replica hosts every partition as a *standby*: IQv2
``require_active`` answers NOT_ACTIVE from it, anything else is answered at
the replica's Position (bounded by the statement's Position bound, like any
store).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..app import layout
from ..catalog.schema import StoreSpec
from ..changelog.record import ChangelogFormatError
from ..changelog.topics import ChangelogLog, Item, Tail, changelog_topic, store_of_topic
from ..engine import PartitionStore, open_partition
from ..iqv2.position import Position
from ..iqv2.state import State
from ..iqv2.timeutil import now_ms

__all__ = ["Replica", "ReplicaError", "PartitionLag", "REPLICA_JSON"]

log = logging.getLogger(__name__)

REPLICA_JSON = "replica.json"
DISCOVER_EVERY_S = 1.0
SAVE_EVERY_S = 1.0
POLL_S = 0.1


class ReplicaError(Exception):
    """The replica cannot restore a store (a changed definition, a damaged record); the message says which."""


@dataclass(frozen=True)
class PartitionLag:
    """KIP-535 ``LagInfo`` of one store partition on this replica, plus its Position."""

    store: str
    partition: int
    current_offset: int          # the changelog offset of the last record applied (-1: none)
    end_offset: int              # the changelog's end offset (exclusive)
    time_lag_ms: int             # 0 when caught up; else how long the partition has been behind
    position: Position
    role: str = "standby"
    read_to: int | None = None   # the next changelog offset to read (Kafka's transaction markers take offsets)

    @property
    def offset_lag(self) -> int:
        nxt = self.current_offset + 1 if self.read_to is None else max(self.read_to, self.current_offset + 1)
        return max(0, self.end_offset - nxt)

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "partition": self.partition, "role": self.role,
                "current_offset": self.current_offset, "end_offset": self.end_offset,
                "offset_lag": self.offset_lag, "time_lag_ms": self.time_lag_ms,
                "position": self.position.to_json_map()}


class _StoreTail:
    """One store's restoration: its partitions, the tail on its changelog, per-partition progress."""

    def __init__(self, spec: StoreSpec, parts: dict[int, PartitionStore], tail: Tail, starts: dict[int, int]) -> None:
        self.spec = spec
        self.parts = parts
        self.tail = tail
        self.applied_offset = {p: starts.get(p, 0) - 1 for p in parts}
        self.applied_ts: dict[int, int | None] = {p: None for p in parts}
        self.ends: dict[int, int] = dict(starts)
        self.read_to: dict[int, int] = dict(starts)
        self.behind_since: dict[int, int | None] = {p: None for p in parts}
        self.error: str | None = None
        self.polled = False  # lags mean something only once the log was asked where each partition ends


class Replica:
    """Standby copies of an application's stores, restored from ``changelog`` into ``state_dir``.

    ``stores``: names to host (None: every store with a changelog); ``partitions``: per store the
    partitions to host (missing: all).
    """

    def __init__(self, changelog: ChangelogLog, application_id: str, state_dir: str | os.PathLike[str], *,
                 stores: Iterable[str] | None = None, partitions: Mapping[str, Iterable[int]] | None = None,
                 source: Mapping[str, str] | None = None) -> None:
        if not isinstance(application_id, str) or not application_id.strip():
            raise ValueError(f"application_id must be a non-empty string, got {application_id!r}")
        self.changelog = changelog
        self.application_id = application_id
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.wanted = None if stores is None else set(stores)
        self.partitions = {n: frozenset(ps) for n, ps in (partitions or {}).items()}
        self.source = dict(source) if source else None
        self._tails: dict[str, _StoreTail] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._discoverer: threading.Thread | None = None
        self._since = time.time()
        self.errors: dict[str, str] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> Replica:
        self._write_app_json()
        self.discover()
        self._discoverer = threading.Thread(target=self._discover_loop, name="iqgate-replica-discover", daemon=True)
        self._discoverer.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        for t in [*self._threads, *([self._discoverer] if self._discoverer else [])]:
            t.join(timeout_s)
        with self._lock:
            for st in self._tails.values():
                self._save(st)
                st.tail.close()
                for s in st.parts.values():
                    s.close()
            self._tails.clear()
        self._write_app_json(State.NOT_RUNNING)

    def __enter__(self) -> Replica:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- discovery ---------------------------------------------------------------------------------
    def _discover_loop(self) -> None:
        while not self._stop.wait(DISCOVER_EVERY_S):
            try:
                self.discover()
            except Exception as exc:  # noqa: BLE001 - the log may be away for a while: keep serving, retry
                log.warning("replica %s: cannot list changelogs in %s: %s", self.application_id,
                            self.changelog.describe(), exc)

    def discover(self) -> list[str]:
        """Start restoring every (wanted) store whose changelog exists and holds a record; the names started."""
        started = []
        for topic, n in sorted(self.changelog.list_topics().items()):
            name = store_of_topic(self.application_id, topic)
            if name is None or name in self._tails or name in self.errors:
                continue
            if self.wanted is not None and name not in self.wanted:
                continue
            spec = self._spec_from_log(topic, n)
            if spec is None:
                continue
            try:
                self._open(spec)
            except ReplicaError as exc:
                self.errors[name] = str(exc)
                log.error("replica %s: %s", self.application_id, exc)
                continue
            started.append(name)
        if started:
            self._write_app_json()
        return started

    def _spec_from_log(self, topic: str, n: int) -> StoreSpec | None:
        for p in range(n):
            item = self.changelog.last(topic, p)
            if item is not None:
                return item.record.spec
        return None

    def _open(self, spec: StoreSpec) -> None:
        name = spec.name
        hosted = sorted(self.partitions.get(name, frozenset(range(spec.partitions))))
        bad = [p for p in hosted if not 0 <= p < spec.partitions]
        if bad:
            raise ReplicaError(f"store {name!r} has partitions 0..{spec.partitions - 1}; cannot host {bad}")
        spec_file = layout.spec_path(self.state_dir, name)
        if spec_file.exists():
            have, _gen, _ = layout.read_store(self.state_dir, name)
            if have.to_json() != spec.to_json():
                raise ReplicaError(f"store {name!r}: the changelog's definition differs from the one restored in "
                                   f"{self.state_dir}; remove {layout.store_dir(self.state_dir, name)} to restore it anew")
        parts = {p: open_partition(spec, p, layout.partition_path(self.state_dir, name, p), synchronous="NORMAL")
                 for p in hosted}
        layout.write_store(self.state_dir, name, spec)
        saved = self._load_offsets(name)
        starts = {p: saved.get(p, 0) for p in hosted}
        tail = self.changelog.tail(changelog_topic(self.application_id, name), starts)
        st = _StoreTail(spec, parts, tail, starts)
        with self._lock:
            self._tails[name] = st
        t = threading.Thread(target=self._run, args=(st,), name=f"iqgate-replica-{name}", daemon=True)
        self._threads.append(t)
        t.start()
        log.info("replica %s: restoring store %s partitions %s from %s", self.application_id, name, hosted,
                 self.changelog.describe())

    # -- applying --------------------------------------------------------------------------------------
    def _run(self, st: _StoreTail) -> None:
        last_save = time.monotonic()
        backoff = 0.5
        while not self._stop.is_set():
            try:
                items = st.tail.poll(POLL_S)
                self._apply(st, items)
                st.error = None
                backoff = 0.5
            except ChangelogFormatError as exc:
                st.error = str(exc)
                self.errors[st.spec.name] = str(exc)
                log.error("replica %s: store %s stopped restoring: %s", self.application_id, st.spec.name, exc)
                return
            except Exception as exc:  # noqa: BLE001 - the log away: keep serving what we have, retry
                st.error = f"{type(exc).__name__}: {exc}"
                log.warning("replica %s: store %s: %s (retrying in %.1f s)", self.application_id, st.spec.name,
                            st.error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            if time.monotonic() - last_save >= SAVE_EVERY_S:
                self._save(st)
                last_save = time.monotonic()

    def _apply(self, st: _StoreTail, items: list[Item]) -> None:
        for item in items:
            p = item.partition
            store = st.parts.get(p)
            if store is None:
                continue
            rec = item.record
            if rec.spec.to_json() != st.spec.to_json():
                raise ChangelogFormatError(
                    f"changelog of store {st.spec.name!r} partition {p} offset {item.offset}: the store's definition "
                    "changed; restart the replica with a fresh state dir for it")
            store.apply_rows(rec.batch_id, rec.rows, rec.position, rec.observed)
            st.applied_offset[p] = item.offset
            st.applied_ts[p] = item.timestamp
        ends, positions = st.tail.ends(), st.tail.positions()
        st.polled = True
        now = now_ms()
        for p in st.parts:
            st.read_to[p] = max(positions.get(p, 0), st.applied_offset[p] + 1)
            st.ends[p] = max(ends.get(p, 0), st.read_to[p])
            if st.ends[p] > st.read_to[p]:
                if st.behind_since[p] is None:
                    st.behind_since[p] = now
            else:
                st.behind_since[p] = None

    # -- what it has -------------------------------------------------------------------------------------
    def lags(self) -> list[PartitionLag]:
        """Per hosted store partition: changelog offsets, offset lag, time lag, Position (KIP-535)."""
        out = []
        now = now_ms()
        with self._lock:
            tails = list(self._tails.values())
        for st in tails:
            for p, store in sorted(st.parts.items()):
                try:
                    pos = store.current_position()
                except Exception:  # noqa: BLE001 - a closing store
                    pos = Position.empty()
                since = st.behind_since[p]
                out.append(PartitionLag(st.spec.name, p, st.applied_offset[p], st.ends.get(p, 0),
                                        0 if since is None else max(0, now - since), pos,
                                        read_to=st.read_to.get(p)))
        return out

    def caught_up(self) -> bool:
        """Every hosted partition has applied its changelog as far as it was seen to end."""
        with self._lock:
            if not self._tails or not all(st.polled for st in self._tails.values()):
                return False
        return all(lag.offset_lag == 0 for lag in self.lags())

    def catalog(self) -> dict[str, StoreSpec]:
        with self._lock:
            return {n: st.spec for n, st in self._tails.items()}

    # -- files -----------------------------------------------------------------------------------------------
    def _offsets_path(self, name: str) -> Path:
        return layout.store_dir(self.state_dir, name) / REPLICA_JSON

    def _load_offsets(self, name: str) -> dict[int, int]:
        try:
            raw = json.loads(self._offsets_path(name).read_text(encoding="utf-8"))
            return {int(p): int(o) for p, o in raw.get("next_offsets", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    def _save(self, st: _StoreTail) -> None:
        data = {"changelog": changelog_topic(self.application_id, st.spec.name),
                "next_offsets": {str(p): max(o + 1, st.read_to.get(p, 0)) for p, o in st.applied_offset.items()}}
        try:
            layout.write_json_atomic(self._offsets_path(st.spec.name), data)
        except OSError as exc:
            log.warning("replica %s: cannot save changelog offsets of %s: %s", self.application_id, st.spec.name, exc)

    def _write_app_json(self, state: State = State.RUNNING) -> None:
        with self._lock:
            standby = {n: sorted(st.parts) for n, st in self._tails.items()}
        data = {"application_id": self.application_id, "state": state.value, "state_since": self._since,
                "pid": os.getpid(), "updated_at": time.time(), "hosted": {}, "standby": standby,
                "role": "replica", "source": self.source, "stores": {}}
        layout.write_json_atomic(layout.app_json_path(self.state_dir), data)
