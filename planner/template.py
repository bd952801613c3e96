"""Analysed statements, ready to bind: what the plan cache holds.

A template depends only on the statement text and the catalog entries it
read (``deps``); parameter values, the position bound and session switches
are applied by ``bind`` on every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stores.catalog.schema import StoreSpec
from stores.catalog.streams import StreamSpec
from stores.iqv2.query import ResultOrder

from .literals import ValueRef
from .plan import StatementKind
from .predicates import Constraint
from .residual_program import Program

__all__ = ["ScanTemplate", "Template", "SystemTime", "NO_LANE_YET"]

NO_LANE_YET = object()  # a cached template's lane not looked for yet (None: it has none): planning.Planner


@dataclass(frozen=True)
class SystemTime:
    """A versioned store's ``FOR SYSTEM_TIME`` clause (SQL:2011 system-versioned tables).

    ``kind``: ``as_of`` (one value), ``from_to`` (``FROM a TO b``: a version counts if it overlaps
    [a, b)), ``between`` (``BETWEEN a AND b``: overlaps [a, b]) or ``all`` (no values). Without a
    clause the table is the current versions.
    """

    kind: str
    values: tuple[ValueRef, ...] = ()


@dataclass
class ScanTemplate:
    """One store reference, with what its scope lets the planner push into IQv2 (or one stream reference, whose
    ``spec`` is a StreamSpec and ``store`` its name: ``planner/streams.py``)."""

    index: int
    relation: str
    store: str
    spec: StoreSpec | StreamSpec
    alias: str
    start: int | None
    constraints: list[Constraint] = field(default_factory=list)
    system_time: SystemTime | None = None
    all_consumed: bool = False
    order: ResultOrder | None = None
    limit: ValueRef | None = None
    offset: ValueRef | None = None
    include_failures: bool = False
    fast_path: tuple[str, ...] | None = None


@dataclass
class Template:
    kind: StatementKind
    explain: bool = False
    explain_position: bool = False  # EXPLAIN POSITION: the Positions the query would read at, not its plan
    scans: tuple[ScanTemplate, ...] = ()
    chunks: tuple[str | int, ...] = ()
    slot_keys: tuple[int | str, ...] = ()
    position_json: str | None = None
    param_mode: str | None = None
    param_count: int = 0
    param_names: frozenset[str] = frozenset()
    deps: dict[str, StoreSpec] = field(default_factory=dict)
    describe: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    system_tables: tuple[str, ...] = ()  # keys of planner.systables.SYSTEM_TABLES the residual SQL reads
    program: Program | None = None  # the residual as an expression tree, when it is simple (residual_program.py)
    long_chains: bool = False  # an AND/OR chain was rebuilt balanced (rewrites.balance_chains): see Plan.long_chains
    subscription: Any = None  # SUBSCRIBE: its SubscribeTemplate (subscribe.py)
    streams: tuple[ScanTemplate, ...] = ()  # the stream references, as ``scans`` holds the stores' (streams.py)
    stream_deps: dict[str, StreamSpec] = field(default_factory=dict)

    def slot_values(self, params: Any) -> tuple[Any, ...]:
        """The parameter values in placeholder order: what a residual program reads (``Plan.residual_values``)."""
        return tuple(params[k] for k in self.slot_keys) if params else ()
