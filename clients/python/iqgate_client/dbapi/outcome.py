"""What one executed statement gives a cursor, whichever transport ran it.

The in-process and the remote transport both produce an ``Outcome``, so the
cursor (the PEP 249 face) is written once and cannot drift between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..position import Position

__all__ = ["Outcome", "PartitionInfo", "Transport", "CursorHost", "ROWLESS_STATEMENTS", "LIVE_COLUMNS"]

#: the first columns of a live answer's rows (SUBSCRIBE): what happened (insert, upsert, delete, progress, reset)
#: and the Position as JSON; the subscription's own columns follow
LIVE_COLUMNS = [("iq_op", "VARCHAR"), ("iq_position", "VARCHAR")]

# Statements that produce no result set: PEP 249 wants description None for them.
ROWLESS_STATEMENTS = frozenset({"set"})


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One store partition a statement read: failed (reason, message) or not, and its position.

    The in-process transport hands out the engine's ``PartitionOutcome``,
    which has the same fields; either way a caller reads the same attributes.
    """

    store: str
    partition: int
    failure_reason: str | None
    failure_message: str | None
    position: Position | None

    @property
    def is_failure(self) -> bool:
        return self.failure_reason is not None

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "partition": self.partition, "failure_reason": self.failure_reason,
                "failure_message": self.failure_message,
                "position": None if self.position is None else self.position.to_json_map()}


@dataclass(slots=True)
class Outcome:
    """Columns as ``(name, type_name)``; rows as tuples of Python values; the position the rows were read at.

    ``partitions`` holds ``PartitionInfo`` (remote) or the engine's ``PartitionOutcome`` (in-process).
    """

    statement: str
    columns: list[tuple[str, str]]
    rows: list[tuple[Any, ...]]
    position: Position
    partitions: list[Any] = field(default_factory=list)
    settings: Mapping[str, Any] | None = None
    #: rows still coming after ``rows`` (a large result the transport streams chunk by chunk); fetching from
    #: it may raise the statement's error (row limit, timeout) after earlier rows were handed out
    more: Iterator[list[tuple[Any, ...]]] | None = None
    #: ends the statement when the cursor is done with it before ``more`` ran out
    close: Callable[[], None] | None = None
    #: a live answer (statement ``subscribe``): the Position the reader holds the whole answer at once every row
    #: of the chunks ``more`` gave so far was taken (None: not known yet)
    resume: Callable[[], Position | None] | None = None


class Transport(Protocol):
    """Runs SQL for a connection: in this process over a Gateway, or over HTTP."""

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, bound: Position | None
    ) -> Outcome: ...

    def settings(self) -> dict[str, Any]: ...

    def server_version(self) -> str: ...

    def close(self) -> None: ...


class CursorHost(Protocol):
    """What a cursor needs of its connection (``Connection``): whether it is open, running SQL, forgetting it."""

    @property
    def closed(self) -> bool: ...

    def _run(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Outcome: ...

    def _forget(self, cursor: Any) -> None: ...
