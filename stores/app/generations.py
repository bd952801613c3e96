"""The files of one store: its current generation, partitions lost or damaged, and a generation being rebuilt.

A store is rebuilt from its source — its files lost or damaged (issue 13),
or its definition changed (issue 20) — into a new generation beside the
current one, while the current one keeps answering; once the new generation
has caught up, one atomic rewrite of ``store.json`` swaps it in (see
``layout``). So no reader ever sees a store going back in time, and a
damaged file costs a rebuild of that store, never a stopped app.

On open every partition file is checked (``engine.base.integrity_problem``);
a damaged one is moved aside to ``<state_dir>/damaged/<store>/`` and its
partition is *lost* until the rebuild swaps in: it answers NOT_ACTIVE
("being restored"), never an empty success.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..engine import PartitionStore, open_partition
from ..engine.base import integrity_problem
from . import layout

__all__ = ["StoreFiles", "move_aside", "RETIRE_AFTER_S"]

log = logging.getLogger(__name__)

RETIRE_AFTER_S = 2.0  # how long a swapped-out generation stays open for statements still reading it
RETIRE_WAIT_S = 120.0  # at most this long more for Arrow scans still reading it (a statement's time budget)


class StoreFiles:
    """Open partitions of one store's current generation, its lost partitions, and the generation being built."""

    def __init__(self, state_dir: Path, spec: StoreSpec, synchronous: str) -> None:
        self.state_dir = state_dir
        self.spec = spec
        self.synchronous = synchronous
        self.generation = 0
        self.parts: dict[int, PartitionStore] = {}
        self.lost: dict[int, str] = {}  # partition -> why it cannot answer until the rebuild swaps in
        self.next_generation: int | None = None
        self.next_parts: dict[int, PartitionStore] = {}
        self.next_spec: StoreSpec | None = None
        self.extras: dict[str, Any] = {}

    # -- open -----------------------------------------------------------------------------
    def open(self, extras: dict[str, Any] | None = None) -> None:
        """Open the current generation, checking each file; damaged or missing ones become lost partitions."""
        name = self.spec.name
        existed = layout.spec_path(self.state_dir, name).exists()
        if existed:
            try:
                _, self.generation, self.extras = layout.read_store(self.state_dir, name)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("store %s: cannot read %s (%s); treating the store as new",
                            name, layout.spec_path(self.state_dir, name), exc)
                self.generation, self.extras = 0, {}
        self.extras.update(extras or {})
        gen_dir = layout.generation_dir(self.state_dir, name, self.generation)
        gen_dir.mkdir(parents=True, exist_ok=True)
        paths = {p: layout.partition_path(self.state_dir, name, p, self.generation) for p in range(self.spec.partitions)}
        had_data = existed and (any(path.exists() for path in paths.values()) or _has_commits(
            layout.checkpoint_dir(self.state_dir, name, self.generation)))
        for p, path in paths.items():
            if path.exists():
                problem = integrity_problem(path, self.spec.kind.value)
                if problem is not None:
                    move_aside(self.state_dir, name, path, problem)
                    self.lost[p] = f"its file was damaged ({problem})"
                    continue
            elif had_data:
                self.lost[p] = f"its file {path} is missing"
                log.warning("store %s partition %d: file %s is missing; the store will be rebuilt from its source",
                            name, p, path)
                continue
            self.parts[p] = open_partition(self.spec, p, path, synchronous=self.synchronous)
        layout.write_store(self.state_dir, name, self.spec, self.generation, **self.extras)

    def check_files(self) -> dict[int, str]:
        """Partitions whose file vanished or was replaced under the open store since the last check (newly lost)."""
        found: dict[int, str] = {}
        for p, store in list(self.parts.items()):
            try:
                os.stat(store.path)
            except FileNotFoundError:
                found[p] = f"its file {store.path} was deleted"
        for p, why in found.items():
            self.lose(p, why)
        return found

    def lose(self, partition: int, why: str) -> None:
        store = self.parts.pop(partition, None)
        self.lost[partition] = why
        if store is not None:
            _retire([store])

    def recheck(self) -> dict[int, str]:
        """Run the integrity check on every open partition (after a write said "malformed"); damaged ones are lost."""
        found: dict[int, str] = {}
        for p, store in list(self.parts.items()):
            problem = integrity_problem(store.path, self.spec.kind.value)
            if problem is not None:
                found[p] = f"its file was damaged ({problem})"
        for p, why in found.items():
            store = self.parts[p]
            self.lose(p, why)
            store.close()
            move_aside(self.state_dir, self.spec.name, store.path, why)
        return found

    # -- rebuild --------------------------------------------------------------------------
    def begin(self, spec: StoreSpec | None = None) -> int:
        """Open a fresh next generation (of ``spec``, default the current one) beside the current; its number."""
        if self.next_generation is not None:
            return self.next_generation
        name = self.spec.name
        g = self.generation + 1
        d = layout.generation_dir(self.state_dir, name, g)
        if d.exists():  # a rebuild that a crash interrupted: start it over
            shutil.rmtree(d)
        d.mkdir(parents=True)
        self.next_spec = spec or self.spec
        self.next_parts = {p: open_partition(self.next_spec, p, layout.partition_path(self.state_dir, name, p, g),
                                             synchronous=self.synchronous) for p in range(self.next_spec.partitions)}
        self.next_generation = g
        return g

    def finish(self, extras: dict[str, Any] | None = None) -> list[PartitionStore]:
        """Swap the next generation in (one atomic rewrite of store.json); returns the retired partition stores."""
        if self.next_generation is None or self.next_spec is None:
            raise RuntimeError(f"store {self.spec.name!r} has no generation being built")
        old_gen, old_parts = self.generation, list(self.parts.values())
        self.extras.update(extras or {})
        layout.write_store(self.state_dir, self.spec.name, self.next_spec, self.next_generation, **self.extras)
        self.spec, self.generation, self.parts = self.next_spec, self.next_generation, self.next_parts
        self.lost = {}
        self.next_generation, self.next_spec, self.next_parts = None, None, {}
        _retire(old_parts, after=lambda: layout.remove_generation(self.state_dir, self.spec.name, old_gen))
        return old_parts

    def abandon(self) -> None:
        """Drop the generation being built (closing its files)."""
        for s in self.next_parts.values():
            s.close()
        if self.next_generation is not None:
            shutil.rmtree(layout.generation_dir(self.state_dir, self.spec.name, self.next_generation),
                          ignore_errors=True)
        self.next_generation, self.next_spec, self.next_parts = None, None, {}

    def close(self) -> None:
        for s in [*self.parts.values(), *self.next_parts.values()]:
            s.close()


