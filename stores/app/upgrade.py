"""What changed in a pipeline since the stores on disk were built: the upgrade plan (issue 20 item 1).

Each store's *definition* — kind, key, value columns and types, window /
grace / retention, partitions, source topics, and a fingerprint of Spark's
analyzed plan of its query (``stores.pipeline.definitions``) — is kept in
its ``store.json`` (key ``definition``). At start the app compares the
pipeline's definitions with those on disk, store by store:

- ``unchanged``: same fingerprint; the store keeps its files, checkpoint and
  positions and never notices the upgrade (item 2);
- ``new``: not on disk; it backfills from the start of its source;
- ``changed``: rebuilt beside the old version, which keeps answering under
  the same name until the new one has caught up (item 3, ``generations``);
- ``removed``: on disk, not in the pipeline; no longer served, its files
  stay until ``iqgate upgrade --drop-removed`` (item 5).

A store written before definitions were recorded has none on disk: it is
``unchanged`` when its StoreSpec is equal (the definition is recorded now),
else ``changed``. The plan is computed from files alone, so ``iqgate upgrade
--dry-run`` prints exactly what ``serve`` would do, like ``terraform plan``.

Why the source is checked here too (item 4): a rebuild replays the source
from its first offset, so a source that no longer holds it (Kafka retention,
deleted records) would silently build a store missing history. Such a
rebuild is refused unless asked for explicitly (``--rebuild-from-available``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from . import layout

__all__ = [
    "StoreChange", "UpgradePlan", "plan_upgrade", "describe_changes", "missing_history", "refusal_message",
    "drop_removed", "mark_removed", "REBUILD_REFUSED", "stored_store",
]

log = logging.getLogger(__name__)

REBUILD_REFUSED = "REBUILD_REFUSED"

ACTIONS = ("unchanged", "new", "changed", "removed")


@dataclass(frozen=True)
class StoreChange:
    """One store's line of the plan."""

    store: str
    action: str  # one of ACTIONS
    what: tuple[str, ...] = ()  # for "changed": what differs, one phrase each
    old_spec: StoreSpec | None = None  # the spec on disk (None for "new")
    new_spec: StoreSpec | None = None  # the pipeline's spec (None for "removed")
    new_definition: Mapping[str, Any] | None = None
    refused: str | None = None  # why the rebuild cannot replay the source (set when the source was checked)
    # for "unchanged": the changed/removed stores it shares a streaming query with (that query's state no
    # longer fits its plan, so this store is rebuilt beside itself all the same; see pipeline/shared_query.py)
    rebuilt_with: tuple[str, ...] = ()

    def line(self) -> str:
        """``revenue: changed (value columns: + avg_amount DOUBLE)``."""
        if self.action == "changed":
            text = f"{self.store}: changed ({'; '.join(self.what)}): rebuilt beside the old version, swapped in " \
                   "once it has caught up"
            if self.refused:
                text += f"; REFUSED: {self.refused}"
            return text
        if self.action == "removed":
            return f"{self.store}: removed: no longer served; its files stay until `iqgate upgrade --drop-removed`"
        if self.action == "new":
            return f"{self.store}: new: built from the start of its source"
        if self.rebuilt_with:
            return (f"{self.store}: unchanged, but rebuilt beside the old version all the same: it shares a "
                    f"streaming query with {', '.join(self.rebuilt_with)}, whose state no longer fits that query")
        return f"{self.store}: unchanged"

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "action": self.action, "what": list(self.what), "refused": self.refused,
                "rebuilt_with": list(self.rebuilt_with)}


@dataclass(frozen=True)
class UpgradePlan:
    changes: tuple[StoreChange, ...] = field(default_factory=tuple)

    def get(self, store: str) -> StoreChange | None:
        return next((c for c in self.changes if c.store == store), None)

    def of(self, action: str) -> list[StoreChange]:
        return [c for c in self.changes if c.action == action]

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes]

    def summary(self) -> str:
        counts = {a: len(self.of(a)) for a in ACTIONS}
        return ", ".join(f"{n} {a}" for a, n in counts.items())

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.changes]


def stored_store(state_dir: Path, name: str) -> tuple[StoreSpec, int, dict[str, Any]] | None:
    """(spec, generation, extras) of a store on disk, None when it has none or it cannot be read."""
    try:
        return layout.read_store(state_dir, name)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("store %s: cannot read %s (%s); treating it as new", name, layout.spec_path(state_dir, name), exc)
        return None


