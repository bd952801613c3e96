"""Gateway errors as PostgreSQL ErrorResponse fields, with SQLSTATEs that stay stable.

PG clients branch on the SQLSTATE, not the text, so each gateway code maps to
the PostgreSQL class a client already handles: 42P01 unknown store, 42703
unknown column, 42601 syntax, 25006 a write, 57014 timeout or cancel, 53200
out of memory, 53300 a user over their share of statements, 28P01 bad password. The IQv2 states a retry can fix
(NOT_UP_TO_BOUND, rebalancing, not started, migrated) are 40001 — the class
drivers and pools already retry — with the IQv2 reason first in the message
and each store partition with its reason and position in DETAIL.
"""

from __future__ import annotations

from typing import Any

from ..engine.errors import GatewayError

__all__ = ["SQLSTATES", "RETRYABLE_SQLSTATE", "error_fields", "position_in"]

RETRYABLE_SQLSTATE = "40001"

SQLSTATES: dict[str, str] = {
    "UNKNOWN_STORE": "42P01",
    "UNKNOWN_SCHEMA": "3F000",
    "UNKNOWN_COLUMN": "42703",
    "SQL_SYNTAX_ERROR": "42601",
    "SQL_ERROR": "42000",
    "PLANNING_ERROR": "42000",
    "READ_ONLY": "25006",
    "STATEMENT_TIMEOUT": "57014",
    "STATEMENT_CANCELLED": "57014",
    "OUT_OF_MEMORY": "53200",
    "TOO_MANY_STATEMENTS": "53300",
    "MEMORY_LIMIT_EXCEEDED": "53200",
    "UNAUTHORIZED": "28P01",
    "FORBIDDEN_FUNCTION": "42501",
    "FORBIDDEN": "42501",
    "TYPE_MISMATCH": "42804",
    "PARAMETER_ERROR": "42P02",
    "INVALID_SETTING": "22023",
    "INVALID_POSITION": "22023",
    "INVALID_PARTITION": "22023",
    "UNKNOWN_TOPIC": "22023",
    "TABLE_SCAN_DISABLED": "54000",
    "ROW_LIMIT_EXCEEDED": "54000",
    "REQUEST_TOO_LARGE": "54000",
    "RESPONSE_TOO_LARGE": "54000",
    "STATEMENT_TOO_LARGE": "54000",
    "NOT_SUPPORTED": "0A000",
    "UNSUPPORTED": "0A000",
    "EXECUTION_ERROR": "22000",
    "PARTITION_FAILURE": "55000",
    "STREAMS_STOPPED": "55000",
    "STATE_STORE_NOT_AVAILABLE": "55000",
    "COLUMN_NOT_YET_AVAILABLE": "55000",
    "NOT_UP_TO_BOUND": RETRYABLE_SQLSTATE,
    "NO_COMMON_POSITION": RETRYABLE_SQLSTATE,
    "STREAMS_REBALANCING": RETRYABLE_SQLSTATE,
    "STREAMS_NOT_STARTED": RETRYABLE_SQLSTATE,
    "STATE_STORE_MIGRATED": RETRYABLE_SQLSTATE,
    "BAD_REQUEST": "08P01",
    "CANT_CHANGE_RUNTIME_PARAM": "55P02",
    "UNKNOWN_PARAMETER": "42704",
    "UNKNOWN_PREPARED": "26000",
    "IN_FAILED_TRANSACTION": "25P02",
    "INTERNAL": "XX000",
    # live answers (issue 46): where to resume is in DETAIL (pg/live.py)
    "STREAM_REQUIRED": "0A000",
    "SUBSCRIPTION_TOO_OLD": "55000",
    "SUBSCRIBER_TOO_SLOW": "55000",
    "INVALID_RESUME_POSITION": "22023",
    "RESUME_POSITION_AHEAD": "55000",
    "SUBSCRIPTION_UNAVAILABLE": "55000",
    "SUBSCRIPTION_CLOSED": "57P01",
    "TOO_MANY_SUBSCRIPTIONS": "53300",
    "DUPLICATE_CURSOR": "42P03",
    "UNKNOWN_CURSOR": "34000",
}


def position_in(sql: str, line: int | None, col: int | None) -> int | None:
    """PostgreSQL's error position: a 1-based character index into the statement text."""
    if line is None or col is None:
        return None
    lines = sql.split("\n")
    if not 1 <= line <= len(lines):
        return None
    return sum(len(x) + 1 for x in lines[:line - 1]) + col


def _detail(partitions: list[dict[str, Any]]) -> str | None:
    if not partitions:
        return None
    parts = []
    for p in partitions:
        pos = p.get("position")
        parts.append(f"store {p.get('store')} partition {p.get('partition')}: {p.get('failure_reason')}"
                     + (f" at position {pos}" if pos else "")
                     + (f" ({p.get('failure_message')})" if p.get("failure_message") else "")
                     + ("; retryable" if p.get("retryable") else ""))
    return "\n".join(parts)


def error_fields(exc: GatewayError, sql: str | None = None) -> dict[str, str]:
    """The ErrorResponse fields of a gateway error: severity, SQLSTATE, message, detail, hint, position."""
    state = SQLSTATES.get(exc.code)
    if state is None:
        state = RETRYABLE_SQLSTATE if exc.retryable else ("XX000" if exc.http_status >= 500 else "42000")
    fields = {"S": "ERROR", "V": "ERROR", "C": state, "M": f"{exc.code}: {exc.message}"}
    detail = _detail(exc.partitions)
    if detail:
        fields["D"] = detail
    if state == RETRYABLE_SQLSTATE:
        fields["H"] = ("retry the statement; SET wait_for_bound_ms = <ms> makes the server wait for the stores "
                       "to reach the bound instead")
    pos = position_in(sql, exc.line, exc.col) if sql else None
    if pos is not None:
        fields["P"] = str(pos)
    elif exc.line is not None:
        fields["M"] += f" (line {exc.line}, column {exc.col})"
    return fields
