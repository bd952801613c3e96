"""What one executed statement gives a cursor, whichever transport ran it.

The in-process and the remote transport both produce an ``Outcome``, so the
cursor (the PEP 249 face) is written once and cannot drift between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stores.iqv2.position import Position

from ..result import PartitionOutcome

__all__ = ["Outcome", "PartitionInfo", "Transport", "CursorHost", "ROWLESS_STATEMENTS"]

# Statements that produce no result set: PEP 249 wants description None for them.
ROWLESS_STATEMENTS = frozenset({"set"})


# One store partition's part in a result: the engine's own type, on both transports.
PartitionInfo = PartitionOutcome


@dataclass(slots=True)
class Outcome:
    """Columns as ``(name, type_name)``; rows as tuples of Python values; the position the rows were read at.

    ``partitions`` holds the engine's PartitionOutcome on both transports.
    """

    statement: str
    columns: list[tuple[str, str]]
    rows: list[tuple[Any, ...]]
    position: Position
    partitions: list[PartitionOutcome] = field(default_factory=list)
    settings: Mapping[str, Any] | None = None


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
