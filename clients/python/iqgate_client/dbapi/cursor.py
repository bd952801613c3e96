"""The PEP 249 cursor: a thin facade that turns an ``Outcome`` into description, rowcount and fetches.

A result that fits in one chunk is fetched in full when the statement runs
(``rowcount`` exact); a larger one (in-process transport) streams: fetches
pull chunk after chunk from the engine, only the current chunk is held, and
``rowcount`` is -1 until the last row was fetched (PEP 249's "cannot be
determined"). An error found while the rows stream (row limit, timeout) is
raised by the fetch that meets it.

A live answer (``SUBSCRIBE …``, ``SELECT … EMIT CHANGES``; ``statement`` is
``subscribe``) never ends: its rows are ``(iq_op, iq_position, <columns>)``,
``fetchone`` blocks until the next change, ``fetchmany(n)`` and ``fetchall``
return what is ready (at least one row, waiting for it), and ``position`` is
the resume point: the Position the rows fetched so far are a whole answer at.
``close`` ends the subscription.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import InterfaceError, NotSupportedError, ProgrammingError
from ..position import Position
from .outcome import ROWLESS_STATEMENTS, CursorHost, Outcome, PartitionInfo

__all__ = ["Cursor"]

Description = tuple[str, str, None, None, int | None, int | None, None]


def _precision_scale(type_name: str) -> tuple[int | None, int | None]:
    """DECIMAL(p,s) carries precision and scale; other types leave them unknown (None)."""
    t = type_name.upper()
    if t.startswith(("DECIMAL(", "NUMERIC(")) and t.endswith(")"):
        try:
            p, s = t[t.index("(") + 1 : -1].split(",")
            return int(p), int(s)
        except ValueError:
            return None, None
    return None, None


def _describe(columns: Sequence[tuple[str, str]]) -> list[Description]:
    """PEP 249's description of ``columns`` (a fresh list), cached: a statement's shape repeats on every call."""
    return list(_description_of(tuple(columns)))


@functools.lru_cache(maxsize=4096)
def _description_of(columns: Sequence[tuple[str, str]]) -> tuple[Description, ...]:
    return tuple((name, type_name, None, None, *_precision_scale(type_name), None) for name, type_name in columns)


class Cursor:
    """PEP 249 cursor over the gateway; also ``position``/``partitions``/``statement`` of the last result."""

    def __init__(self, connection: CursorHost) -> None:
        self._connection: CursorHost | None = connection
        self.arraysize = 1
        self._outcome: Outcome | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._next = 0
        self._base = 0  # rows of the result before ``_rows`` (dropped chunks of a streamed result)
        self._more: Iterator[list[tuple[Any, ...]]] | None = None
        self._description: list[Description] | None = None
        self.rowcount = -1
        self.lastrowid = None
        self._live_at: Position | None = None  # a live answer's resume point

    # -- state ---------------------------------------------------------------
    @property
    def connection(self) -> CursorHost:
        """PEP 249 optional extension: the connection this cursor was made on."""
        return self._live_connection()

    @property
    def closed(self) -> bool:
        return self._connection is None or self._connection.closed

    def _live_connection(self) -> CursorHost:
        if self._connection is None:
            raise InterfaceError("the cursor is closed")
        if self._connection.closed:
            raise InterfaceError("the cursor's connection is closed")
        return self._connection

    @property
    def description(self) -> list[Description] | None:
        """One 7-tuple per column: (name, type_code, display_size, internal_size, precision, scale, null_ok)."""
        return self._description

    @property
    def position(self) -> Position | None:
        """The position the last result was read at (the consistency token); None before any result. For a live
        answer, where to resume: the Position the rows fetched so far are the whole answer at."""
        if self._outcome is not None and self._outcome.statement == "subscribe":
            return self._live_at
        return self._outcome.position if self._outcome is not None else None

    @property
    def partitions(self) -> list[PartitionInfo]:
        """Per store partition outcome of the last result: store, partition, failure_reason, failure_message,
        position, is_failure (failures are included when partial results are on)."""
        return list(self._outcome.partitions) if self._outcome is not None else []

    @property
    def statement(self) -> str | None:
        """What the last statement was: select, explain, show_tables, describe or set."""
        return self._outcome.statement if self._outcome is not None else None

    @property
    def rownumber(self) -> int | None:
        """PEP 249 optional extension: the 0-based index of the next row in the result set."""
        return self._base + self._next if self._description is not None else None

    # -- execution -------------------------------------------------------------
    def execute(self, operation: str, parameters: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        """Run one statement with qmark (``?``) parameters; returns the cursor so calls can chain."""
        conn = self._live_connection()
        if not isinstance(operation, str):
            raise ProgrammingError(f"the operation must be a SQL string, got {type(operation).__name__}")
        if parameters is not None and type(parameters) not in (list, tuple, dict) and (
            isinstance(parameters, (str, bytes)) or not isinstance(parameters, (Sequence, Mapping))
        ):
            raise ProgrammingError(
                f"parameters must be a sequence (qmark style) or a mapping, got {type(parameters).__name__}"
            )
        self._reset()
        outcome = conn._run(operation, parameters)
        self._outcome = outcome
        if outcome.statement in ROWLESS_STATEMENTS:
            return self
        self._rows = outcome.rows
        self._more = outcome.more
        self._description = _describe(outcome.columns)
        self.rowcount = len(outcome.rows) if outcome.more is None else -1
        if outcome.statement == "subscribe":
            self._live_at = outcome.resume() if outcome.resume is not None else None
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any] | Mapping[str, Any]]) -> Cursor:
        """Run the statement once per parameter set; the cursor keeps the last result (the gateway only reads)."""
        self._live_connection()
        if isinstance(seq_of_parameters, (str, bytes)) or not isinstance(seq_of_parameters, Iterable):
            raise ProgrammingError("executemany() takes a sequence of parameter sets (one per run), got "
                                   f"{type(seq_of_parameters).__name__}")
        params_list = list(seq_of_parameters)
        for params in params_list:
            self.execute(operation, params)
        if len(params_list) != 1:
            self.rowcount = -1
        return self

    def _reset(self) -> None:
        outcome, self._outcome = self._outcome, None
        if self._more is not None and outcome is not None and outcome.close is not None:
            outcome.close()  # the statement was still streaming: end it
        self._more = None
        self._rows = []
        self._next = 0
        self._base = 0
        self._description = None
        self.rowcount = -1
        self._live_at = None

    def _fill(self) -> bool:
        """Past the held rows: the next chunk of a streamed result (False at its end, rowcount then known)."""
        while self._more is not None:
            try:
                chunk = next(self._more, None)
            except BaseException:
                self._end_stream()
                raise
            if chunk is None:
                self._end_stream()
                self.rowcount = self._base + len(self._rows)
                return False
            if chunk:
                self._base += len(self._rows)
                self._rows, self._next = chunk, 0
                return True
        return False

    def _end_stream(self) -> None:
        self._more = None
        if self._outcome is not None and self._outcome.close is not None:
            self._outcome.close()

    # -- fetching ----------------------------------------------------------------
    def _result_rows(self) -> list[tuple[Any, ...]]:
        self._live_connection()
        if self._description is None:
            if self._outcome is None:
                raise InterfaceError("no statement has been executed on this cursor")
            raise InterfaceError(f"the last statement ({self._outcome.statement}) produced no result set")
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._result_rows()
        if self._next >= len(rows):
            if not self._fill():
                return None
            rows = self._rows
        row = rows[self._next]
        self._next += 1
        if self._outcome is not None and self._outcome.statement == "subscribe":
            self._track([row])
        return row

    def _track(self, rows: list[tuple[Any, ...]]) -> None:
        """A live answer's resume point after handing out ``rows``: a progress row's Position, or the chunk's
        once all of it was handed out."""
        for row in reversed(rows):
            if row and row[0] == "progress":
                self._live_at = Position.from_json(row[1])
                break
        outcome = self._outcome
        if self._next >= len(self._rows) and outcome is not None and outcome.resume is not None:
            at = outcome.resume()
            if at is not None:
                self._live_at = at

    def _fetch_live(self, n: int) -> list[tuple[Any, ...]]:
        """What is ready of a live answer, up to ``n`` rows, waiting for the first."""
        if self._next >= len(self._rows) and n > 0 and not self._fill():
            return []
        out = self._rows[self._next : self._next + n]
        self._next += len(out)
        self._track(out)
        return out

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        rows = self._result_rows()
        n = self.arraysize if size is None else size
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ProgrammingError(f"fetchmany size must be a non-negative integer, got {n!r}")
        if self._outcome is not None and self._outcome.statement == "subscribe":
            return self._fetch_live(n)
        out = rows[self._next : self._next + n]
        self._next += len(out)
        while len(out) < n and self._fill():
            more = self._rows[: n - len(out)]
            self._next = len(more)
            out += more
        return out

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows = self._result_rows()
        if self._outcome is not None and self._outcome.statement == "subscribe":  # never ends: what is ready
            return self._fetch_live(len(rows) - self._next if self._next < len(rows) else 1 << 30)
        out = rows[self._next :]
        self._next = len(rows)
        while self._fill():
            out += self._rows
            self._next = len(self._rows)
        return out

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self

    def __next__(self) -> tuple[Any, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def nextset(self) -> bool | None:
        """The gateway answers each statement with one result set; PEP 249 says to raise then."""
        self._live_connection()
        raise NotSupportedError("the gateway returns a single result set per statement")

    # -- no-ops PEP 249 requires ------------------------------------------------------
    def setinputsizes(self, sizes: Any) -> None:
        """Parameters are sent with their values' own types, so sizes are not needed."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Results arrive whole or chunk by chunk as the engine makes them: there is no buffer to size."""

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Release the result. Closing twice is allowed; using a closed cursor raises InterfaceError."""
        if self._connection is not None:
            self._connection._forget(self)
        self._connection = None
        self._reset()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<iqgate Cursor {state} statement={self.statement!r} rowcount={self.rowcount}>"
