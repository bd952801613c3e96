"""The DuckDB side of a request: one locked-down parent connection, one cursor per request, a timeout watchdog.

A DuckDB connection shared by threads gives wrong results, so every request
gets its own cursor; cursors inherit the parent's settings, which is why the
security settings are applied once on the parent and then locked: SQL cannot
turn file, network or extension access back on.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import duckdb

from .errors import (
    ExecutionError,
    ForbiddenError,
    GatewayError,
    GatewayInternalError,
    RowLimitExceeded,
    SqlError,
    StatementTimeout,
)

__all__ = ["DuckPool", "Watchdog", "SECURITY_SETTINGS", "duck_error", "fetch_chunks", "row_limit_error"]

# Order matters: lock_configuration last, or the others could not be set.
SECURITY_SETTINGS: tuple[tuple[str, str], ...] = (
    ("TimeZone", "'UTC'"),
    ("enable_external_access", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("lock_configuration", "true"),
)


class DuckPool:
    """Hands out cursors of one in-memory, locked-down connection.

    TimeZone is UTC so TIMESTAMP WITH TIME ZONE columns (how store times are
    exposed) and naive literals in residual SQL mean the same instant, as the
    planner's key coercion assumes (naive = UTC).
    """

    def __init__(self, threads: int | None = None) -> None:
        self._con = duckdb.connect(":memory:")
        if threads is not None:
            self._con.execute(f"SET threads = {int(threads)}")
        for name, value in SECURITY_SETTINGS:
            self._con.execute(f"SET GLOBAL {name} = {value}")
        self._lock = threading.Lock()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            return self._con.cursor()

    def close(self) -> None:
        self._con.close()


class Watchdog:
    """One thread that interrupts statements past their deadline.

    A timer thread per request would cost more than the point lookups it
    guards; a heap of deadlines served by one daemon thread costs a push.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._live: set[int] = set()
        self._cv = threading.Condition()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, timeout_s: float, action: Callable[[], None]) -> int:
        """Run ``action`` after ``timeout_s`` unless ``disarm`` is called first; returns the ticket."""
        ticket = next(self._ids)
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + timeout_s, ticket, action))
            self._live.add(ticket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="iqgate-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()
        return ticket

    def disarm(self, ticket: int) -> None:
        with self._cv:
            if ticket in self._live:
                self._live.discard(ticket)
                self._cancelled.add(ticket)

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    while self._heap and self._heap[0][1] in self._cancelled:
                        self._cancelled.discard(heapq.heappop(self._heap)[1])
                    if not self._heap:
                        self._cv.wait()
                        continue
                    delay = self._heap[0][0] - time.monotonic()
                    if delay <= 0:
                        _, ticket, action = heapq.heappop(self._heap)
                        self._live.discard(ticket)
                        break
                    self._cv.wait(delay)
            try:
                action()
            except Exception:  # noqa: BLE001 - an interrupt of a finished cursor must not kill the watchdog
                pass


def fetch_chunks(cur: duckdb.DuckDBPyConnection, size: int, limit_rows: int, timeout_ms: int,
                  done: Any) -> Iterator[list[tuple[Any, ...]]]:
    """Chunks of rows as DuckDB produces them; past the row limit it is an error, never a silent truncation."""
    seen = 0
    try:
        while True:
            try:
                chunk = cur.fetchmany(size)
            except duckdb.Error as exc:
                raise duck_error(exc, timeout_ms) from exc
            if not chunk:
                return
            seen += len(chunk)
            if seen > limit_rows:
                cur.abort()
                raise row_limit_error(limit_rows)
            yield chunk
    finally:
        done()


def row_limit_error(limit_rows: int) -> RowLimitExceeded:
    return RowLimitExceeded(f"the result has more than {limit_rows} rows (the row limit); "
                            "add a LIMIT or a narrower WHERE")


def duck_error(exc: BaseException, timeout_ms: int) -> GatewayError:
    """The gateway error for a DuckDB failure while running the residual SQL."""
    msg = str(exc)
    if isinstance(exc, duckdb.InterruptException) or "INTERRUPT" in msg.upper():
        return StatementTimeout(f"the statement ran longer than the statement timeout of {timeout_ms} ms")
    if isinstance(exc, duckdb.PermissionException):
        return ForbiddenError(f"refused: {msg}")
    if isinstance(exc, (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException)):
        return SqlError(msg, code="SQL_ERROR")
    if isinstance(exc, duckdb.InternalException):
        return GatewayInternalError(msg)
    return ExecutionError(msg)
