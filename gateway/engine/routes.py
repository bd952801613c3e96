"""Which way a statement's answer is made: the one function that decides, and the routes it chooses from.

In the order a statement meets them in ``Gateway.sql``:

1. **point lane** (``takes_point_lane``): the text is a plain point lookup
   the planner has seen (``Planner.point_lane``), in the default session,
   with no wait. One SQLite read, no plan, no DuckDB; with a residual
   program (a filter or an aggregate over the one row) the evaluator runs it
   over that row. Anything out of the ordinary (a partition behind the bound,
   failing or not here, a bad parameter, too many rows) falls through to the
   general way below, which says why.
2. **static**: SET / SHOW / DESCRIBE / EXPLAIN read no store
   (``statements.py``).
3. After the scans were read (``reads.py``), ``choose_route``:

   - **fast path**: a key lookup whose rows are the store's own, projected
     (``Plan.fast_path``): no DuckDB;
   - **evaluator**: a simple residual (one store, or two joined on their
     keys; a filter, columns, arithmetic, scalar functions and CASE,
     count/sum/avg/min/max) over at most ``EVALUATOR_ROWS`` rows in memory
     (one a side for a join), once DuckDB's first answer taught its columns
     and agreed with ours (``residual/programs.py``); Arrow answers only
     where the result's types are ones rows reproduce exactly;
   - **DuckDB**: everything else. The scans are bound on a leased cursor and
     DuckDB runs the residual SQL; the answer is made as it is read
     (``answers.DuckAnswer``).
"""

from __future__ import annotations

import enum
from typing import Any

from planner.plan import Plan

from .reads import Reads
from .residual.evaluator import MAX_ROWS as EVALUATOR_ROWS
from .residual.programs import Programs
from .statement import Form, Statement

__all__ = ["Route", "takes_point_lane", "choose_route", "scan_rows", "EVALUATOR_ROWS"]

# Result types whose Arrow form rows built without DuckDB reproduce exactly (types.rows_table)
_ARROW_READY = frozenset({"BIGINT", "INTEGER", "DOUBLE", "VARCHAR", "BOOLEAN"})


class Route(enum.Enum):
    FAST_PATH = "fast path"
    EVALUATOR = "evaluator"
    DUCKDB = "duckdb"


def takes_point_lane(stmt: Statement) -> bool:
    """May the point lane answer? It knows no session settings and never waits."""
    return stmt.plain


def choose_route(plan: Plan, reads: Reads, stmt: Statement, programs: Programs) -> tuple[Route, Any]:
    """(the route, what it needs: the evaluator's result columns) for a SELECT whose scans were read."""
    one = len(reads.scans) == 1
    if plan.fast_path is not None and one:
        return Route.FAST_PATH, None
    program = plan.residual_program
    if program is not None and len(reads.scans) == program.sources and reads.in_memory and all(
            len(rows.rows) <= EVALUATOR_ROWS for _, rows in reads.scans):
        columns = programs.columns(program)
        if columns is not None and (stmt.form is not Form.ARROW or all(t in _ARROW_READY for _, t in columns)):
            return Route.EVALUATOR, columns
    return Route.DUCKDB, None


def scan_rows(reads: Reads) -> list[Any]:
    """Each scan's rows in hand, in plan order: what a residual program is evaluated over (one store's rows, or
    a join's left and right rows)."""
    return [rows.rows for _, rows in reads.scans]
