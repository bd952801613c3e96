"""What a statement returns: rows with DuckDB type names, the Position they were read at, per-partition outcomes.

A Result is materialized as Arrow (or, on the key-lookup fast path, as
Python tuples) before it is handed out, so limits and timeouts are enforced
inside the engine and the faces only render. ``.relation`` is built lazily
over that data on the request's own cursor, so it can be joined further
without re-reading the stores.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from planner.plan import StatementKind
from stores.iqv2.position import Position

from .arrow_faithful import faithful_relation, timetz_text
from .errors import ExecutionError

__all__ = ["PartitionOutcome", "PointAnswer", "Result"]

_STREAMED: list[tuple[Any, ...]] = []  # marks rows handed out chunk by chunk and not kept
CHUNK_ROWS = 1000  # rows iter_batches hands out at a time


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One store partition a statement read: failed (reason, message) or not, and its position."""

    store: str
    partition: int
    failure_reason: str | None
    failure_message: str | None
    position: Position | None
    #: the server that answered (set when queries are routed between servers, issue 17) and whether it is active
    host: str | None = None
    active: bool | None = None

    @property
    def is_failure(self) -> bool:
        return self.failure_reason is not None

    def to_json(self) -> dict[str, Any]:
        out = {
            "store": self.store,
            "partition": self.partition,
            "failure_reason": self.failure_reason,
            "failure_message": self.failure_message,
            "position": None if self.position is None else self.position.to_json_map(),
        }
        if self.host is not None:
            out["host"] = self.host
            out["active"] = self.active
        return out


class PointAnswer:
    """A point lookup's whole answer from the engine's point lane (``Gateway.point``): at most one row.

    The parts of a Result a face renders (``columns``, ``rows``,
    ``statement``, ``position``, ``partitions``) without the Result: what a
    lookup answered from one SQLite read can afford to build (issue 14).
    ``result()`` is the same answer as a Result.
    """

    __slots__ = ("columns", "rows", "position", "partitions")
    statement = StatementKind.SELECT

    def __init__(self, columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]], position: Position,
                 partitions: list[PartitionOutcome]) -> None:
        self.columns = columns  # (name, type) pairs: one tuple per statement, shared by its answers
        self.rows = rows
        self.position = position
        self.partitions = partitions

    def result(self, cursor_factory: Any) -> Result:
        return Result(columns=list(self.columns), position=self.position, partitions=self.partitions,
                      statement=StatementKind.SELECT, rows=self.rows, cursor_factory=cursor_factory)


