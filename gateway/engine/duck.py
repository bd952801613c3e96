"""The DuckDB side of a statement: one locked-down parent connection, a leased cursor per statement, errors in
user terms.

A DuckDB connection shared by threads gives wrong results, so every statement
gets a cursor of its own (leased from a pool and reused); cursors inherit the
parent's settings, which is why the security settings are applied once on the
parent and then locked: SQL cannot turn file, network or extension access
back on.
"""

from __future__ import annotations

import contextlib
import threading
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

__all__ = ["DuckPool", "Lease", "SECURITY_SETTINGS", "duck_error", "fetch_rows", "row_limit_error"]

# Order matters: lock_configuration last, or the others could not be set.
SECURITY_SETTINGS: tuple[tuple[str, str], ...] = (
    ("TimeZone", "'UTC'"),
    ("enable_external_access", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("lock_configuration", "true"),
)


class _Relation:
    """What a relation name is registered as, once per cursor: the Arrow data of the statement running now.

    DuckDB reads the object's schema and stream each time a statement binds
    the name, so one registration serves every statement (registering a
    table per statement was a catalog write each time). The data is an Arrow
    table or a record batch reader (read once, as DuckDB runs).
    """

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.data.__arrow_c_stream__(requested_schema)


_NOTHING = pa.table({})


class Lease:
    """A cursor lent to one statement, with the relation names its pool registered on it.

    ``bind`` points a name at this statement's data. ``give_back`` points
    every name at nothing (no later statement can read this one's rows) and
    returns the cursor to its pool, or closes it when the statement did not
    end cleanly (a result still pending on it, an interrupt).
    """

    __slots__ = ("cursor", "_held", "_pool", "_long", "_bound")

    def __init__(self, pool: DuckPool, cursor: duckdb.DuckDBPyConnection, long_chains: bool) -> None:
        self.cursor = cursor
        self._held: dict[str, _Relation] = {}
        self._pool = pool
        self._long = long_chains
        self._bound: list[str] = []

    def bind(self, name: str, data: Any) -> None:
        rel = self._held.get(name)
        if rel is None:
            rel = self._held[name] = _Relation(data)
            self.cursor.register(name, rel)
        else:
            rel.data = data
        self._bound.append(name)

    def give_back(self, clean: bool) -> None:
        for name in self._bound:
            self._held[name].data = _NOTHING
        self._bound = []
        if clean:
            self._pool._put(self)
        else:
            with contextlib.suppress(duckdb.Error):
                self.cursor.close()


class DuckPool:
    """Hands out cursors of one in-memory, locked-down connection, leased per statement and reused.

    TimeZone is UTC so TIMESTAMP WITH TIME ZONE columns (how store times are
    exposed) and naive literals in residual SQL mean the same instant, as the
    planner's key coercion assumes (naive = UTC). ``memory_limit`` bounds
    DuckDB's buffer manager (joins, aggregates, sorts) and nothing spills to
    disk: a statement over it fails with OUT_OF_MEMORY instead of filling a
    temp directory. The allocator flushes after any task that peaked above
    32 MB and its background threads return freed memory to the OS, so one
    statement that hit the budget does not leave the server that much bigger
    (DuckDB 2.0.1 otherwise kept ~220 MB resident after an OUT_OF_MEMORY). The
    expression depth is raised to what the planner lets through
    (``planner.limits.MAX_NESTING``), so the limit users meet is ours.

    Cursors are leased (``lease``) rather than made per statement: a cursor and
    its relation registrations cost more than a small statement's own work
    (issue 14 item 3), so a statement's cursor goes back to the pool when its
    answer ends and the next statement reuses it.
    """

    def __init__(self, threads: int | None = None, memory_limit_bytes: int | None = None) -> None:
        self._threads = threads
        self._memory_limit_bytes = memory_limit_bytes
        self._con = self._connect(rewriter=True)
        self._long_chains: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        self._idle: dict[bool, list[Lease]] = {False: [], True: []}
        self._closed = False

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
        """A new cursor (not leased: the caller closes it); ``long_chains`` (``Plan.long_chains``): on a connection
        without DuckDB's expression rewriter.

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

    def lease(self, long_chains: bool = False) -> Lease:
        """A cursor for one statement; give it back with ``Lease.give_back``."""
        with self._lock:
            idle = self._idle[long_chains]
            if idle:
                return idle.pop()
        return Lease(self, self.cursor(long_chains), long_chains)

    def _put(self, lease: Lease) -> None:
        with self._lock:
            idle = self._idle[lease._long]
            if not self._closed and len(idle) < _IDLE_CURSORS:
                idle.append(lease)
                return
        with contextlib.suppress(duckdb.Error):
            lease.cursor.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = self._idle[False] + self._idle[True]
            self._idle = {False: [], True: []}
        for lease in idle:
            with contextlib.suppress(duckdb.Error):
                lease.cursor.close()
        self._con.close()
        if self._long_chains is not None:
            self._long_chains.close()


_IDLE_CURSORS = 16  # per connection: more than the handler threads of a serving process


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
