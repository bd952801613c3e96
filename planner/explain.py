"""EXPLAIN text: the IQv2 requests per store scan, then the residual SQL.

Line-oriented and stable, because the planner's fixtures assert on it and a
user reads it to see whether a predicate reached the store.
"""

from __future__ import annotations

from stores.iqv2.position import PositionBound
from stores.iqv2.request import StateQueryRequest

from .plan import Plan, StatementKind, StoreScan, StreamScan

__all__ = ["explain_text"]


def _bound(bound: PositionBound) -> str:
    return "unbounded" if bound.is_unbounded() else bound.position.to_json()


def _request(r: StateQueryRequest) -> str:
    parts = "all" if r.partitions is None else "[" + ", ".join(str(p) for p in sorted(r.partitions)) + "]"
    extra = (" requireActive" if r.active_required else "") + (" executionInfo" if r.execution_info_enabled else "")
    query = repr(r.query).replace("\x00", "\\x00")  # an exact exclusive string bound ends in NUL
    return f"  {query} partitions={parts} bound={_bound(r.position_bound)}{extra}"


def _scan(scan: StoreScan) -> list[str]:
    n = scan.store_partitions
    what = f"{scan.store_kind or 'unknown kind'}, {n} partition{'' if n == 1 else 's'}" if n else (scan.store_kind or "?")
    head = f"scan {scan.relation}: store {scan.store} ({what})"
    flags = []
    if scan.full_scan:
        flags.append("full scan")
    if scan.order is not None:
        flags.append(f"order={scan.order.value}")
    if scan.limit is not None:
        flags.append(f"limit={scan.limit}")
    if scan.include_failures:
        flags.append("include failures")
    lines = [head + (" [" + ", ".join(flags) + "]" if flags else "")]
    if not scan.requests:
        lines.append("  no requests: the pushed predicates cannot match any row")
    lines += [_request(r) for r in scan.requests]
    return lines


def _stream(scan: StreamScan) -> list[str]:
    n = scan.partitions
    what = f"topic {scan.topic}" + (f", {n} partition{'' if n == 1 else 's'}" if n else "")
    flags = (["full scan"] if scan.full_scan else []) + (["include failures"] if scan.include_failures else [])
    lines = [f"scan {scan.relation}: stream {scan.stream} ({what})" + (" [" + ", ".join(flags) + "]" if flags else "")]
    if scan.query.empty:
        lines.append("  no records: the pushed predicates cannot match any record")
    else:
        lines.append(f"  {scan.query!r} from the earliest offset to the end offsets at the start, "
                     f"bound={_bound(scan.bound)}")
    return lines


def explain_text(plan: Plan) -> str:
    """The EXPLAIN text of a plan (an EXPLAIN plan's inner plan is explained)."""
    if plan.kind is StatementKind.EXPLAIN and plan.inner is not None:
        if plan.explain is not None:
            return plan.explain
        plan = plan.inner
    if plan.kind is StatementKind.SHOW_TABLES:
        return "show tables"
    if plan.kind is StatementKind.DESCRIBE:
        return f"describe store {plan.describe}"
    if plan.kind is StatementKind.SET:
        return "set " + ", ".join(f"{k}={v!r}" for k, v in plan.settings.items())
    lines: list[str] = []
    for scan in plan.scans:
        lines += _scan(scan)
    for stream in plan.streams:
        lines += _stream(stream)
    for key in plan.system_tables:
        lines.append(f"system table {key}: from the store catalog")
    if plan.fast_path is not None:
        lines.append("fast path: " + ", ".join(plan.fast_path))
    lines.append("residual:")
    lines.append("  " + (plan.residual_sql or ""))
    return "\n".join(lines)
