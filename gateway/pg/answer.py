"""What one statement gives the PG wire: columns, rows, the command tag, notices, the Position it was read at."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from planner.plan import StatementKind
from stores.iqv2.position import Position

from ..engine.result import Result

__all__ = ["Answer", "answer_of"]


@dataclass
class Answer:
    """``columns`` None: no rows at all (SET, BEGIN …: NoData); ``[]`` rows with columns is an empty result.

    A streamed SELECT (issue 14) has ``chunks``: its rows are sent as they come, a chunk at a time, and
    ``rows`` holds only those of a chunk not sent yet (an Execute with a row limit stopped inside it);
    ``tag`` is set once the last row went out, and ``result`` is closed then (or on ``close``).
    """

    columns: list[tuple[str, str]] | None
    rows: list[tuple[Any, ...]]
    tag: str
    position: Position | None = None
    notices: list[dict[str, str]] = field(default_factory=list)
    empty: bool = False
    chunks: Iterator[list[tuple[Any, ...]]] | None = None
    result: Result | None = None
    count: int = 0
    bytes: int = 0  # DataRow bytes sent so far (the response-size budget)
    failed: str | None = None  # the code of the error that ended it after rows began to go out
    on_close: Any = None  # called once when it closes (the session's audit line), with the answer

    @staticmethod
    def code_of(exc: BaseException) -> str:
        code = getattr(exc, "code", None)
        return code if isinstance(code, str) else "INTERNAL"

    @property
    def done(self) -> bool:
        return self.chunks is None

    def next_rows(self) -> bool:
        """Pull the next chunk into ``rows``; False (and the tag set, the result closed) at the end."""
        assert self.chunks is not None
        try:
            chunk = next(self.chunks, None)
        except BaseException as exc:
            self.failed = self.failed or self.code_of(exc)
            self.close()
            raise
        if chunk is None:
            self.tag = f"SELECT {self.count}"
            self.close()
            return False
        self.rows = chunk
        return True

    def close(self) -> None:
        self.chunks = None
        if self.result is not None:
            result, self.result = self.result, None
            result.close()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close(self)


def answer_of(result: Result) -> Answer:
    """An engine Result as PG sends it; failed partitions of a partial result become a WARNING notice.

    A SELECT's rows stay in the result, to be sent chunk by chunk (``Answer.chunks``).
    """
    kind = result.statement
    if kind is StatementKind.SET:
        return Answer(None, [], "SET")
    if kind is StatementKind.SELECT:
        rows: list[tuple[Any, ...]] = []
        tag = ""
    else:
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
    if kind is StatementKind.SELECT:
        return Answer(list(result.columns), rows, tag, position, notices, chunks=result.iter_batches(),
                      result=result)
    return Answer(list(result.columns), rows, tag, position, notices)
