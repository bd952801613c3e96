"""Streams in SQL: the names a stream reference offers, what of its WHERE reaches the read, and its scan.

A stream is a relation of its topic's records (``stores.catalog.streams``).
It is planned like a store reference (the same scopes, the same residual
wrapping), with these differences:

- its pseudo-columns are the stores' (``_partition``, ``_position``, the
  failure columns) and its record columns (``rowtime``, ``partition``,
  ``offset``, ``headers``): none is in ``SELECT *``, each is there when named;
- what is pushed into the read: ``partition`` (and ``_partition``) equalities
  and ranges choose the partitions, ``offset`` ranges cut each partition's
  offsets, ``rowtime`` ranges its times (Kafka seeks the start by time; the
  rest is filtered as read). Key and value predicates stay in the residual
  SQL: a key's partition depends on how its producer serialized it, which the
  stream's declared key type does not say;
- a read with nothing pushed is a whole-topic scan: a table scan, refused when
  table scans are off; LIMIT, ORDER BY and the fast path are never pushed (the
  read stops when DuckDB stops asking for rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stores.catalog.schema import SqlType
from stores.catalog.streams import StreamQuery, StreamSpec
from stores.iqv2.position import PositionBound

from .errors import TableScanDisabledError
from .literals import NO_MATCH, NOT_PUSHABLE
from .plan import PSEUDO_COLUMNS, StreamScan
from .positions import line_col
from .requests import Binder
from .template import ScanTemplate

__all__ = ["is_stream", "pseudo_columns", "stream_role", "bind_stream", "scan_disabled"]

_ROLES = {"partition": "partition", "_partition": "partition", "offset": "offset", "rowtime": "rowtime"}
_TARGETS = {"partition": SqlType.INTEGER, "offset": SqlType.BIGINT, "rowtime": SqlType.TIMESTAMP}


def is_stream(spec: Any) -> bool:
    return isinstance(spec, StreamSpec)


def pseudo_columns(spec: Any) -> tuple[str, ...]:
    """The names a reference offers beyond ``SELECT *``: the pseudo-columns, and a stream's record columns."""
    if isinstance(spec, StreamSpec):
        return PSEUDO_COLUMNS + tuple(c.name for c in spec.record_columns())
    return PSEUDO_COLUMNS


def stream_role(column: str) -> str | None:
    """The pushed role of a stream column (lower case), or None: it stays in the residual SQL only."""
    return _ROLES.get(column)


class _Range:
    __slots__ = ("lo", "hi", "empty")

    def __init__(self) -> None:
        self.lo: Any = None
        self.hi: Any = None
        self.empty = False

    def add(self, op: str, v: Any) -> None:
        if v is NO_MATCH:
            self.empty = True
            return
        if op in (">=", "="):
            self.lo = v if self.lo is None else max(self.lo, v)
        if op in ("<=", "="):
            self.hi = v if self.hi is None else min(self.hi, v)
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            self.empty = True

    def pair(self) -> tuple[Any, Any]:
        return self.lo, self.hi


def bind_stream(sql: str, t: ScanTemplate, params: Any, bound: PositionBound,
                session: Mapping[str, Any]) -> StreamScan:
    """The scan of one stream reference: its pushed predicates bound to values (``StreamQuery``)."""
    spec: StreamSpec = t.spec  # type: ignore[assignment]
    b = Binder(sql, t, params)
    ranges = {role: _Range() for role in _TARGETS}
    named: set[int] | None = None
    for c in t.constraints:
        rng = ranges[c.column]
        if c.kind == "eq":
            if c.column == "partition":
                vals = {p for p in (b.partition(r, len(c.values)) for r in c.values) if p is not NO_MATCH}
                named = vals if named is None else named & vals
                continue
            coerced = [b.value(r, _TARGETS[c.column], "=", c.column, "column", len(c.values))[0] for r in c.values]
            if any(v is NOT_PUSHABLE for v in coerced):
                continue
            vals = [v for v in coerced if v is not NO_MATCH]
            if not vals:
                rng.empty = True
            else:
                rng.add(">=", min(vals))
                rng.add("<=", max(vals))
            continue
        for op, ref in c.bounds:
            v, op2 = b.value(ref, _TARGETS[c.column], op, c.column, "column")
            if v is NOT_PUSHABLE:
                continue
            rng.add(op2 + "=" if op2 in (">", "<") else op2, v)  # no exact successor: inclusive
    empty = (any(r.empty for r in ranges.values()) or (named is not None and not named)
             or any(r.hi is not None and r.hi < 0 for r in (ranges["partition"], ranges["offset"])))
    query = StreamQuery(
        partitions=None if named is None else frozenset(named),
        partition_range=ranges["partition"].pair(),
        offsets=ranges["offset"].pair(),
        rowtime=ranges["rowtime"].pair(),
        empty=empty,
    )
    return StreamScan(relation=t.relation, stream=t.store, topic=spec.topic, query=query, bound=bound,
                      include_failures=t.include_failures, full_scan=not query.pushed, partitions=spec.partitions)


def scan_disabled(sql: str, t: ScanTemplate) -> TableScanDisabledError:
    """The error for a whole-topic read when table scans are off."""
    line, col = line_col(sql, t.start) if t.start is not None else (None, None)
    return TableScanDisabledError(
        f"query on stream {t.store} reads every record of its topic (no usable predicate on partition, offset or "
        "rowtime); table scans are disabled: add WHERE partition = …, offset >= … or rowtime >= …, "
        "or SET table_scans = true", line=line, col=col)
