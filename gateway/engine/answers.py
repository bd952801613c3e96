"""Where an answer's rows come from, and who owns what they hold until they are read.

A ``Result`` (result.py) is lazy: it holds one answer and asks it for rows,
Arrow batches or a DuckDB relation when the caller reads it. There are two
kinds:

- ``InHand``: the rows are here already (the point lane, the fast path, the
  residual evaluator, SET/SHOW/EXPLAIN, a small DuckDB answer fetched whole);
- ``DuckAnswer``: the residual SQL on a leased DuckDB cursor over the
  statement's store reads. It owns the cursor lease, the reads (each Arrow
  stream holds a read transaction) and the statement's watch, and ``close()``
  ends them in one place and order: the DuckDB result, then the reads' snapshots,
  then the cursor goes back to its pool (or is closed when it did not end
  cleanly), then the watch.

A DuckAnswer is started as the statement's ``Form`` says (statement.py) so
its errors surface in ``Gateway.sql`` (the faces give them their status code):
``ROWS`` executes and fetches the first chunk, ``ARROW`` starts DuckDB's Arrow
export, ``ANY`` only binds the SQL (a bad column, a type error) and decides
when it is read — unless the reads are in hand already (point reads): then it
runs at once as ``ROWS`` does (one parse and plan instead of two), and a
relation asked of it afterwards runs the SQL anew over the same reads. Every
way of reading enforces the row limit (past it is an error, never a silent
truncation) and the statement's budget.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from .arrow_faithful import faithful_relation
from .duck import DuckPool, duck_error, fetch_rows, row_limit_error
from .guards import StatementWatch
from .reads import Reads
from .types import rows_table, table_rows

__all__ = ["InHand", "DuckAnswer", "Rows", "Columns"]

Rows = list[tuple[Any, ...]]
Columns = list[tuple[str, str]]


class InHand:
    """Rows already in hand: nothing to end, nothing to stream."""

    __slots__ = ("rows",)

    def __init__(self, rows: Rows) -> None:
        self.rows = rows

    def close(self) -> None:
        pass


class DuckAnswer:
    """The residual SQL over a statement's reads, on a cursor leased from ``pool`` (see the module doc)."""

    def __init__(self, pool: DuckPool, long_chains: bool, sql: str, reads: Reads, watch: StatementWatch,
                 limit_rows: int, batch_rows: int, chunk_rows: int,
                 system: Callable[[Any], None] | None = None) -> None:
        """``batch_rows``: rows per Arrow batch; ``chunk_rows``: rows fetched from DuckDB at a time as Python rows
        (a streamed answer's memory is a chunk's)."""
        self._sql = sql
        self._reads = reads
        self._watch = watch
        self._limit = limit_rows
        self._batch_rows = batch_rows
        self._relations = reads.relations
        self._lock = threading.Lock()      # one reader starts the answer
        self._ending = threading.Lock()    # one caller ends it
        self._mode: str | None = None      # "rows" | "arrow" | "relation" once started
        self._rel: duckdb.DuckDBPyRelation | None = None
        self._reader: Any = None
        self._first: Rows | None = None    # rows fetched ahead (ROWS form)
        self._chunk = chunk_rows
        self._seen = 0                     # rows handed out so far (the limit counts them)
        self._done = False                 # the DuckDB result was read to its end
        self._closed = False
        self._on_end: list[Callable[[], None]] = []
        self.columns: Columns = []
        self._lease = pool.lease(long_chains)
        try:
            reads.bind(self._lease, sql)
            if system is not None:
                system(self._lease)
            watch.attach(self._lease.cursor.interrupt)
        except BaseException:
            self._end(clean=False)
            raise

    # -- starting -------------------------------------------------------------------------------------------
    def bind(self) -> None:
        """Bind the SQL (errors now) and learn the columns; nothing runs until the answer is read."""
        try:
            self._rel = self._lease.cursor.sql(self._sql)
            self.columns = [(str(n), str(t)) for n, t in zip(self._rel.columns, self._rel.types)]
        except duckdb.Error as exc:
            self._fail(exc)

    def start_rows(self) -> Rows | None:
        """Execute now and fetch the first chunk; all the rows (and the answer ended) when that is the whole
        answer, else None (the rows stream from here, ``chunks``)."""
        self._mode = "rows"
        cur = self._lease.cursor
        try:
            cur.execute(self._sql)
            self.columns = [(str(d[0]), str(d[1])) for d in cur.description or ()]
            n = min(self._chunk, self._limit)
            first = fetch_rows(cur, n + 1)
        except duckdb.Error as exc:
            self._fail(exc)
        if len(first) > n:
            if n == self._limit:
                self._end(clean=False)
                raise row_limit_error(self._limit)
            self._first = first
            return None
        self._watch.check()  # an interrupt may land only after a long scalar call: its reason still counts
        self._done = True
        self.close()
        return first

    def start_arrow(self) -> None:
        """Start DuckDB's Arrow export (values as the JSON answer has them: ``arrow_faithful``)."""
        self._mode = "arrow"
        try:
            rel = self._lease.cursor.sql(self._sql)
            self.columns = [(str(n), str(t)) for n, t in zip(rel.columns, rel.types)]
            self._reader = faithful_relation(rel).to_arrow_reader(self._batch_rows)
        except duckdb.Error as exc:
            self._fail(exc)

    # -- reading ----------------------------------------------------------------------------------------------
    def chunks(self, size: int) -> Iterator[Rows]:
        """The rows in chunks of at most ``size`` (and of the answer's chunk size) as DuckDB produces them (once)."""
        size = min(size, self._chunk)
        with self._lock:
            mode = self._mode
            if mode is None:  # bound only (Form.ANY): its budget counts from this first read
                self._mode = mode = "rows"
                self._watch.restart()
                self._execute_rows()
            elif mode == "arrow":
                return self._chunks_of_batches(size)
            elif mode != "rows" or self._done:
                raise RuntimeError("this answer was read already")
        return self._fetch_chunks(size)

    def batches(self) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The answer as Arrow record batches as DuckDB produces them (once)."""
        with self._lock:
            if self._mode is None:
                self._watch.restart()
                self.start_arrow()
            elif self._mode == "rows":  # started as rows (a face that hinted ROWS reads Arrow after all)
                return self._batches_of_chunks()
            elif self._mode != "arrow" or self._reader is None:
                raise RuntimeError("this answer was read already")
            reader, self._reader = self._reader, None
        return reader.schema, self._arrow_batches(reader)

    def relation(self) -> duckdb.DuckDBPyRelation | None:
        """The statement as a DuckDB relation on this answer's cursor (joinable with its other relations), or None
        once the answer was read another way. Streamed scans are read into Arrow tables first, so the relation
        can run any number of times. The statement's budget ends here: the relation is the caller's to run."""
        with self._lock:
            started_in_hand = self._mode == "rows" and self._reads.in_memory and not self._seen and not self._done
            if self._mode is not None and not started_in_hand:
                return None
            self._mode = "relation"
            if started_in_hand:  # a Form.ANY answer over reads in hand ran at once (gateway): its relation runs anew
                self._first = None
                self._lease.cursor.abort()  # the run's unread rest: a cursor does nothing else while it is pending
            if self._reads.streamed or self._reads.streams:  # store scans and stream reads read once: tables
                self._reads.bind(self._lease, self._sql, tables=True)
            try:
                self._rel = self._lease.cursor.sql(self._sql)
            except duckdb.Error as exc:
                self._fail(exc)
            self._watch.attach(None)
            self._watch.close()
            return self._rel

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self._lease.cursor

    @property
    def seen(self) -> int:
        """Rows handed out so far (an audit line's count once the answer ended)."""
        return self._seen

    def _execute_rows(self) -> None:
        cur = self._lease.cursor
        try:
            cur.execute(self._sql)
        except duckdb.Error as exc:
            self._fail(exc)

    def _fetch_chunks(self, size: int) -> Iterator[Rows]:
        """Chunks of ``size`` rows (the last one shorter); DuckDB is asked for the answer's own chunk size."""
        cur = self._lease.cursor
        try:
            carry, self._first = self._first or [], None  # rows fetched ahead: they lead the first chunks
            while True:
                if len(carry) < size:
                    try:
                        carry += fetch_rows(cur, size - len(carry))
                    except duckdb.Error as exc:
                        raise duck_error(exc, self._watch, self._relations) from exc
                if not carry:
                    self._watch.check()
                    self._done = True
                    return
                chunk, carry = carry[:size], carry[size:]
                self._seen += len(chunk)
                if self._seen > self._limit:
                    raise row_limit_error(self._limit)
                yield chunk
        finally:
            self.close()

    def _arrow_batches(self, reader: Any) -> Iterator[pa.RecordBatch]:
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    self._watch.check()
                    self._done = True
                    return
                except (duckdb.Error, OSError, pa.ArrowException) as exc:
                    # DuckDB's own errors reach an Arrow reader as pyarrow's (an interrupt: OSError "INTERRUPT
                    # Error"): a timeout or cancel while streaming is the watch's reason, not an unknown failure
                    raise duck_error(exc, self._watch, self._relations) from exc
                self._seen += batch.num_rows
                if self._seen > self._limit:
                    raise row_limit_error(self._limit)
                yield batch
        finally:
            self.close()

    def _chunks_of_batches(self, size: int) -> Iterator[Rows]:
        _, batches = self.batches()
        for batch in batches:
            rows = table_rows(pa.Table.from_batches([batch]))
            for i in range(0, len(rows), size):
                yield rows[i:i + size]

    def _batches_of_chunks(self) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        columns = self.columns
        schema = rows_table(columns, []).schema

        def gen() -> Iterator[pa.RecordBatch]:
            for chunk in self._fetch_chunks(self._batch_rows):
                yield from rows_table(columns, chunk).to_batches()

        return schema, gen()

    def on_end(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when the answer ends (read to its end, closed or dropped)."""
        self._on_end.append(fn)

    def __del__(self) -> None:
        """An answer dropped unread still gives back its cursor and ends its snapshots; one whose relation was
        handed out leaves the cursor to that relation (DuckDB keeps it alive while the relation is)."""
        with contextlib.suppress(Exception):
            self._end(clean=self._done or self._mode is None, keep_cursor=self._mode == "relation")

    # -- ending -----------------------------------------------------------------------------------------------
    def _fail(self, exc: duckdb.Error) -> None:
        err = duck_error(exc, self._watch, self._relations)
        self._end(clean=False)
        raise err from exc

    def close(self) -> None:
        """End the answer: read to its end or not, every resource it holds is released (idempotent). A cursor
        whose result was not read to its end (or that a caller holds as a relation) is closed, not reused."""
        self._end(clean=self._done or self._mode is None)

    def _end(self, clean: bool, keep_cursor: bool = False) -> None:
        with self._ending:
            if self._closed:
                return
            self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()
        self._rel = None
        self._watch.attach(None)
        self._reads.close()
        if not keep_cursor:
            self._lease.give_back(clean)
        self._watch.close()
        for fn in self._on_end:
            with contextlib.suppress(Exception):
                fn()
