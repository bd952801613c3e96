"""The DuckDB side of a request: one locked-down parent connection, one cursor per request, errors in user terms.

A DuckDB connection shared by threads gives wrong results, so every request
gets its own cursor; cursors inherit the parent's settings, which is why the
security settings are applied once on the parent and then locked: SQL cannot
turn file, network or extension access back on.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from .errors import (
    ExecutionError,
    ForbiddenError,
    GatewayError,
    GatewayInternalError,
    OutOfMemoryError,
    RowLimitExceeded,
    SqlError,
)

__all__ = ["DuckPool", "Streamed", "ThreadCursors", "arrow_batches", "SECURITY_SETTINGS", "duck_error", "fetch_chunks", "row_limit_error"]

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
    planner's key coercion assumes (naive = UTC). ``memory_limit`` bounds
    DuckDB's buffer manager (joins, aggregates, sorts) and nothing spills to
    disk: a statement over it fails with OUT_OF_MEMORY instead of filling a
    temp directory. The allocator flushes after any task that peaked above
    32 MB and its background threads return freed memory to the OS, so one
    statement that hit the budget does not leave the server that much bigger
    (DuckDB 2.0.1 otherwise kept ~220 MB resident after an OUT_OF_MEMORY). The expression depth is raised to what the planner lets
    through (``planner.limits.MAX_NESTING``), so the limit users meet is ours.
    """

    def __init__(self, threads: int | None = None, memory_limit_bytes: int | None = None) -> None:
        self._threads = threads
        self._memory_limit_bytes = memory_limit_bytes
        self._con = self._connect(rewriter=True)
        self._long_chains: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def _connect(self, rewriter: bool) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(":memory:")
        if self._threads is not None:
            con.execute(f"SET threads = {int(self._threads)}")
        if self._memory_limit_bytes is not None:
            con.execute(f"SET GLOBAL memory_limit = '{int(self._memory_limit_bytes)}B'")
        con.execute("SET GLOBAL temp_directory = ''")
        con.execute("SET GLOBAL allocator_flush_threshold = '32MB'")
        con.execute("SET GLOBAL allocator_background_threads = true")
        con.execute("SET GLOBAL max_expression_depth = 4000")
        if not rewriter:
            con.execute("SET GLOBAL disabled_optimizers = 'expression_rewriter'")
        for name, value in SECURITY_SETTINGS:
            con.execute(f"SET GLOBAL {name} = {value}")
        return con

    def cursor(self, long_chains: bool = False) -> duckdb.DuckDBPyConnection:
        """A cursor for one statement; ``long_chains`` (``Plan.long_chains``): on a connection without DuckDB's
        expression rewriter.

        Why a second connection: the rewriter is quadratic in a long OR chain
        of AND terms (or AND of ORs: 2,000 ``(k = … AND v >= …)`` terms took
        10 s in DuckDB 2.0.1, 0.1 s without it), and ``disabled_optimizers``
        is a global setting that ``lock_configuration`` freezes. It is made
        the first time such a statement comes, with the same settings and
        its own memory budget of the same size.
        """
        with self._lock:
            if not long_chains:
                return self._con.cursor()
            if self._long_chains is None:
                self._long_chains = self._connect(rewriter=False)
            return self._long_chains.cursor()

    def close(self) -> None:
        self._con.close()
        if self._long_chains is not None:
            self._long_chains.close()


class _Relation:
    """What a relation name is registered as, once per cursor: the Arrow data of the statement running now.

    DuckDB reads the object's schema and stream each time a statement binds
    the name, so one registration serves every statement (registering a
    table per statement was a catalog write each time).
    """

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.data.__arrow_c_stream__(requested_schema)


class ThreadCursors:
    """A DuckDB cursor per thread for statements answered as rows at once (issue 14 item 3: cheap residual SQL).

    The cursor and its relation registrations are made once per thread
    instead of once per statement. After each statement every relation is
    pointed at an empty table of its schema, so no statement can read another
    one's rows. Only for results fetched before returning: a streamed result
    keeps a cursor of its own.
    """

    def __init__(self, pool: DuckPool) -> None:
        self._pool = pool
        self._local = threading.local()

    def run(self, tables: dict[str, Any], sql: str, limit_rows: int, watch: Any, relations: dict[str, str],
            chunk: int | None = None) -> tuple[list[tuple[str, str]], list[tuple[Any, ...]], Streamed | None]:
        """``(columns, rows, None)``; with ``chunk`` (a streaming answer) a result larger than one chunk comes
        back as ``(columns, [], Streamed)``: the thread's cursor is handed over to stream the rest, chunk by
        chunk (memory: a chunk), and the thread makes a new cursor next time."""
        local = self._local
        cur = getattr(local, "cursor", None)
        if cur is None:
            cur = local.cursor = self._pool.cursor()
            local.relations = {}
        held: dict[str, _Relation] = local.relations
        watch.attach(cur.interrupt)
        handed_over = False
        try:
            for name, table in tables.items():
                rel = held.get(name)
                if rel is None:
                    rel = held[name] = _Relation(table)
                    cur.register(name, rel)
                else:
                    rel.data = table
            cur.execute(sql)
            columns = [(str(d[0]), str(d[1])) for d in cur.description or ()]
            n = limit_rows if chunk is None else min(chunk, limit_rows)
            out = fetch_rows(cur, n + 1)
            if len(out) > n:
                if n == limit_rows:
                    raise row_limit_error(limit_rows)
                local.cursor = None  # this statement keeps the cursor (and its relations' data) until streamed
                local.relations = {}
                handed_over = True
                assert chunk is not None
                return columns, [], Streamed(cur, _then(out, fetch_chunks(cur, chunk, limit_rows, watch, relations,
                                                                          seen=len(out))))
            watch.check()
            return columns, out, None
        except duckdb.Error as exc:
            raise duck_error(exc, watch, relations) from exc
        finally:
            if not handed_over:
                watch.attach(None)
                for name in tables:
                    rel = held.get(name)
                    if rel is not None:
                        rel.data = rel.data.schema.empty_table()


