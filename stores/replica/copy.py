"""StoreCopy: one local generation of one store on a replica, restored from one changelog topic.

A replica holds at most two copies of a store: the one it answers from
(``store.json`` names its local generation) and, while the active rebuilds
the store into a new generation (``<app>-<store>.g<N>-changelog``), the one
it restores from that generation's topic beside it. Local generation numbers
are the replica's own (the next copy is the current one's + 1): what ties a
copy to the active is the topic it follows and that topic's id, both in the
copy's ``replica.json`` with the next offsets to read.

Every record is applied with ``PartitionStore.apply_rows`` — one SQLite
transaction holding the rows, the Position and the batch id, so a reader of
the files sees a whole batch or none; a batch already applied is skipped (a
restart re-reads from the saved offsets, which may be a little behind).
A record stamped with another topic id than the copy's is from a topic
deleted and created again (the active began that rebuild anew): ``Recreated``
is raised before anything of it is applied, so two attempts never mix.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..app import layout
from ..catalog.schema import StoreSpec
from ..changelog.record import ChangelogFormatError
from ..changelog.topics import ChangelogLog, Item, Tail
from ..engine import PartitionStore, open_partition
from ..iqv2.position import Position
from ..iqv2.timeutil import now_ms

__all__ = ["StoreCopy", "PartitionLag", "Recreated", "REPLICA_JSON", "RETIRE_AFTER_S"]

log = logging.getLogger(__name__)

REPLICA_JSON = "replica.json"
RETIRE_AFTER_S = 2.0  # a swapped-out copy stays open this long for statements that picked it up


class Recreated(Exception):
    """The copy's changelog topic was deleted and created again: its records belong to another attempt."""


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


def offsets_path(state_dir: Path, store: str, generation: int) -> Path:
    """``replica.json`` of a local generation (generation 0's is in the store dir, as before generations)."""
    return layout.generation_dir(state_dir, store, generation) / REPLICA_JSON