class Result:
    """Rows plus the consistency token.

    The rows come in one of three forms: Python tuples (DuckDB's own Python
    values, or built straight from the stores on the fast path), an Arrow
    table (when the caller asked for Arrow), or chunks still being fetched
    (streaming). The other forms are derived on demand. For residual SQL the
    scans stay registered on the request's cursor, so ``.relation`` is the
    statement itself as a lazy DuckDB relation, joinable further.
    """

    __slots__ = ("columns", "position", "partitions", "statement", "settings", "_table", "_rows",
                 "_cursor_factory", "_cursor", "_relation", "_chunks", "_sql", "_rerunnable", "_on_close", "_arrow_stream",
                 "_streaming")

    def __init__(
        self,
        *,
        columns: list[tuple[str, str]],
        position: Position,
        partitions: list[PartitionOutcome],
        statement: StatementKind,
        table: pa.Table | None = None,
        rows: list[tuple[Any, ...]] | None = None,
        chunks: Iterator[list[tuple[Any, ...]]] | None = None,
        cursor: duckdb.DuckDBPyConnection | None = None,
        residual_sql: str | None = None,
        cursor_factory: Any = None,
        settings: Mapping[str, Any] | None = None,
        rerunnable: bool = True,
        on_close: Any = None,
        arrow_stream: tuple[pa.Schema, Iterator[pa.RecordBatch]] | None = None,
    ) -> None:
        self.columns = columns
        self.position = position
        self.partitions = partitions
        self.statement = statement
        self.settings = dict(settings or {})
        self._table = table
        self._rows = rows
        self._chunks = chunks
        self._streaming: Any = None  # the chunks iter_batches is handing out (closed by close())
        self._cursor = cursor
        self._sql = residual_sql
        self._cursor_factory = cursor_factory
        self._relation: duckdb.DuckDBPyRelation | None = None
        # False when the scans were Arrow streams DuckDB has read: other forms are derived from the rows
        self._rerunnable = rerunnable
        self._on_close = on_close
        self._arrow_stream = arrow_stream  # (schema, batches still being produced) for Arrow answers

    # -- rows -----------------------------------------------------------------
    def rows(self) -> list[tuple[Any, ...]]:
        if self._rows is None and self._arrow_stream is not None:
            self._rows = _table_rows(self.to_arrow())
        if self._rows is _STREAMED:
            raise RuntimeError("the rows of this result were streamed already (iter_batches reads them once)")
        if self._rows is None:
            if self._chunks is not None:
                chunks, self._chunks = self._chunks, None
                self._rows = [r for chunk in chunks for r in chunk]
            else:
                self._rows = _table_rows(self.to_arrow())
        return self._rows

    fetchall = rows

    @property
    def streaming(self) -> bool:
        """Rows still coming from a DuckDB cursor (the statement is running until they are read or closed)."""
        return self._chunks is not None or self._arrow_stream is not None

    @property
    def row_count(self) -> int:
        if self._rows is not None or self._chunks is not None:
            return len(self.rows())
        return self.to_arrow().num_rows

    def to_arrow(self) -> pa.Table:
        if self._table is None and self._arrow_stream is not None:
            schema, batches = self.arrow_batches()
            self._table = pa.Table.from_batches(list(batches), schema=schema)
        if self._table is None:
            if self._sql is not None and self._cursor is not None and self._rerunnable:
                self.rows()  # a stream still open on the cursor must end first
                try:
                    self._table = faithful_relation(self._cursor.sql(self._sql)).to_arrow_table()
                except duckdb.ConversionException as exc:  # a value arrow_faithful's cast cannot carry
                    raise ExecutionError(str(exc).split("\n\nLINE ")[0]) from exc
            else:
                self._table = _rows_table(self.columns, self.rows())
        return self._table

    def arrow_batches(self) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The answer as Arrow record batches; for streamed answers as DuckDB produces them (once)."""
        if self._arrow_stream is not None:
            stream, self._arrow_stream = self._arrow_stream, None
            return stream
        table = self.to_arrow()
        return table.schema, iter(table.to_batches())

    def iter_batches(self, max_rows: int = CHUNK_ROWS) -> Iterator[list[tuple[Any, ...]]]:
        """Rows in chunks; for streamed results the chunks come as DuckDB produces them.

        Errors the engine detects while streaming (row limit, timeout) are
        raised from here, after earlier chunks were handed out: the HTTP layer
        sends them in-band.
        """
        if self._chunks is not None:  # streamed: nothing is kept, so memory is one chunk's (issue 14 item 2)
            chunks, self._chunks = self._chunks, None
            self._streaming = chunks
            self._rows = _STREAMED
            for chunk in chunks:
                yield from _chunks(chunk, max_rows)
            return
        if self._rows is _STREAMED:
            raise RuntimeError("the rows of this result were streamed already (iter_batches reads them once)")
        yield from _chunks(self.rows(), max_rows)

    def first_chunk(self) -> tuple[list[tuple[Any, ...]], Iterator[list[tuple[Any, ...]]] | None]:
        """(the first chunk of rows, the chunks after it), read before a face sends anything, so an error there
        keeps its status code. The rest is None when the first chunk is all there is; the result is then
        closed, as it is on an error here.

        An answer in hand of at most one chunk (a point lookup) is taken without the ``iter_batches``
        generator, which cost a point lookup more than the rest of its rendering (issue 14).
        """
        try:
            if not self.streaming and len(self.rows()) <= CHUNK_ROWS:
                first: list[tuple[Any, ...]] = self.rows()
                self.close()
                return first, None
            chunks = self.iter_batches()
            first = next(chunks, None) or []
            second = next(chunks, None) if first else None
            if second is None:
                self.close()
                return first, None
            return first, itertools.chain([second], chunks)
        except BaseException:
            self.close()
            raise

    # -- DuckDB -----------------------------------------------------------------
    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        """The statement as a DuckDB relation on this result's own cursor (joinable with its other relations)."""
        if self._relation is None:
            if self._sql is not None and self._cursor is not None and self._rerunnable:
                self.rows()
                self._relation = self._cursor.sql(self._sql)
            else:
                if self._cursor is None:
                    self._cursor = self._cursor_factory()
                self._relation = self._cursor.from_arrow(self.to_arrow())
        return self._relation

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB cursor the relation lives on: build further relations on it, not on another connection."""
        self.relation  # noqa: B018 - makes sure the cursor exists
        assert self._cursor is not None
        return self._cursor

    def close(self) -> None:
        if self._arrow_stream is not None:
            close = getattr(self._arrow_stream[1], "close", None)
            if close is not None:
                close()
            self._arrow_stream = None
        streaming, self._streaming = self._streaming, None
        if streaming is not None and hasattr(streaming, "close"):  # a reader stopped early ends the statement
            try:
                streaming.close()
            except ValueError:  # running in another thread right now: it ends when that thread stops
                pass
        if self._chunks is not None:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
            self._chunks = None
        if self._cursor is not None:
            try:
                self._cursor.close()
            except duckdb.Error:
                pass
            self._cursor = None
            self._relation = None
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    @property
    def failures(self) -> list[PartitionOutcome]:
        return [p for p in self.partitions if p.is_failure]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows())

    def __len__(self) -> int:
        return self.row_count

    def __repr__(self) -> str:
        return (f"Result({self.statement.value}, columns={[c for c, _ in self.columns]}, "
                f"position={self.position})")


def _chunks(rows: list[tuple[Any, ...]], n: int) -> Iterator[list[tuple[Any, ...]]]:
    for i in range(0, len(rows), n):
        yield rows[i:i + n]


def _table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Python tuples from Arrow, as DuckDB would hand them out (tz-aware UTC datetimes)."""
    if table.num_columns == 0:
        return [() for _ in range(table.num_rows)]
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols))