def plan_upgrade(state_dir: str | Path, specs: Mapping[str, StoreSpec],
                 definitions: Mapping[str, Mapping[str, Any]] | None) -> UpgradePlan:
    """Compare the pipeline's stores (``specs``, ``definitions`` by name) with the stores under ``state_dir``.

    Stores on disk the pipeline lacks are ``removed`` only when ``definitions`` are given (a pipeline
    file's Topology): a hand-written store set (tests, fixtures) may share a state dir with others.
    """
    state_dir = Path(state_dir)
    changes: list[StoreChange] = []
    for name, spec in specs.items():
        new_def = (definitions or {}).get(name)
        found = stored_store(state_dir, name)
        if found is None:
            changes.append(StoreChange(name, "new", new_spec=spec, new_definition=new_def))
            continue
        old_spec, _, extras = found
        old_def = extras.get("definition")
        what = describe_changes(old_spec, spec, old_def if isinstance(old_def, Mapping) else None, new_def)
        action = "changed" if what else "unchanged"
        changes.append(StoreChange(name, action, tuple(what), old_spec, spec, new_def))
    d = layout.stores_dir(state_dir)
    if definitions and d.is_dir():
        for sub in sorted(d.iterdir()):
            if sub.name in specs or not (sub / "store.json").is_file():
                continue
            found = stored_store(state_dir, sub.name)
            if found is not None:
                changes.append(StoreChange(sub.name, "removed", old_spec=found[0]))
    return UpgradePlan(tuple(_with_query_mates(changes, layout.shared_query_members(state_dir))))


def _with_query_mates(changes: list[StoreChange], groups: list[list[str]]) -> list[StoreChange]:
    """Mark unchanged stores whose shared query has a changed or removed member: they are rebuilt too.

    A member that left the pipeline without a "removed" line (a hand-written
    store set) also breaks the union, so any member not planned as unchanged counts.
    """
    unchanged = {c.store for c in changes if c.action == "unchanged"}
    mates: dict[str, set[str]] = {}
    for names in groups:
        breaking = [n for n in names if n not in unchanged]
        for n in names:
            if breaking and n in unchanged:
                mates.setdefault(n, set()).update(breaking)
    return [replace(c, rebuilt_with=tuple(sorted(mates[c.store]))) if c.store in mates else c for c in changes]


def describe_changes(old: StoreSpec, new: StoreSpec, old_def: Mapping[str, Any] | None,
                     new_def: Mapping[str, Any] | None) -> list[str]:
    """What differs between two versions of a store, one phrase each (empty: unchanged)."""
    what: list[str] = []
    if old.kind != new.kind:
        what.append(f"kind: {old.kind.value} -> {new.kind.value}")
    if (old.key.name, old.key.type) != (new.key.name, new.key.type):
        what.append(f"key: {old.key.name} {old.key.type} -> {new.key.name} {new.key.type}")
    old_cols = {c.name: c.type for c in old.values}
    new_cols = {c.name: c.type for c in new.values}
    cols = [f"+ {n} {t}" for n, t in new_cols.items() if n not in old_cols]
    cols += [f"- {n}" for n in old_cols if n not in new_cols]
    cols += [f"{n} {old_cols[n]} -> {t}" for n, t in new_cols.items() if n in old_cols and old_cols[n] != t]
    if cols:
        what.append("value columns: " + ", ".join(cols))
    elif list(old_cols) != list(new_cols):
        what.append("value column order: " + ", ".join(new_cols))
    for attr, label in (("window_size_ms", "window size ms"), ("window_advance_ms", "window advance ms"),
                        ("gap_ms", "session gap ms"), ("history_retention_ms", "history retention ms"),
                        ("partitions", "partitions")):
        a, b = getattr(old, attr), getattr(new, attr)
        if a != b:
            what.append(f"{label}: {a} -> {b}")
    if tuple(old.source_topics) != tuple(new.source_topics):
        what.append(f"source topics: {', '.join(old.source_topics)} -> {', '.join(new.source_topics)}")
    if dict(old.options or {}) != dict(new.options or {}):
        what.append(f"options: {old.options} -> {new.options}")
    if old_def is not None and new_def is not None and not what:
        for key in sorted(set(old_def) | set(new_def)):
            if key in ("plan", "fingerprint", "plan_text"):
                continue
            if old_def.get(key) != new_def.get(key):
                what.append(f"{key.replace('_', ' ')}: {old_def.get(key)} -> {new_def.get(key)}")
        if not what and old_def.get("plan") != new_def.get("plan"):
            what.append("the query's plan (same columns, different computation)")
    return what


# -- the source: can a rebuild replay what it needs? ------------------------------------------------
def missing_history(source: Any, topics: Iterable[str]) -> dict[str, dict[int, int]]:
    """``{topic: {partition: first offset still held}}`` for every partition whose early records are gone.

    A rebuild replays from offset 0; a partition whose first held offset is
    above 0 lost records ``[0, low)`` (Kafka retention or DeleteRecords, the
    embedded log's ``delete_records``). Sources that cannot tell (no
    ``low_offsets``) are taken to hold everything.
    """
    low_offsets = getattr(source, "low_offsets", None)
    if low_offsets is None:
        return {}
    have = source.list_topics()
    out: dict[str, dict[int, int]] = {}
    for t in topics:
        if t not in have:
            continue
        gone = {p: o for p, o in low_offsets(t).items() if o > 0}
        if gone:
            out[t] = gone
    return out


