"""A subscription's SQL applied to a live feed's events: the change messages its subscriber receives.

A feed (``stores.live``) hands out the store's rows as they change: a snapshot, then each batch's upserted
and deleted rows. The subscription's SQL (``planner.plan.Subscription``) is run by DuckDB over a relation of
those rows exactly as a pull query's residual SQL runs over a scan's rows, so the rows a subscriber holds are
the pull query's answer at every progress Position. What the SQL makes of them becomes messages: ``insert``
(a snapshot row), ``upsert`` (a row's new contents), ``delete`` (a row that left the answer: its identity
columns set, the others None), ``progress`` (a whole answer up to a Position), and ``reset`` (the store was
rebuilt into a new generation: drop every row held; the new generation's snapshot follows, with ``columns``).

Why the SQL runs per event rather than once over the store: a change touches a few rows, and the SQL is row by
row (the planner refuses aggregates, joins and sorts), so a batch's rows alone decide the rows it changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import duckdb
import pyarrow as pa

from planner.plan import Subscription as SubscriptionPlan
from stores.catalog.schema import StoreSpec
from stores.iqv2.position import Position

from ..arrow_rows import ScanRows
from ..duck import duck_error
from ..errors import SubscriptionError

__all__ = ["Change", "Applier", "subscription_columns", "flat_rows", "INSERT", "UPSERT", "DELETE", "PROGRESS", "RESET",
           "OPS"]

INSERT, UPSERT, DELETE, PROGRESS, RESET = "insert", "upsert", "delete", "progress", "reset"
OPS = (INSERT, UPSERT, DELETE, PROGRESS, RESET)

Row = tuple[Any, ...]
Columns = list[tuple[str, str]]


class Change(NamedTuple):
    """One message of a live answer: ``op``, the Position it is at, and the row (None for progress and reset).

    ``columns``: set on ``reset`` only (a rebuilt store's rows may have other columns from then on).
    """

    op: str
    position: Position
    row: Row | None = None
    columns: Columns | None = None


def subscription_columns(cursor: duckdb.DuckDBPyConnection, plan: SubscriptionPlan, spec: StoreSpec) -> Columns:
    """The (name, DuckDB type) columns the subscription's rows have: its SQL bound over an empty relation."""
    cursor.register(plan.relation, ScanRows(spec).to_arrow(False))
    try:
        rel = cursor.sql(plan.sql)
        return [(str(n), str(t)) for n, t in zip(rel.columns, rel.types)]
    except duckdb.Error as exc:
        raise duck_error(exc, None, {plan.relation: plan.store}) from exc
    finally:
        cursor.unregister(plan.relation)


def flat_rows(changes: list[Change], columns: Columns) -> list[Row]:
    """Messages as rows of one fixed shape, ``(op, position JSON, *columns)`` (None where a message has no row):
    what a PG COPY or cursor and a DB-API cursor hand out. A rebuilt store whose rows have other columns cannot
    go on in that shape: the subscription ends, to be taken again with a snapshot."""
    empty = (None,) * len(columns)
    out = []
    for c in changes:
        if c.op == RESET and c.columns is not None and list(c.columns) != list(columns):
            raise SubscriptionError("the store was rebuilt into a new version whose rows have other columns, and "
                                    "these rows keep one shape: subscribe again (with a snapshot)",
                                    code="SUBSCRIPTION_UNAVAILABLE")
        out.append((c.op, c.position.to_json(), *(empty if c.row is None else c.row)))
    return out


class Applier:
    """One subscription's SQL over the events of its feed, as ``planner.plan.Subscription`` documents it.

    ``shown`` remembers the identities a filter on value columns has let through (``membership``), so a row
    that leaves the answer is deleted exactly when it was shown (``stores.live.ShownKeys``, bounded).
    """

    def __init__(self, plan: SubscriptionPlan, columns: Columns, shown: Any,
                 replan: Callable[[], tuple[SubscriptionPlan, Columns]]) -> None:
        self.plan = plan
        self.columns = columns
        self.shown = shown
        self._replan = replan

    # -- one event --------------------------------------------------------------------------------------------
    def changes(self, event: Any, cursor: duckdb.DuckDBPyConnection, watch: Any = None) -> list[Change]:
        """The messages ``event`` (a stores.live event) gives this subscription; DuckDB errors as gateway errors."""
        kind = event.kind
        try:
            if kind == "snapshot":
                rows = self._run(cursor, self.plan.sql, event.spec, event.rows, None, "up")
                if self.plan.membership:
                    self.shown.add(self._ident(r) for r in rows)
                at = event.position
                return [Change(INSERT, at, r) for r in rows]
            if kind == "changes":
                return self._batch(event, cursor)
            if kind == "progress":
                return [Change(PROGRESS, event.position)]
            if kind == "rebuilt":
                self.plan, self.columns = self._replan()
                self.shown.clear()
                return [Change(RESET, event.position, None, list(self.columns))]
        except duckdb.Error as exc:
            raise duck_error(exc, watch, {self.plan.relation: self.plan.store}) from exc
        raise ValueError(f"unknown live event kind {kind!r}")  # pragma: no cover - stores.live has four

    def _batch(self, event: Any, cursor: duckdb.DuckDBPyConnection) -> list[Change]:
        plan = self.plan
        at = event.position
        memo = event.memo
        shared = None
        if not plan.membership:  # the messages depend on the batch and the SQL alone: made once, shared read-only
            shared = f"msgs:{plan.sql}\x00{plan.delete_sql}"
            got = memo.get(shared)
            if got is not None:
                return got
        gone = [tuple(r) for r in self._run(cursor, plan.delete_sql or "", event.spec, event.deletes, memo, "del")]
        if plan.membership:
            gone = self.shown.take(gone)
            if plan.failing_sql:
                gone += self.shown.take(tuple(r) for r in self._run(cursor, plan.failing_sql, event.spec,
                                                                     event.upserts, memo, "up"))
        rows = self._run(cursor, plan.sql, event.spec, event.upserts, memo, "up")
        if plan.membership:
            self.shown.add(self._ident(r) for r in rows)
        out = [Change(DELETE, at, self._deleted(ident)) for ident in gone]
        out += [Change(UPSERT, at, r) for r in rows]
        if shared is not None:
            memo[shared] = out
        return out

    # -- helpers --------------------------------------------------------------------------------------------
    def _run(self, cursor: duckdb.DuckDBPyConnection, sql: str, spec: StoreSpec, rows: tuple[Row, ...],
             memo: dict[str, Any] | None, side: str) -> list[Row]:
        """``sql`` over ``rows`` (store rows as a feed has them). A batch's event is shared by every feed that
        follows the whole store, so its Arrow relation and each distinct SQL's answer are made once per batch
        (``memo``); the answers are read-only lists."""
        if not rows:
            return []
        key = f"{side}:{sql}"
        if memo is not None:
            got = memo.get(key)
            if got is not None:
                return got
            table = memo.get(side)
            if table is None:
                table = memo[side] = _relation(spec, rows)
        else:
            table = _relation(spec, rows)
        relation = self.plan.relation
        cursor.register(relation, table)
        try:
            out = cursor.execute(sql).fetchall()
        finally:
            cursor.unregister(relation)
        if memo is not None:
            memo[key] = out
        return out

    def _ident(self, row: Row) -> Row:
        return tuple(row[i] for i in self.plan.identity_at)

    def _deleted(self, ident: Row) -> Row:
        row: list[Any] = [None] * len(self.columns)
        for i, at in enumerate(self.plan.identity_at):
            row[at] = ident[i]
        return tuple(row)


def _relation(spec: StoreSpec, rows: tuple[Row, ...]) -> pa.Table:
    return ScanRows(spec, rows=list(rows)).to_arrow(False)
