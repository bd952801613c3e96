"""What one statement gives the PG wire: columns, rows, the command tag, notices, the Position it was read at."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.plan import StatementKind
from stores.iqv2.position import Position

from ..result import Result

__all__ = ["Answer", "answer_of"]


@dataclass
class Answer:
    """``columns`` None: no rows at all (SET, BEGIN …: NoData); ``[]`` rows with columns is an empty result."""

    columns: list[tuple[str, str]] | None
    rows: list[tuple[Any, ...]]
    tag: str
    position: Position | None = None
    notices: list[dict[str, str]] = field(default_factory=list)
    empty: bool = False


def answer_of(result: Result) -> Answer:
    """An engine Result as PG sends it; failed partitions of a partial result become a WARNING notice."""
    kind = result.statement
    if kind is StatementKind.SET:
        return Answer(None, [], "SET")
    rows = result.rows()
    tag = "EXPLAIN" if kind is StatementKind.EXPLAIN else f"SELECT {len(rows)}"
    notices = []
    failed = [p for p in result.partitions if p.failure_reason]
    if failed:
        detail = "\n".join(f"store {p.store} partition {p.partition}: {p.failure_reason}"
                           + (f" ({p.failure_message})" if p.failure_message else "") for p in failed)
        notices.append({"S": "WARNING", "V": "WARNING", "C": "01000",
                        "M": f"partial result: {len(failed)} store partition(s) could not answer; their rows are "
                             "missing", "D": detail})
    position = result.position if kind is StatementKind.SELECT else None
    return Answer(list(result.columns), rows, tag, position, notices)
