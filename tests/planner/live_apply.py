"""A reference subscriber engine: a Subscription plan's SQL run with DuckDB over a live feed's events, as
``planner.plan.Subscription`` documents it (what the gateway's engine does, written small for the tests)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb

from gateway.engine.arrow_rows import ScanRows
from planner.plan import Subscription
from stores.live import Changes, Progress, Rebuilt, ShownKeys, Snapshot


class Applier:
    """The answer a client of ``sub`` holds: rows by identity, kept by applying a feed's events."""

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub
        self.duck = duckdb.connect()
        self.rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.shown = ShownKeys()
        self.position = None
        self.deletes_sent = 0
        self.in_snapshot = False

    def _run(self, sql: str, spec: Any, rows: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
        if not rows:
            return []
        self.duck.register(self.sub.relation, ScanRows(spec, rows=list(rows)).to_arrow(False))
        try:
            return self.duck.execute(sql).fetchall()
        finally:
            self.duck.unregister(self.sub.relation)

    def _ident(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in self.sub.identity_at)

    def _show(self, answer: list[tuple[Any, ...]]) -> None:
        for r in answer:
            self.rows[self._ident(r)] = r
        if self.sub.membership:
            self.shown.add(self._ident(r) for r in answer)

    def _delete(self, identities: list[tuple[Any, ...]]) -> None:
        for ident in identities:
            self.rows.pop(ident, None)
            self.deletes_sent += 1

    def apply(self, ev: Any) -> None:
        if isinstance(ev, Rebuilt):
            self.rows.clear()
            self.shown.clear()
        elif isinstance(ev, Snapshot):
            if not self.in_snapshot:
                self.rows.clear()
                self.shown.clear()
                self.in_snapshot = True
            self._show(self._run(self.sub.sql, ev.spec, ev.rows))
            if ev.last:
                self.in_snapshot = False
                self.position = ev.position
        elif isinstance(ev, Changes):
            gone = [tuple(r) for r in self._run(self.sub.delete_sql, ev.spec, ev.deletes)]
            if self.sub.membership:
                gone = self.shown.take(gone)
                gone += self.shown.take(tuple(r) for r in self._run(self.sub.failing_sql, ev.spec, ev.upserts))
            self._delete(gone)
            self._show(self._run(self.sub.sql, ev.spec, ev.upserts))
            if ev.complete:
                self.position = ev.position
        elif isinstance(ev, Progress):
            self.position = ev.position

    def answer(self) -> Counter[tuple[Any, ...]]:
        """The rows as the SELECT shows them (identity columns it did not list are left out)."""
        width = len(next(iter(self.rows.values()))) - len(self.sub.added) if self.rows else 0
        return Counter(r[:width] for r in self.rows.values())
