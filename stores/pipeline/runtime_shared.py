"""The part of SparkRuntime that runs shared queries (issue 23 items 4-5): groups, members, waves.

A mixin so that ``runtime.py`` stays one screenful per concern: these methods
use the runtime's units, app, locks and failure paths (``_launch``,
``_fail``, ``_first_trigger_done``), and the runtime calls them at start, in
its monitor loop, and where a query is started, paused or rebuilt.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from ..app import layout
from .faults import classify_failure, is_corruption
from .shared_query import QueryGroup, SharedBatchSink, has_own_checkpoint, plan_groups

__all__ = ["SharedQueries", "MAX_STARTING", "WAVE_WAIT_S"]

log = logging.getLogger(__name__)

MAX_STARTING = 2  # queries starting at once (issue 23 item 5: a start-up storm makes Python workers time out)
WAVE_WAIT_S = 30.0  # at most this long for a starting query's first trigger before the next one starts anyway


class SharedQueries:
    """Shared streaming queries for SparkRuntime (see ``shared_query.py`` for the design)."""

    state_dir: Path
    units: dict[str, Any]
    groups: list[QueryGroup]
    abandoned_members: dict[str, str]  # store → why it is rebuilt: its shared query was abandoned (see plan_groups)
    app: Any
    topology: Any

    def _plan_groups(self) -> None:
        """Stores over the same stream share a query, unless one has a checkpoint of its own."""
        def solo(name: str) -> bool:
            if name in self.app.upgrades.pending:  # issue 20: a changed store is rebuilt by a query of its own
                return True
            return has_own_checkpoint(layout.checkpoint_dir(self.state_dir, name, self.app.current_generation(name)))

        def fingerprint(name: str) -> str | None:
            change = self.app.upgrades.plan.get(name)
            definition = change.new_definition if change is not None else None
            return str(definition["fingerprint"]) if definition and definition.get("fingerprint") else None

        per = int(getattr(self.topology, "stores_per_query", 1))
        self.groups = plan_groups(self.state_dir, [u.decl for u in self.units.values()], per, solo, fingerprint,
                                  self.abandoned_members)
        for g in self.groups:
            for name in g.names:
                if name not in g.detached:  # a detached member runs alone; the union keeps its operator
                    self.units[name].group = g
            log.info("stores %s share one streaming query (%s)%s", ", ".join(g.names), g.checkpoint,
                     f"; {', '.join(sorted(g.detached))} left it" if g.detached else "")

    def _members(self, u: Any) -> list[Any]:
        """The units a query failure or a pause of ``u``'s query concerns: its group's live members, or itself."""
        g = u.group
        if g is None:
            return [u]
        return [self.units[n] for n in g.names if n not in g.detached and n not in self._failed
                and self.units[n].group is g]

    def _detach(self, u: Any) -> None:
        """``u`` leaves its shared query for good: the sink skips it, it runs (and rebuilds) on its own."""
        g = u.group
        if g is not None:
            g.detached.add(u.name)
            u.group, u.query = None, None

    def _member_failed(self, store: str, exc: BaseException) -> None:
        """Called by a shared sink (in Spark's foreachBatch thread): the monitor handles the store alone."""
        with self._lock:
            self._member_failures[store] = exc

    def _handle_member_failures(self) -> None:
        with self._lock:
            failures, self._member_failures = self._member_failures, {}
        for store, exc in failures.items():
            u = self.units[store]
            if is_corruption(exc) and self.app.check_store_files(u.name, integrity=True):
                self._launch(u)  # _recover detaches it and rebuilds the damaged files alone
                continue
            self._failed.add(u.name)
            self._fail(classify_failure(exc), u.name)

    def _group_query(self, g: QueryGroup) -> Any:
        """The group's running query, started now if it is not running."""
        if g.query is not None and g.query.isActive:
            return g.query
        sink = SharedBatchSink(g, lambda store: self._writers.get(store, None), self._applied, self._member_failed)
        g.checkpoint.mkdir(parents=True, exist_ok=True)
        g.save()
        writer = (g.frame().writeStream.queryName(f"{self.app.application_id}-shared-{g.gid}-{os.getpid()}")
                  .outputMode(g.output_mode()).foreachBatch(sink)
                  .option("checkpointLocation", str(g.checkpoint))
                  .trigger(processingTime=self.topology.trigger))
        g.query = writer.start()
        for store in g.names:
            self._writers.prepare(store)  # while Spark runs the first batch
        return g.query

    def _await_wave(self) -> None:
        """Start queries in waves: wait (bounded) until fewer than MAX_STARTING have yet to run a first trigger."""
        deadline = time.monotonic() + WAVE_WAIT_S
        while not self._stopping.is_set() and time.monotonic() < deadline:
            starting = set()
            for u in self.units.values():
                q = u.query
                if q is None or u.started or u.retry_at is not None or u.name in self._failed:
                    continue
                u.started = self._first_trigger_done(u)
                if not u.started and q.isActive:
                    starting.add(id(q))
            if len(starting) < MAX_STARTING:
                return
            self._stopping.wait(0.2)