def load_meta(state_dir: Path, store: str, generation: int) -> dict[str, Any]:
    try:
        raw = json.loads(offsets_path(state_dir, store, generation).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def saved_offsets(meta: dict[str, Any]) -> dict[int, int]:
    try:
        return {int(p): int(o) for p, o in meta.get("next_offsets", {}).items()}
    except (ValueError, AttributeError, TypeError):
        return {}


class StoreCopy:
    """Local generation ``generation`` of store ``spec``: its open partitions and the tail on ``topic``."""

    def __init__(self, state_dir: Path, spec: StoreSpec, generation: int, hosted: Iterable[int], topic: str,
                 topic_id: str | None, changelog: ChangelogLog, starts: dict[int, int] | None = None) -> None:
        self.state_dir = state_dir
        self.spec = spec
        self.name = spec.name
        self.generation = generation
        self.topic = topic
        self.topic_id = topic_id
        hosted = sorted(hosted)
        layout.generation_dir(state_dir, self.name, generation).mkdir(parents=True, exist_ok=True)
        self.parts: dict[int, PartitionStore] = {
            p: open_partition(spec, p, layout.partition_path(state_dir, self.name, p, generation),
                              synchronous="NORMAL") for p in hosted}
        starts = {p: (starts or {}).get(p, 0) for p in hosted}
        self.tail: Tail | None = changelog.tail(topic, starts)
        self.applied_offset = {p: starts[p] - 1 for p in hosted}
        self.ends: dict[int, int] = dict(starts)
        self.read_to: dict[int, int] = dict(starts)
        self.behind_since: dict[int, int | None] = {p: None for p in hosted}
        self._error: str | None = None
        self.error_since: int | None = None  # when the copy stopped following its changelog (an error), ms
        self.polled = False  # lags mean something only once the log was asked where each partition ends

    @property
    def error(self) -> str | None:
        """Why the copy is not following its changelog now (None: it is)."""
        return self._error

    @error.setter
    def error(self, value: str | None) -> None:
        if value is None:
            self.error_since = None
        elif self._error is None:
            self.error_since = now_ms()
        self._error = value

    def follows(self, topic: str, topic_id: str | None) -> bool:
        """Is this copy restored from ``topic`` as it is now (the same id, when both are known)?"""
        return self.topic == topic and (self.topic_id is None or topic_id is None or self.topic_id == topic_id)

    # -- applying ---------------------------------------------------------------------------------
    def poll(self, wait_s: float) -> None:
        """Read and apply what the tail has (nothing if the tail was stopped)."""
        if self.tail is not None:
            self.apply(self.tail.poll(wait_s))

    def apply(self, items: list[Item]) -> None:
        assert self.tail is not None
        for item in items:
            p = item.partition
            store = self.parts.get(p)
            if store is None:
                continue
            rec = item.record
            if rec.topic_id is not None:
                if self.topic_id is None:
                    self.topic_id = rec.topic_id  # a copy restored before records carried it
                elif rec.topic_id != self.topic_id:
                    raise Recreated(f"changelog {self.topic} partition {p} offset {item.offset} belongs to topic id "
                                    f"{rec.topic_id}, this copy to {self.topic_id}: the topic was created again")
            if rec.spec.to_json() != self.spec.to_json():
                raise ChangelogFormatError(
                    f"changelog {self.topic} of store {self.name!r} partition {p} offset {item.offset}: the store's "
                    "definition changed; restart the replica with a fresh state dir for it")
            store.apply_rows(rec.batch_id, rec.rows, rec.position, rec.observed)
            self.applied_offset[p] = item.offset
        ends, positions = self.tail.ends(), self.tail.positions()
        self.polled = True
        now = now_ms()
        for p in self.parts:
            self.read_to[p] = max(positions.get(p, 0), self.applied_offset[p] + 1)
            self.ends[p] = max(ends.get(p, 0), self.read_to[p])
            if self.ends[p] > self.read_to[p]:
                if self.behind_since[p] is None:
                    self.behind_since[p] = now
            else:
                self.behind_since[p] = None

    # -- what it has --------------------------------------------------------------------------------
    def positions(self) -> list[Position]:
        out = []
        for store in self.parts.values():
            try:
                out.append(store.current_position())
            except Exception:  # noqa: BLE001 - a closing store
                out.append(Position.empty())
        return out

    def max_position(self) -> Position:
        """Per source topic-partition the furthest any hosted partition reached: what a successor must reach."""
        pos = Position.empty()
        for p in self.positions():
            pos = pos.merge(p)
        return pos

    def lags(self) -> list[PartitionLag]:
        now = now_ms()
        out = []
        for p, store in sorted(self.parts.items()):
            try:
                position = store.current_position()
            except Exception:  # noqa: BLE001 - a closing store
                position = Position.empty()
            since = self.behind_since[p]
            if self.error_since is not None:  # not following: behind since then, for all anyone here can tell
                since = self.error_since if since is None else min(since, self.error_since)
            out.append(PartitionLag(self.name, p, self.applied_offset[p], self.ends.get(p, 0),
                                    0 if since is None else max(0, now - since), position, read_to=self.read_to.get(p)))
        return out

    def reached(self, target: Position) -> bool:
        """Has every hosted partition reached ``target`` on every source topic-partition in it?"""
        return bool(self.parts) and all(p.covers(target) for p in self.positions())

    # -- files ----------------------------------------------------------------------------------------
    def save(self) -> None:
        data = {"changelog": self.topic, "topic_id": self.topic_id, "spec": json.loads(self.spec.to_json()),
                "next_offsets": {str(p): max(o + 1, self.read_to.get(p, 0)) for p, o in self.applied_offset.items()}}
        try:
            layout.write_json_atomic(offsets_path(self.state_dir, self.name, self.generation), data)
        except OSError as exc:
            log.warning("replica: cannot save changelog offsets of store %s (%s): %s", self.name, self.topic, exc)

    def stop_tail(self) -> None:
        if self.tail is not None:
            self.tail.close()
            self.tail = None

    def close(self) -> None:
        self.stop_tail()
        for s in self.parts.values():
            s.close()

    def drop(self) -> None:
        """Close and delete this copy now (a build abandoned: nobody reads it)."""
        self.close()
        remove_generation(self.state_dir, self.name, self.generation)

    def retire(self) -> None:
        """Stop tailing now; close and delete the files a little later (statements that picked them up finish)."""
        self.stop_tail()

        def later() -> None:
            for s in self.parts.values():
                try:
                    s.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    log.exception("closing retired copy of store %s failed", self.name)
            remove_generation(self.state_dir, self.name, self.generation)
        t = threading.Timer(RETIRE_AFTER_S, later)
        t.daemon = True
        t.start()


def remove_generation(state_dir: Path, store: str, generation: int) -> None:
    """Delete a local generation's files, its replica.json included."""
    layout.remove_generation(state_dir, store, generation, also=(REPLICA_JSON,))