_DUCK_TO_ARROW = {
    "BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(), "TIMESTAMP WITH TIME ZONE": pa.timestamp("ms", tz="UTC"), "DATE": pa.date32(),
}


def _decimal128(name: str, duck_type: str, values: list[Any]) -> pa.Array:
    """Integers as the decimal128(38, 0) DuckDB exports HUGEINT as; one past its signed 128 bits is an error,
    as DuckDB's cast of it is (arrow_faithful), never a wrapped-around value."""
    for v in values:
        if v is not None and not -(2**127) <= v < 2**127:
            raise ExecutionError(f"column {name!r}: the {duck_type} value {v} is out of range for Arrow's "
                                 "decimal128(38, 0) (an answer as Arrow carries 128-bit integers as signed)")
    # from the 16-byte integers themselves, as DuckDB writes them: pyarrow's own conversion refuses 39 digits
    data = pa.py_buffer(b"".join((0 if v is None else int(v)).to_bytes(16, "little", signed=True) for v in values))
    valid = pa.array([v is not None for v in values], type=pa.bool_()).buffers()[1] if None in values else None
    return pa.Array.from_buffers(pa.decimal128(38, 0), len(values), [valid, data])


def _rows_table(columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> pa.Table:
    """Arrow for rows in hand (the fast path, catalog statements, residual answers fetched as Python rows)."""
    arrays = []
    for i, (name, t) in enumerate(columns):
        values = [r[i] for r in rows]
        if t in ("HUGEINT", "UHUGEINT"):  # sum() of integers (residual_eval.py): DuckDB's Arrow is decimal128(38, 0)
            arrays.append(_decimal128(name, t, values))
            continue
        if t == "TIME WITH TIME ZONE":  # as arrow_faithful sends it: Arrow's time has no offset
            values = [timetz_text(v) for v in values]
        try:
            arrays.append(pa.array(values, type=_DUCK_TO_ARROW.get(t)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:  # e.g. a UHUGEINT past 2^64 in a LIST
            raise ExecutionError(f"column {name!r} of type {t} cannot be sent as Arrow: {exc}") from exc
    return pa.Table.from_arrays(arrays, names=[n for n, _ in columns]) if columns else pa.table({})