def move_aside(state_dir: Path, store: str, path: Path, reason: str) -> Path:
    """Move a damaged partition file (and its -wal/-shm) to ``damaged/<store>/``, with a note saying why."""
    dest_dir = layout.damaged_dir(state_dir, store)
    dest_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    dest = dest_dir / f"{path.parent.name}-{path.name}.{stamp}"
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, Path(f"{dest}{suffix}"))
    Path(f"{dest}.why").write_text(reason + "\n", encoding="utf-8")
    log.warning("store %s: moved the damaged file %s aside to %s (%s); the store will be rebuilt from its source",
                store, path, dest, reason)
    return dest


def _has_commits(checkpoint: Path) -> bool:
    d = checkpoint / "commits"
    return d.is_dir() and any(p.name.isdigit() for p in d.iterdir())


def _retire(stores: list[PartitionStore], after: Any = None) -> None:
    """Close swapped-out partition stores a little later: statements that picked them up finish first.

    Arrow scans still reading a store are waited for (up to RETIRE_WAIT_S, then closed regardless):
    closing the ``sqlite3`` connections of a file that the ADBC copy of SQLite is reading is how two
    SQLite copies in one process damage each other (sqlite.org/howtocorrupt.html §2.2).
    """
    def run() -> None:
        deadline = time.monotonic() + RETIRE_WAIT_S
        while any(s.arrow_scans_in_flight for s in stores) and time.monotonic() < deadline:
            time.sleep(0.1)
        for s in stores:
            try:
                s.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.exception("closing retired store %r failed", s)
        if after is not None:
            after()
    t = threading.Timer(RETIRE_AFTER_S, run)
    t.daemon = True
    t.start()