def refusal_message(store: str, missing: Mapping[str, Mapping[int, int]], where: str) -> str:
    """REBUILD_REFUSED: which topic-partitions lack which offsets, and the choices left."""
    parts = "; ".join(f"{t} partition {p}: offsets 0..{o - 1} are gone (first held {o})"
                      for t, ps in sorted(missing.items()) for p, o in sorted(ps.items()))
    return (f"{REBUILD_REFUSED}: store {store!r} cannot be rebuilt from {where}: {parts}. The old version keeps "
            "answering (and no longer advances). Either rebuild from what the source still holds, marking its "
            "answers as partial history (`--rebuild-from-available`), or keep the store's old definition")


def partial_history(missing: Mapping[str, Mapping[int, int]]) -> dict[str, Any]:
    """The ``history`` note of a store rebuilt from what its source still held."""
    return {"partial": True, "since": {t: {str(p): o for p, o in ps.items()} for t, ps in missing.items()},
            "rebuilt_at": time.time()}


def merged_position(positions: Iterable[Position]) -> Position:
    """Per topic-partition the highest offset over a store's partitions: the swap waits for all of it."""
    out = Position.empty()
    for p in positions:
        out = out.merge(p)
    return out


# -- removed stores --------------------------------------------------------------------------------
def mark_removed(state_dir: str | Path, store: str) -> None:
    """Note in ``store.json`` that the pipeline no longer has the store: readers stop serving it; files stay."""
    found = stored_store(Path(state_dir), store)
    if found is None:
        return
    spec, gen, extras = found
    if extras.get("removed"):
        return
    extras["removed"] = {"at": time.time()}
    layout.write_store(state_dir, store, spec, gen, **extras)


def drop_removed(state_dir: str | Path, plan: UpgradePlan) -> list[str]:
    """Delete the files of every store the plan says was removed (store dir, checkpoints, damaged copies)."""
    state_dir = Path(state_dir)
    dropped = []
    for c in plan.of("removed"):
        d = layout.store_dir(state_dir, c.store)
        shutil.rmtree(d, ignore_errors=True)
        ck = state_dir / "checkpoints"
        if ck.is_dir():
            for sub in ck.iterdir():
                if sub.name == c.store or sub.name.startswith(f"{c.store}@"):
                    shutil.rmtree(sub, ignore_errors=True)
        shutil.rmtree(layout.damaged_dir(state_dir, c.store), ignore_errors=True)
        dropped.append(c.store)
    return dropped


def plan_json(plan: UpgradePlan) -> str:
    return json.dumps(plan.to_json(), indent=2)


class Upgrades:
    """An app's upgrade while it runs: the plan made at start, stores waiting for their rebuild, refusals.

    ``rebuild_from_available`` is the explicit override of a refusal: True
    for every store, or the names of the stores it applies to.
    """

    def __init__(self, plan: UpgradePlan, rebuild_from_available: bool | Iterable[str] = False) -> None:
        self.plan = plan
        self.pending: dict[str, StoreChange] = {c.store: c for c in plan.of("changed")}
        self.refused: dict[str, str] = {}
        self.partial: dict[str, dict[str, Any]] = {}
        self._allow: bool | frozenset[str] = (rebuild_from_available if isinstance(rebuild_from_available, bool)
                                              else frozenset(rebuild_from_available))

    def allows_partial(self, store: str) -> bool:
        return self._allow if isinstance(self._allow, bool) else store in self._allow

    def serving_spec(self, store: str, spec: StoreSpec) -> StoreSpec:
        """The spec a store answers with until its rebuild swaps in: the old one when its definition changed."""
        change = self.pending.get(store)
        return change.old_spec if change is not None and change.old_spec is not None else spec

    def open_extras(self, store: str) -> dict[str, Any]:
        """What ``store.json`` records on open: the pipeline's definition, unless the store waits for a rebuild."""
        if store in self.pending:
            return {}
        change = self.plan.get(store)
        definition = change.new_definition if change is not None else None
        return {"definition": dict(definition) if definition else None, "removed": None}

    def upcoming_columns(self, store: str) -> list[str]:
        """Columns only the new version of a store being upgraded has (they arrive with the swap)."""
        change = self.pending.get(store)
        if change is None or change.new_spec is None or change.old_spec is None:
            return []
        have = {c.name.lower() for c in change.old_spec.columns()}
        return [c.name for c in change.new_spec.columns() if c.name.lower() not in have]

    def finished(self, store: str) -> dict[str, Any]:
        """The ``store.json`` extras of a store whose rebuilt generation swaps in now (and forget it as pending)."""
        change = self.pending.pop(store, None)
        if change is None:
            return {}
        definition = change.new_definition
        return {"definition": dict(definition) if definition else None, "history": self.partial.get(store)}
