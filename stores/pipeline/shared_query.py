"""Shared streaming queries: several stores over one source read by ONE Spark query (issue 23 item 4).

Why: one streaming query per store costs a Python source runner process,
a query thread, its own read of the source and its own batch overhead per
store — ~130 MB and a few threads each, so 100 stores did not fit on a
small machine. Stores that read the same stream with the same output mode
are unioned into one query instead: each store's projected rows become a
struct column ``__s<i>`` tagged by ``__m = i``, one source runner plans
each micro-batch (members with identical partial aggregations, or built on
one ``repartition`` of the stream, also share its scan through Spark's
exchange reuse; others scan it each), the query runs every store's
aggregation (Spark allows several stateful operators in one update-mode
query when they are unioned, not chained), and one foreachBatch splits the Arrow batch by member and writes
each store. At most ``stores_per_query`` stores share a query (default 32:
a wider union makes each micro-batch a long chain of stages).

The checkpoint is the group's (``checkpoints/@shared/<id>``), its plan the
union of its members in a fixed order recorded in ``members.json``: a
restart rebuilds the same union, so Spark's stateful operators find their
state. What stays per store:

- a store whose write fails for any reason other than a machine fault is
  *detached*: the shared sink skips it from then on (the plan keeps its
  operator, so the checkpoint stays valid) and the runtime handles it alone
  (the handler, or a rebuild into a new generation by a query of its own);
- a fault (disk full, I/O error…) fails the whole batch, so every member is
  paused and the query restarts from the checkpoint; members that had
  written the batch skip it on replay (batch ids are the group's).

A store with a checkpoint of its own (it was rebuilt, or its state dir
predates sharing) keeps its own query.

``members.json`` also records each member's definition fingerprint (issue
20). When a member's definition changed, or a member left the pipeline,
the union is a different plan and the checkpointed state no longer fits it
(Spark refuses it with ``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``), so the
group is *abandoned*:
its checkpoint is deleted, the changed store is rebuilt by its upgrade and
every other member is rebuilt beside its current version, which answers
until the rebuild has caught up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from ..app import layout
from ..iqv2.position import Position
from .faults import fault_reason
from .materializer import _projection, position_from_offsets, read_batch_offsets, rows_to_table

__all__ = ["QueryGroup", "plan_groups", "SharedBatchSink", "DEFAULT_STORES_PER_QUERY", "shared_root",
           "has_own_checkpoint"]

log = logging.getLogger(__name__)

DEFAULT_STORES_PER_QUERY = 32
_SHAREABLE = {"aggregate": "update", "latest": "append", "versioned": "append"}
shared_root = layout.shared_checkpoints_dir


def has_own_checkpoint(checkpoint: Path) -> bool:
    """Has a store's own checkpoint planned or committed a batch? (Then it keeps its own query.)"""
    return any(d.is_dir() and any(p.name.isdigit() for p in d.iterdir())
               for d in (checkpoint / "offsets", checkpoint / "commits"))


class QueryGroup:
    """Stores that share one streaming query: their order (the union's), the checkpoint, the query."""

    def __init__(self, gid: str, decls: Sequence[Any], checkpoint: Path,
                 fingerprints: dict[str, str] | None = None) -> None:
        self.gid = gid
        self.decls = list(decls)
        self.names = [d.spec.name for d in self.decls]
        self.checkpoint = checkpoint
        self.fingerprints = dict(fingerprints or {})  # member → its definition's fingerprint (when known)
        self.detached: set[str] = set()  # members the sink no longer writes (they run alone now)
        self.query: Any = None

    def __repr__(self) -> str:
        return f"QueryGroup({self.gid}: {', '.join(self.names)})"

    def frame(self) -> DataFrame:
        """The union of every member's projected rows: ``__m`` (member index) and one struct per member."""
        projs = [d.df.select(F.struct(*_projection(d)).alias("s")) for d in self.decls]
        # every field nullable: the struct is null in the other members' rows, and Arrow refuses a null under
        # a non-nullable field (the topic/partition/offset columns are)
        types = [StructType([StructField(f.name, f.dataType, True) for f in p.schema["s"].dataType.fields])
                 for p in projs]
        projs = [p.select(F.col("s").cast(t).alias("s")) for p, t in zip(projs, types)]
        frames = [p.select(F.lit(i).alias("__m"), *[
            (F.col("s") if j == i else F.lit(None).cast(types[j])).alias(f"__s{j}") for j in range(len(projs))])
            for i, p in enumerate(projs)]
        return reduce(DataFrame.union, frames)

    def output_mode(self) -> str:
        return self.decls[0].output_mode

    def save(self) -> None:
        layout.write_json_atomic(self.checkpoint / "members.json",
                                 {"members": self.names, "fingerprints": self.fingerprints})