def _then(first: list[tuple[Any, ...]], rest: Generator[list[tuple[Any, ...]], None, None]
          ) -> Iterator[list[tuple[Any, ...]]]:
    try:
        yield first
        yield from rest
    finally:
        rest.close()


class Streamed:
    """A statement's cursor handed over to stream its rows, and the chunks still to come."""

    __slots__ = ("cursor", "chunks")

    def __init__(self, cursor: duckdb.DuckDBPyConnection, chunks: Iterator[list[tuple[Any, ...]]]) -> None:
        self.cursor, self.chunks = cursor, chunks


def fetch_rows(cur: duckdb.DuckDBPyConnection, n: int) -> list[tuple[Any, ...]]:
    """``cur.fetchmany(n)``; a value DuckDB computed that no Python object can hold is the statement's error.

    Why: DuckDB converts each value as it fetches, and an INTERVAL past
    Python's timedelta (999,999,999 days: ``INTERVAL 1 DAY * 1e9``,
    ``to_days(2000000000)``) raises OverflowError there: an internal error
    with a traceback, when it is the statement's own result that cannot be
    sent as rows. Arrow carries such values and is unaffected.
    """
    try:
        return cur.fetchmany(n)
    except OverflowError as exc:
        raise ExecutionError(f"a value in the result is out of the range rows can carry ({exc}): an INTERVAL "
                             "holds at most 999,999,999 days here; cast it to VARCHAR, or ask for Arrow") from None


def fetch_chunks(cur: duckdb.DuckDBPyConnection, size: int, limit_rows: int, watch: Any,
                 relations: dict[str, str], *, seen: int = 0) -> Iterator[list[tuple[Any, ...]]]:
    """Chunks of rows as DuckDB produces them; past the row limit it is an error, never a silent truncation.

    ``seen``: rows of the statement already handed out (they count towards the limit).
    """
    try:
        while True:
            try:
                chunk = fetch_rows(cur, size)
            except duckdb.Error as exc:
                raise duck_error(exc, watch, relations) from exc
            if not chunk:
                watch.check()
                return
            seen += len(chunk)
            if seen > limit_rows:
                cur.abort()
                raise row_limit_error(limit_rows)
            yield chunk
    finally:
        watch.close()


def arrow_batches(reader: Any, limit_rows: int, watch: Any, relations: dict[str, str]) -> Iterator[Any]:
    """Record batches as DuckDB produces them; past the row limit it is an error, never a silent truncation."""
    seen = 0
    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                watch.check()
                return
            except (duckdb.Error, OSError, pa.ArrowException) as exc:
                # DuckDB's own errors reach an Arrow reader as pyarrow's (an interrupt: OSError "INTERRUPT
                # Error"): a timeout or cancel while streaming is the watch's reason, not an unknown failure
                raise duck_error(exc, watch, relations) from exc
            seen += batch.num_rows
            if seen > limit_rows:
                raise row_limit_error(limit_rows)
            yield batch
    finally:
        watch.close()


def row_limit_error(limit_rows: int) -> RowLimitExceeded:
    return RowLimitExceeded(f"the result has more than {limit_rows} rows (the row limit); "
                            "add a LIMIT or a narrower WHERE")


def duck_error(exc: BaseException, watch: Any, relations: dict[str, str] | None = None) -> GatewayError:
    """The gateway error for a DuckDB failure while running the residual SQL.

    An interrupt is whatever the statement's watch tripped on (timeout, cancel, memory). Messages never
    show the rewritten SQL: DuckDB's ``LINE 1: …`` excerpt is of our residual statement, not the user's,
    and relation names like ``__iq_scan_0`` are replaced by the stores they hold.
    """
    msg = _user_message(str(exc), relations or {})
    if isinstance(exc, duckdb.InterruptException) or "INTERRUPT" in msg.upper():
        return watch.error()
    if isinstance(exc, duckdb.OutOfMemoryException) or msg.startswith("Out of Memory Error"):
        return OutOfMemoryError(f"the statement needed more memory than its budget: {msg.splitlines()[0]}")
    if "max_expression_depth" in msg:
        return SqlError("the statement nests expressions too deeply for the engine", code="SQL_ERROR")
    if isinstance(exc, duckdb.PermissionException):
        return ForbiddenError(f"refused: {msg}")
    if isinstance(exc, (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException)):
        return SqlError(msg, code="SQL_ERROR")
    if isinstance(exc, duckdb.InternalException):
        return GatewayInternalError(msg)
    return ExecutionError(msg)


def _user_message(msg: str, relations: dict[str, str]) -> str:
    cut = msg.find("\n\nLINE ")
    if cut < 0:
        cut = msg.find("\nLINE ")
    if cut >= 0:
        msg = msg[:cut]
    msg = msg.split("\n\nPossible solutions:")[0]
    for relation, store in relations.items():
        msg = msg.replace(f'"{relation}"', store).replace(relation, store)
    return msg.strip()
