"""A StreamsApp's stores rebuilt beside themselves (issue 20): generations begun, followed, swapped in.

A store whose files were lost or damaged, or whose definition changed, is
rebuilt from its source into the next generation (``generations.py``) while
the current one keeps answering; it is swapped in once every partition has
reached what any reader may have seen of the current one. These are the
StreamsApp methods the runtime and the upgrades drive for that, kept apart
from the client's state machine and queries (``streams.py``), whose
attributes they use: ``_files``, ``_lock``, ``_specs``, ``_stores``,
``_generation``, ``_writers``, ``_views``, ``health``, ``upgrades``,
``state_dir`` and ``application_id``.
"""

from __future__ import annotations

import logging
from typing import Any

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from . import layout

__all__ = ["StoreRebuilds"]

log = logging.getLogger("stores.app.streams")


class StoreRebuilds:
    """The rebuild methods of StreamsApp (a mixin: see the module doc for what it needs of the app)."""

    _files: dict[str, Any]
    _lock: Any
    _specs: dict[str, StoreSpec]
    _stores: dict[str, Any]
    _generation: dict[str, int]
    _writers: dict[Any, Any]
    _views: dict[str, Any]
    health: Any
    upgrades: Any
    state_dir: Any
    application_id: str

    def rebuild_needed(self, name: str) -> str | None:
        """Why the store must be rebuilt from its source (lost or damaged partitions), or None."""
        files = self._files.get(name)
        if files is None or not files.lost:
            return None
        return "; ".join(f"partition {p}: {why}" for p, why in sorted(files.lost.items()))

    def begin_rebuild(self, name: str, reason: str, spec: StoreSpec | None = None) -> int:
        """Open a new generation of ``name`` beside the current one; the current keeps answering meanwhile."""
        with self._lock:
            files = self._files[name]
            g = files.begin(spec)
        log.warning("stream-client %s: rebuilding store %s from its source into generation %d: %s",
                    self.application_id, name, g, reason)
        self.health.set(name, "rebuilding", reason)
        upcoming = self.upgrades.upcoming_columns(name)
        if upcoming:  # before the first progress report: read-only gateways learn them from app.json
            self.health.progress(name, {"phase": "rebuilding", "upcoming_columns": upcoming})
        return g

    def min_position(self, name: str, *, building: bool = False) -> Position:
        """The position every partition of the store (or of the generation being built) has reached.

        The minimum over its partitions, lost ones counting as empty: what
        "caught up" and "ready to swap" are judged by, since a batch can be
        applied by some partitions before a fault stops the rest.
        """
        with self._lock:
            files = self._files.get(name)
            if files is None or (building and files.next_generation is None):
                return Position.empty()
            if not building and files.lost:
                return Position.empty()
            parts = list((files.next_parts if building else files.parts).values())
        pos: Position | None = None
        for s in parts:
            p = s.current_position()
            pos = p if pos is None else _min_position(pos, p)
        return pos or Position.empty()

    def max_position(self, name: str) -> Position:
        """Per topic-partition the furthest offset any open partition of the current generation has reached.

        What a rebuild must reach before it is swapped in: a reader may have
        seen any surviving partition's position, and the checkpoint's last
        commit can lag the stores (a batch applied, the app stopped before
        Spark wrote its commit), so the checkpoint alone is not enough.
        """
        with self._lock:
            files = self._files.get(name)
            parts = list(files.parts.values()) if files is not None else []
        pos = Position.empty()
        for s in parts:
            pos = pos.merge(s.current_position())
        return pos

    def current_generation(self, name: str) -> int:
        with self._lock:  # a swap changes the generation and the store's status together (finish_rebuild)
            files = self._files.get(name)
            return files.generation if files is not None else 0

    def finish_rebuild(self, name: str, **extras: Any) -> None:
        """Swap the rebuilt generation in: one atomic rewrite of store.json; handles of the old one go stale."""
        with self._lock:
            files = self._files[name]
            files.finish({**self.upgrades.finished(name), **extras})
            self._specs[name] = files.spec
            self._stores[name] = files.parts
            self._generation[name] += 1
            for key in [k for k in self._writers if k[0] == name]:
                del self._writers[key]
            self._views.pop(name, None)
            # under the lock: no one sees the new generation still "rebuilding" (the status was set after the
            # lock and a log line, and a reader between them saw generation 1 rebuilding: a flaky upgrade test)
            self.health.set(name, "running")
        log.warning("stream-client %s: store %s swapped to its rebuilt generation %d", self.application_id, name,
                    files.generation)

    def upcoming_columns(self, name: str) -> dict[str, Any] | None:
        """Columns of a store arriving when its upgrade's rebuild swaps in, with the rebuild's progress (issue 20)."""
        cols = self.upgrades.upcoming_columns(name)
        spec = self._specs.get(name)
        if not cols or spec is None:
            return None
        return {"columns": cols, "serving": [c.name for c in spec.columns()],
                "progress": self.health.get(name).progress}

    def history(self, name: str) -> dict[str, Any] | None:
        """``{"partial": true, "since": …}`` when the store was rebuilt from what its source still held, else None."""
        try:
            history = layout.read_store(self.state_dir, name)[2].get("history")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return dict(history) if isinstance(history, dict) else None

    def check_store_files(self, name: str, *, integrity: bool = False) -> dict[int, str]:
        """Partitions newly found lost (file deleted; with ``integrity``, damaged): they answer NOT_ACTIVE now."""
        with self._lock:
            files = self._files.get(name)
            if files is None:
                return {}
            found = files.recheck() if integrity else files.check_files()
            if found:
                self._generation[name] += 1
                for key in [k for k in self._writers if k[0] == name]:
                    del self._writers[key]
                self._views.pop(name, None)
        return found


def _min_position(a: Position, b: Position) -> Position:
    """Per topic-partition the smaller offset; a topic-partition missing from either is missing."""
    out: dict[str, dict[int, int]] = {}
    for t in a.topics():
        bp = b.partition_positions(t)
        for p, o in a.partition_positions(t).items():
            if p in bp:
                out.setdefault(t, {})[p] = min(o, bp[p])
    return Position.from_map(out)