def _bucket(decl: Any) -> tuple[Any, ...] | None:
    mode = _SHAREABLE.get(decl.shape)
    if mode is None or decl.output_mode != mode:
        return None
    streams = getattr(decl, "streams", frozenset())
    return (mode, tuple(sorted(streams)), tuple(sorted(decl.spec.source_topics))) if streams else None


def _gid(names: Sequence[str], root: Path) -> str:
    """A new group's id: from its members, but never the directory of another (or an abandoned) group's checkpoint."""
    for salt in range(1000):
        gid = hashlib.sha1("\0".join([*names, str(salt)] if salt else names).encode()).hexdigest()[:12]
        if not (root / gid).exists():
            return gid
    raise RuntimeError(f"no free shared-query directory under {root} for {list(names)}")


def plan_groups(state_dir: str | Path, decls: Iterable[Any], per_query: int,
                solo: Callable[[str], bool], fingerprint: Callable[[str], str | None] = lambda name: None,
                abandoned: dict[str, str] | None = None) -> list[QueryGroup]:
    """Groups of ≥ 2 stores that share a query; stores left out run alone.

    Groups recorded under ``checkpoints/@shared`` are kept when every member
    is still declared, shareable and in one bucket, and no member's
    definition (``fingerprint(name)``, None when unknown) differs from the
    recorded one (the same plan, so the checkpoint's state is valid); a
    member that has a query of its own by now (``solo(name)``: it was
    rebuilt) stays in the union, detached, so the others keep their state.
    A group whose member changed is abandoned (see the module docstring):
    its checkpoint is deleted and ``abandoned`` gets, for each of its other
    members, why it must be rebuilt. The other shareable stores that are not
    solo are chunked in declaration order.
    """
    if per_query < 2:
        return []
    shareable = {d.spec.name: d for d in decls if _bucket(d) is not None}
    root = shared_root(state_dir)
    groups: list[QueryGroup] = []
    rebuilt: set[str] = set()  # members of abandoned groups: each is rebuilt by a query of its own
    for members_file in sorted(root.glob("*/members.json")) if root.is_dir() else ():
        try:
            recorded = json.loads(members_file.read_text(encoding="utf-8"))
            names = [str(n) for n in recorded["members"]]
            prints = {str(k): str(v) for k, v in (recorded.get("fingerprints") or {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring shared query %s: %s", members_file.parent, exc)
            continue
        if len(names) < 2 or len(set(names)) != len(names):
            log.warning("ignoring shared query %s: its member list %s is damaged", members_file.parent, names)
            continue
        changed = [n for n in names if prints.get(n) and fingerprint(n) not in (None, prints[n])]
        gone = [n for n in names if n not in shareable]  # removed from the pipeline, or no longer shareable
        if not changed and not gone and len({_bucket(shareable[n]) for n in names}) != 1:
            changed = list(names)  # the members no longer read one stream in one mode: another plan
        if changed or gone:
            _abandon(members_file.parent, names, changed, gone, abandoned)
            rebuilt.update(names)
            continue
        g = QueryGroup(members_file.parent.name, [shareable.pop(n) for n in names], members_file.parent, prints)
        g.detached = {n for n in names if solo(n)}
        groups.append(g)
    buckets: dict[tuple[Any, ...], list[Any]] = {}
    for d in shareable.values():
        if not solo(d.spec.name) and d.spec.name not in rebuilt:
            buckets.setdefault(_bucket(d), []).append(d)  # type: ignore[arg-type]
    for members in buckets.values():
        for i in range(0, len(members), per_query):
            chunk = members[i:i + per_query]
            if len(chunk) < 2:
                continue
            names = [d.spec.name for d in chunk]
            gid = _gid(names, root)
            prints = {n: fp for n in names if (fp := fingerprint(n))}
            groups.append(QueryGroup(gid, chunk, root / gid, prints))
    return groups


def _abandon(checkpoint: Path, names: Sequence[str], changed: Sequence[str], gone: Sequence[str],
             abandoned: dict[str, str] | None) -> None:
    """Delete a shared query whose plan no longer holds; its other members must be rebuilt (their state was in it)."""
    why = "; ".join(part for part in (
        f"{', '.join(changed)} changed its definition" if changed else "",
        f"{', '.join(gone)} is no longer a shareable store of the pipeline" if gone else "") if part)
    reason = (f"its shared streaming query was abandoned ({why}): that query's state no longer fits; the current "
              "version answers until the rebuild has caught up")
    others = [n for n in names if n not in changed and n not in gone]
    log.warning("shared query %s (%s) is abandoned (%s); %s rebuilt beside themselves", checkpoint.name,
                ", ".join(names), why, ", ".join(others) or "no other member is")
    if abandoned is not None:
        abandoned.update({n: reason for n in others})
    (checkpoint / "members.json").unlink(missing_ok=True)  # first: a crash mid-delete leaves no group behind
    shutil.rmtree(checkpoint, ignore_errors=True)


class SharedBatchSink:
    """The foreachBatch of a shared query: one Arrow batch, split by member, written store by store.

    ``writer(store)`` gives a member's writer; ``on_applied(store, batch_id,
    position)`` is the runtime's progress hook; ``on_member_failed(store,
    exc)`` hands a member whose write failed (not by a machine fault) to the
    runtime, which handles it alone.
    """

    def __init__(self, group: QueryGroup, writer: Callable[[str], Any],
                 on_applied: Callable[[str, int, Position], None],
                 on_member_failed: Callable[[str, BaseException], None]) -> None:
        self.group = group
        self._writer = writer
        self._on_applied = on_applied
        self._on_member_failed = on_member_failed
        self.last_batch_seconds = 0.0

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        sources, batch_ts = read_batch_offsets(self.group.checkpoint, batch_id)
        position = position_from_offsets(sources)
        table = batch_df.toArrow()  # runs every member's stateful operator: each commits its state
        t1 = time.perf_counter()
        member = table.column("__m")
        applied: list[str] = []
        for i, decl in enumerate(self.group.decls):
            name = decl.spec.name
            if name in self.group.detached:
                continue
            rows = member_rows(table, member, i)
            try:
                self._writer(name).write_table(batch_id, rows_to_table(decl, rows, batch_ts), position)
            except Exception as exc:
                if fault_reason(exc) is not None:
                    raise  # the machine's fault: every member pauses, the batch is replayed
                log.error("store %s (shared query %s) failed at batch %d; it leaves the shared query: %s",
                          name, self.group.gid, batch_id, exc)
                self.group.detached.add(name)
                self._on_member_failed(name, exc)
                continue
            applied.append(name)
        self.last_batch_seconds = time.perf_counter() - t0
        log.debug("shared query %s batch %d: %d rows for %d stores; Spark job + toArrow %.3f s, writes %.3f s",
                  self.group.gid, batch_id, len(table), len(applied), t1 - t0, self.last_batch_seconds - (t1 - t0))
        for name in applied:
            self._on_applied(name, batch_id, position)


def member_rows(table: pa.Table, member: Any, i: int) -> pa.Table:
    """Member ``i``'s rows of a shared batch as the flat table its own query's projection would give."""
    col = table.column(f"__s{i}")
    if len(table):
        mask = pc.equal(member, pa.scalar(i, member.type))
        col = col.filter(mask)
    chunks = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if len(chunks) == 0:
        chunks = pa.array([], type=col.type)
    return pa.Table.from_struct_array(chunks)
