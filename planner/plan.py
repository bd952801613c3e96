"""The Plan: what the planner hands the gateway (docs/DESIGN.md §4).

A plan names, for each store reference in the statement, the IQv2 requests
that fetch the rows (``StoreScan``), and the residual SQL DuckDB runs over the
scans' relations. The planner never executes anything.

Each scan's relation has the store's columns (``StoreSpec.columns()``) plus
the pseudo-columns ``_partition``, ``_position``, ``_failure_reason``,
``_failure_message``: one row per data row, and one row (data columns NULL)
per failed partition. The residual SQL sees only data rows unless the
statement itself names ``_failure_reason``/``_failure_message``
(``StoreScan.include_failures``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from stores.catalog.streams import StreamQuery
from stores.iqv2.position import PositionBound
from stores.iqv2.query import ResultOrder
from stores.iqv2.request import StateQueryRequest

__all__ = ["StatementKind", "StoreScan", "StreamScan", "Plan", "Subscription", "SubscriptionKeys", "PSEUDO_COLUMNS",
           "FAILURE_COLUMNS"]

PSEUDO_COLUMNS = ("_partition", "_position", "_failure_reason", "_failure_message")
FAILURE_COLUMNS = ("_failure_reason", "_failure_message")


class StatementKind(str, enum.Enum):
    SELECT = "select"
    EXPLAIN = "explain"
    SHOW_TABLES = "show_tables"
    DESCRIBE = "describe"
    SET = "set"
    SUBSCRIBE = "subscribe"


@dataclass(frozen=True, slots=True)
class StoreScan:
    """The rows of one store reference.

    ``requests`` all run; their per-partition results are concatenated into one
    relation named ``relation``. When ``order`` is set, rows are merged in key
    order (then window start / valid_from) across partitions; ``limit`` is
    applied after that merge and is only set when nothing after the scan can
    drop rows.
    """

    relation: str
    store: str
    requests: tuple[StateQueryRequest, ...]
    order: ResultOrder | None = None
    limit: int | None = None
    include_failures: bool = False
    full_scan: bool = False
    # Added for EXPLAIN and callers that only hold the plan: the store's kind
    # (StoreKind value) and partition count at planning time.
    store_kind: str | None = None
    store_partitions: int | None = None


@dataclass(frozen=True, slots=True)
class StreamScan:
    """The records of one stream reference, read from the stream's log up to its end at the statement's start.

    ``query`` holds the pushed partition, offset and rowtime predicates (pre-filters: the residual SQL still
    decides); ``bound`` is the statement's position bound, which the log must have reached. The relation has
    the stream's columns, its record columns (``rowtime``, ``partition``, ``offset``, [``headers``]) and the
    pseudo-columns, one row per record and one per failed partition, as a store scan's relation.
    """

    relation: str
    stream: str
    topic: str
    query: StreamQuery
    bound: PositionBound = PositionBound.unbounded()
    include_failures: bool = False
    full_scan: bool = False
    partitions: int | None = None  # the topic's partition count when the stream was declared (for EXPLAIN)


@dataclass(frozen=True, slots=True)
class SubscriptionKeys:
    """Which rows of the store a subscription can ever show, from its pushed key predicates (a superset: the SQL
    still decides): any of ``keys``, or a key in one of the inclusive ``ranges`` (None: open), in
    ``partitions`` (None: all). ``keys`` and ``ranges`` both None: every key. Values are the planner's key
    values, as IQv2 requests carry them."""

    keys: tuple[Any, ...] | None = None
    ranges: tuple[tuple[Any, Any], ...] | None = None
    partitions: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    """A live answer of one store: the rows of ``sql`` over a relation of the store's rows, kept up to date.

    The engine registers a relation of store rows (the shape of a pull query's scan relation: the store's
    columns, ``_partition``, ``_position``, ``_failure_reason`` and ``_failure_message`` NULL) under
    ``relation`` and runs:

    - ``sql`` over the snapshot's rows, and over each batch's upserted rows: the subscription's rows for them
      (the SELECT's columns, then the store's ``added`` identity columns it does not list, so every row says
      which store row it shows: ``identity_at`` are the positions of the ``identity`` columns in it);
    - ``delete_sql`` over each batch's deleted rows (identity columns set, the rest NULL) gives the identities
      (as the answer's rows show them) to send as deletes: all of them, or with a filter on identity columns
      (and ``_partition``) only, those the filter keeps (a row it drops was never shown);
    - without ``membership`` that is all: a filter on identity columns decides once per row, so an upserted row
      it drops was never shown either;
    - with ``membership`` (the filter reads value columns: an update can take a row out of the answer) the
      engine keeps the identities it has shown (``stores.live.ShownKeys``: bounded; past its budget it answers
      "maybe", which sends a delete of a row the subscriber may not hold, never misses one): ``failing_sql``
      over the upserted rows gives the identities the filter now drops, sent as deletes when shown, and
      ``delete_sql``'s identities are sent only when shown.

    ``snapshot``/``progress``: the WITH options (EMIT CHANGES: both true). ``resume``: AS OF POSITION: with a
    snapshot the Position it must be at or past; without, the Position to continue after. ``keys``: rows the
    SQL can never keep are not worth sending (``stores.live`` feeds take it as their key filter).
    """

    store: str
    relation: str
    sql: str
    identity: tuple[str, ...]
    identity_at: tuple[int, ...]
    added: tuple[str, ...]
    membership: bool
    failing_sql: str | None
    delete_sql: str | None
    snapshot: bool
    progress: bool
    resume: Any  # stores.iqv2.position.Position | None
    keys: SubscriptionKeys | None
    emit_changes: bool
    store_kind: str
    full_scan: bool


@dataclass(frozen=True, slots=True)
class Plan:
    """``kind`` says which other fields matter.

    SELECT: ``scans`` + ``residual_sql`` (DuckDB SQL over the scans' relations).
    ``fast_path`` (when not None) lists, for a single scan of key lookups with
    nothing else to do, the store columns to return in order: the gateway may
    skip DuckDB and build rows straight from the results.
    EXPLAIN: ``explain`` holds the text; ``inner`` the explained plan; ``explain_position`` an EXPLAIN POSITION
    (the engine reads the inner plan's Positions and answers them as rows).
    SHOW_TABLES / DESCRIBE: ``describe`` names the store for DESCRIBE.
    SET: ``settings`` holds the validated new session settings.
    SUBSCRIBE: ``subscription`` (SUBSCRIBE … and SELECT … EMIT CHANGES).
    """

    kind: StatementKind
    scans: tuple[StoreScan, ...] = ()
    residual_sql: str | None = None
    # SELECT: the statement has an AND or OR chain of rewrites.BALANCE_MIN_TERMS terms or more. DuckDB's
    # expression rewriter is quadratic in such a chain when its terms are themselves AND/OR (2,000
    # ``(k = … AND v >= …)`` terms: 10 s; 2.5 s for 1,000), so the gateway runs it without that rewriter.
    long_chains: bool = False
    position_bound: PositionBound = PositionBound.unbounded()
    fast_path: tuple[str, ...] | None = None
    explain: str | None = None
    explain_position: bool = False
    inner: Plan | None = None
    describe: str | None = None
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # SELECT: system tables (information_schema, pg_catalog) the residual SQL reads, as keys of
    # planner.systables.SYSTEM_TABLES; the gateway registers each as planner.systables.relation_name(key).
    system_tables: tuple[str, ...] = ()
    # SELECT over one store with a simple residual (planner/residual_program.py): the residual as a program the
    # gateway may evaluate over the scan's rows instead of DuckDB, and the parameter values its slots refer to.
    residual_program: Any = None
    residual_values: tuple[Any, ...] = ()
    subscription: Subscription | None = None
    # SELECT: the streams the statement reads (pull queries on streams), each a relation like a store scan's
    streams: tuple[StreamScan, ...] = ()
