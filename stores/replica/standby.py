"""Replica: restore store partitions from changelog topics into a state dir, keep tailing, report lag.

One thread per store reads its changelog partitions and applies every
record (``copy.StoreCopy``). A replica's answer carries the Position of the
last changelog record it applied.

Generations (a store rebuilt by the active into generation N, with a topic
of its own ``<app>-<store>.g<N>-changelog``): the replica follows the
highest generation topic of each store. While its copy follows a lower one
(or the same topic before it was created again), it restores the new topic
into a second local copy beside the one it answers from — which keeps
answering, and keeps tailing its own topic while that exists — and swaps
(one atomic rewrite of ``store.json``, like the active) once the new copy
has reached, on every hosted partition, the Position the current copy had
reached on any: the active's own rule, so a replica's answers never go back
in time. Then it stops reading the old topic and deletes the old copy.

``app.json`` says the replica hosts every partition as a *standby*: IQv2
``require_active`` answers NOT_ACTIVE from it, anything else is answered at
the replica's Position (bounded by the statement's Position bound, like any
store).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..app import layout
from ..catalog.schema import StoreSpec
from ..changelog.record import ChangelogFormatError
from ..changelog.topics import ChangelogLog, changelog_topic, generation_topics
from ..iqv2.state import State
from .copy import REPLICA_JSON, PartitionLag, Recreated, StoreCopy, load_meta, remove_generation, saved_offsets

__all__ = ["Replica", "ReplicaError", "PartitionLag", "REPLICA_JSON"]

log = logging.getLogger(__name__)

DISCOVER_EVERY_S = 1.0
SAVE_EVERY_S = 1.0
POLL_S = 0.1


class ReplicaError(Exception):
    """The replica cannot restore a store (a changed definition, a damaged record); the message says which."""


class _Store:
    """One store on the replica: the copy it answers from, the copy being restored beside it, what to follow."""

    def __init__(self, serving: StoreCopy) -> None:
        self.serving = serving
        self.building: StoreCopy | None = None
        self.want: tuple[str, str | None] | None = None  # (topic, id) to restore beside the serving copy
        self.serving_gone = False  # the serving copy's topic no longer exists (deleted after the active's swap)
        self.refused: tuple[str, str | None] | None = None  # a topic whose records this replica cannot apply
        self.swaps = 0
        self.retry_at = 0.0  # when to look again for a first record in the topic to follow


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
        self._stores: dict[str, _Store] = {}
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
            for st in self._stores.values():
                for c in (st.serving, st.building):
                    if c is not None:
                        c.save()
                        c.close()
            self._stores.clear()
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
        """Start restoring every (wanted) store whose changelog exists and holds a record, and point every store at
        its highest generation topic; the names started."""
        topics = self.changelog.list_topics()
        by_store = generation_topics(self.application_id, topics)
        started = []
        for name, gens in sorted(by_store.items()):
            if name in self.errors or (self.wanted is not None and name not in self.wanted):
                continue
            st = self._stores.get(name)
            if st is None:
                try:
                    if self._start_store(name, gens, topics):
                        started.append(name)
                except ReplicaError as exc:
                    self.errors[name] = str(exc)
                    log.error("replica %s: %s", self.application_id, exc)
                continue
            top = gens[max(gens)]
            want = (top, self.changelog.topic_id(top))
            st.serving_gone = st.serving.topic not in topics
            st.want = None if st.serving.follows(*want) else want
        for name, st in list(self._stores.items()):
            if name not in by_store:  # every changelog of the store is gone: keep answering what we have
                st.want = None
                st.serving_gone = True
        if started:
            self._write_app_json()
        return started

    def _last_spec(self, topic: str, n: int) -> StoreSpec | None:
        for p in range(n):
            item = self.changelog.last(topic, p)
            if item is not None:
                return item.record.spec
        return None

    def _hosted(self, spec: StoreSpec) -> list[int]:
        hosted = sorted(self.partitions.get(spec.name, frozenset(range(spec.partitions))))
        bad = [p for p in hosted if not 0 <= p < spec.partitions]
        if bad:
            raise ReplicaError(f"store {spec.name!r} has partitions 0..{spec.partitions - 1}; cannot host {bad}")
        return hosted

    def _start_store(self, name: str, gens: Mapping[int, str], topics: Mapping[str, int]) -> bool:
        """Open the store's copy: the one on disk (its topic as saved), else a fresh one; False if no record yet."""
        if layout.spec_path(self.state_dir, name).exists():
            have, gen, _ = layout.read_store(self.state_dir, name)
            meta = load_meta(self.state_dir, name, gen)
            topic = meta.get("changelog") or changelog_topic(self.application_id, name)
            topic_id = meta.get("topic_id")
            if topic in topics:
                now_id = self.changelog.topic_id(topic)
                spec = self._last_spec(topic, topics[topic])
                if spec is not None and spec.to_json() != have.to_json() and (
                        topic_id is None or now_id is None or topic_id == now_id):
                    raise ReplicaError(f"store {name!r}: the changelog's definition differs from the one restored in "
                                       f"{self.state_dir}; remove {layout.store_dir(self.state_dir, name)} to restore "
                                       "it anew")
            _remove_leftovers(self.state_dir, name, keep=(gen, gen + 1))  # a swap's old copy a stop left behind
            serving = StoreCopy(self.state_dir, have, gen, self._hosted(have), topic, topic_id, self.changelog,
                                saved_offsets(meta))
            st = _Store(serving)
            self._resume_building(st)
        else:
            # a fresh replica while the active rebuilds: answer from the generation the active answers from, and
            # restore the one being built beside it
            order = sorted(gens, reverse=True)
            choice = [order[1], order[0]] if len(order) > 1 else order
            for g in choice:
                spec = self._last_spec(gens[g], topics[gens[g]])
                if spec is not None:
                    break
            else:
                return False
            topic = gens[g]
            serving = StoreCopy(self.state_dir, spec, 0, self._hosted(spec), topic,
                                self.changelog.topic_id(topic), self.changelog)
            st = _Store(serving)
        layout.write_store(self.state_dir, name, st.serving.spec, st.serving.generation)
        top = gens[max(gens)]
        want = (top, self.changelog.topic_id(top))
        st.want = None if st.serving.follows(*want) else want
        st.serving_gone = st.serving.topic not in topics
        with self._lock:
            self._stores[name] = st
        t = threading.Thread(target=self._run, args=(st,), name=f"iqgate-replica-{name}", daemon=True)
        self._threads.append(t)
        t.start()
        log.info("replica %s: restoring store %s partitions %s from %s (%s)", self.application_id, name,
                 sorted(st.serving.parts), st.serving.topic, self.changelog.describe())
        return True

    def _resume_building(self, st: _Store) -> None:
        """A copy this replica was restoring beside its current one when it stopped (kept if still wanted)."""
        name, g = st.serving.name, st.serving.generation + 1
        meta = load_meta(self.state_dir, name, g)
        if not meta.get("changelog") or not isinstance(meta.get("spec"), dict):
            remove_generation(self.state_dir, name, g)
            return
        try:
            spec = StoreSpec.from_json(json.dumps(meta["spec"]))
            st.building = StoreCopy(self.state_dir, spec, g, self._hosted(spec), meta["changelog"],
                                    meta.get("topic_id"), self.changelog, saved_offsets(meta))
        except (ValueError, KeyError, TypeError, ReplicaError) as exc:
            log.warning("replica %s: store %s: cannot resume the copy in %s (%s); restoring it anew",
                        self.application_id, name, layout.generation_dir(self.state_dir, name, g), exc)
            remove_generation(self.state_dir, name, g)

    # -- following generations ------------------------------------------------------------------------
    def _follow(self, st: _Store) -> None:
        """Start, keep or drop the copy beside the serving one, as discovery last pointed the store."""
        want = st.want
        if want is not None and st.serving.follows(*want):
            want = None  # discovery looked before a swap: the copy answering already follows it
        b = st.building
        if b is not None and (want is None or not b.follows(*want)):
            log.warning("replica %s: store %s: dropping the copy restored from %s (the store now follows %s)",
                        self.application_id, b.name, b.topic, "its current copy" if want is None else want[0])
            st.building = None
            b.drop()
        if want is None or st.building is not None or want == st.refused or time.monotonic() < st.retry_at:
            return
        st.retry_at = time.monotonic() + DISCOVER_EVERY_S
        topic, topic_id = want
        try:
            n = self.changelog.list_topics().get(topic)
            spec = None if n is None else self._last_spec(topic, n)
        except Exception as exc:  # noqa: BLE001 - the log away: the next round tries again
            log.warning("replica %s: store %s: cannot read %s: %s", self.application_id, st.serving.name, topic, exc)
            return
        if spec is None:
            return  # no record yet: nothing to restore
        g = st.serving.generation + 1
        remove_generation(self.state_dir, st.serving.name, g)  # what an earlier, dropped attempt left
        try:
            st.building = StoreCopy(self.state_dir, spec, g, self._hosted(spec), topic, topic_id, self.changelog)
        except ReplicaError as exc:
            st.refused = want
            self.errors[st.serving.name] = str(exc)
            log.error("replica %s: %s", self.application_id, exc)
            return
        st.building.save()
        log.warning("replica %s: store %s: restoring %s beside the copy it answers from (%s); swapping when it has "
                    "reached that copy's Position", self.application_id, spec.name, topic, st.serving.topic)

    def _maybe_swap(self, st: _Store) -> None:
        """Answer from the new copy once every hosted partition of it reached the current copy's Position."""
        b = st.building
        if b is None or not b.polled or not b.reached(st.serving.max_position()):
            return
        b.save()
        old = st.serving
        with self._lock:
            layout.write_store(self.state_dir, b.name, b.spec, b.generation)  # the swap: one atomic rewrite
            st.serving, st.building, st.serving_gone, st.want = b, None, False, None
            st.swaps += 1
        old.retire()
        self._write_app_json()
        log.warning("replica %s: store %s now answers from its copy of %s (local generation %d; was %s)",
                    self.application_id, b.name, b.topic, b.generation, old.topic)

    # -- applying --------------------------------------------------------------------------------------
    def _run(self, st: _Store) -> None:
        last_save = time.monotonic()
        backoff = 0.5
        name = st.serving.name
        while not self._stop.is_set():
            self._follow(st)
            failed = False
            for copy in (st.serving, st.building):
                if copy is None:
                    continue
                if copy is st.serving and st.serving_gone and st.building is not None:
                    copy.stop_tail()  # its topic was deleted: answer at the Position it reached until the swap
                    continue
                try:
                    copy.poll(POLL_S if copy is st.serving else POLL_S / 2)
                    copy.error = None
                except Recreated as exc:
                    self._recreated(st, copy, exc)
                except ChangelogFormatError as exc:
                    copy.error = str(exc)
                    self.errors[name] = str(exc)
                    if copy is st.building:
                        st.refused, st.building = st.want, None
                        log.error("replica %s: store %s: cannot restore %s: %s", self.application_id, name,
                                  copy.topic, exc)
                        copy.drop()
                        continue
                    log.error("replica %s: store %s stopped restoring: %s", self.application_id, name, exc)
                    return
                except Exception as exc:  # noqa: BLE001 - the log away: keep serving what we have, retry
                    copy.error = f"{type(exc).__name__}: {exc}"
                    failed = True
                    log.warning("replica %s: store %s (%s): %s (retrying in %.1f s)", self.application_id, name,
                                copy.topic, copy.error, backoff)
            self._maybe_swap(st)
            if failed:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            else:
                backoff = 0.5
            if time.monotonic() - last_save >= SAVE_EVERY_S:
                for copy in (st.serving, st.building):
                    if copy is not None:
                        copy.save()
                last_save = time.monotonic()

    def _recreated(self, st: _Store, copy: StoreCopy, exc: Recreated) -> None:
        """A topic deleted and created again under a copy: never apply its records on top of the earlier ones."""
        if copy is st.building:
            log.warning("replica %s: %s; restoring it anew", self.application_id, exc)
            st.building = None
            copy.drop()
        else:  # the active began this generation anew after we swapped to it: discovery points the store at the
            # new topic (another id), restored beside this copy, which answers at the Position it reached meanwhile
            log.warning("replica %s: %s; restoring the new topic beside this copy", self.application_id, exc)
            copy.stop_tail()

    # -- what it has -------------------------------------------------------------------------------------
    def lags(self) -> list[PartitionLag]:
        """Per hosted store partition of the copies answering: changelog offsets, offset and time lag (KIP-535), and
        the Position of the answers."""
        with self._lock:
            stores = list(self._stores.values())
        out = []
        for st in stores:
            lags = st.serving.lags()
            b = st.building
            if st.serving_gone and b is not None and b.polled:
                # the active writes only the new generation's topic now: how far this replica is behind it is how
                # far the copy being restored is (answers still come from, and at the Position of, the old copy)
                ahead = {lag.partition: lag for lag in b.lags()}
                lags = [dataclasses.replace(lag, current_offset=n.current_offset, end_offset=n.end_offset,
                                            time_lag_ms=n.time_lag_ms, read_to=n.read_to)
                        if (n := ahead.get(lag.partition)) is not None else lag for lag in lags]
            out += lags
        return out

    def generations(self) -> dict[str, dict[str, Any]]:
        """Per store: the topic its answers come from, the one being restored beside it (None: none) and that
        copy's offset lag (None until it has polled), and how many swaps this replica made."""
        with self._lock:
            stores = dict(self._stores)
        out = {}
        for n, st in sorted(stores.items()):
            b = st.building
            lags = None if b is None or not b.polled else sum(lag.offset_lag for lag in b.lags())
            out[n] = {"serving": st.serving.topic, "local_generation": st.serving.generation, "swaps": st.swaps,
                      "building": None if b is None else b.topic, "building_lag": lags}
        return out

    def caught_up(self) -> bool:
        """Every hosted partition has applied its changelog as far as it was seen to end, nothing is being restored
        beside it, and every store follows its highest generation."""
        with self._lock:
            stores = list(self._stores.values())
        if not stores or not all(st.serving.polled and st.building is None and st.want is None for st in stores):
            return False
        return all(lag.offset_lag == 0 for lag in self.lags())

    def catalog(self) -> dict[str, StoreSpec]:
        with self._lock:
            return {n: st.serving.spec for n, st in self._stores.items()}

    # -- files -----------------------------------------------------------------------------------------------
    def _write_app_json(self, state: State = State.RUNNING) -> None:
        with self._lock:
            standby = {n: sorted(st.serving.parts) for n, st in self._stores.items()}
        data = {"application_id": self.application_id, "state": state.value, "state_since": self._since,
                "pid": os.getpid(), "updated_at": time.time(), "hosted": {}, "standby": standby,
                "role": "replica", "source": self.source, "stores": {}}
        layout.write_json_atomic(layout.app_json_path(self.state_dir), data)


def _remove_leftovers(state_dir: Path, store: str, keep: tuple[int, ...]) -> None:
    """Delete local generations of ``store`` other than ``keep`` (their removal is a timer a stop cuts short)."""
    if 0 not in keep:
        remove_generation(state_dir, store, 0)
    d = layout.store_dir(state_dir, store)
    for sub in d.glob("gen-*") if d.is_dir() else ():
        g = sub.name[4:]
        if g.isdigit() and int(g) not in keep:
            remove_generation(state_dir, store, int(g))
