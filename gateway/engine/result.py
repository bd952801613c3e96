"""What a statement returns: the answer, lazily; the Position it was read at; every partition's outcome.

A Result is lazy: how it is read decides the work done, never a flag given
beforehand. ``rows()`` / ``iter_batches()`` give DuckDB's own Python values
(in chunks as DuckDB produces them), ``arrow_batches()`` / ``to_arrow()``
Arrow without a Python object per row, ``relation`` a DuckDB relation over
the statement's reads (joinable further, on ``cursor``). The answer behind it
(``answers.py``) owns what the statement still holds (a cursor, store
snapshots, the budget) until it is read to the end or ``close()`` is called.

Whatever form is read first is the one computed; a second form is derived
from what the first kept (the rows of ``rows()``, the table of
``to_arrow()``). Streams (``iter_batches``, ``arrow_batches``) keep nothing
and can be read once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import duckdb
import pyarrow as pa

from planner.plan import StatementKind
from stores.iqv2.position import Position

from .answers import Columns, DuckAnswer, InHand, Rows
from .outcomes import PartitionOutcome
from .types import rows_table, table_rows

__all__ = ["PartitionOutcome", "Result", "CHUNK_ROWS"]

CHUNK_ROWS = 1000  # rows iter_batches hands out at a time


class Result:
    """An answer and its consistency token (see the module doc)."""

    __slots__ = ("columns", "position", "partitions", "statement", "settings", "route", "_answer", "_rows",
                 "_table", "_relation", "_cursor", "_pool", "_long_chains", "_streamed")

    def __init__(self, *, columns: Columns, position: Position, partitions: list[PartitionOutcome],
                 statement: StatementKind, answer: InHand | DuckAnswer, pool: Any = None,
                 settings: Mapping[str, Any] | None = None, route: str = "duckdb", long_chains: bool = False) -> None:
        self.columns = columns
        #: which way the answer was made (routes.py): point lane, static, fast path, evaluator or duckdb
        self.route = route
        self.position = position
        self.partitions = partitions
        self.statement = statement
        self.settings = dict(settings) if settings else {}
        self._answer = answer
        self._rows: Rows | None = answer.rows if type(answer) is InHand else None
        self._table: pa.Table | None = None
        self._relation: duckdb.DuckDBPyRelation | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._pool = pool  # makes a cursor for ``relation`` over rows in hand
        self._long_chains = long_chains  # on the pool's connection without the expression rewriter (duck.py)
        self._streamed = False

    @classmethod
    def in_hand(cls, columns: Columns, rows: Rows, position: Position, partitions: list[PartitionOutcome],
                statement: StatementKind = StatementKind.SELECT, pool: Any = None,
                settings: Mapping[str, Any] | None = None, route: str = "static", long_chains: bool = False) -> Result:
        """A whole answer already in hand: the point lane, the fast path, the evaluator, statements without rows
        read from a store."""
        return cls(columns=columns, position=position, partitions=partitions, statement=statement,
                   answer=InHand(rows), pool=pool, settings=settings, route=route, long_chains=long_chains)

    # -- rows -----------------------------------------------------------------------------------------------
    @property
    def rows_in_hand(self) -> Rows | None:
        """The rows when the whole answer is already here (a face then renders it in one piece), else None."""
        return self._rows

    def rows(self) -> Rows:
        """Every row, as DuckDB hands rows out (the row limit applies)."""
        if self._rows is None:
            if self._table is not None:
                self._rows = table_rows(self._table)
            else:
                self._check_unstreamed()
                self._rows = [r for chunk in self._answer.chunks(CHUNK_ROWS) for r in chunk]  # type: ignore[union-attr]
        return self._rows

    fetchall = rows

    def iter_batches(self, max_rows: int = CHUNK_ROWS) -> Iterator[Rows]:
        """Rows in chunks of at most ``max_rows``, as DuckDB produces them: nothing is kept, memory is a chunk's.

        Errors the engine finds while streaming (row limit, timeout) are
        raised from here, after earlier chunks were handed out: the HTTP faces
        send them in-band.
        """
        if self._rows is not None or self._table is not None:
            yield from _chunks(self.rows(), max_rows)
            return
        self._check_unstreamed()
        self._streamed = True
        for chunk in self._answer.chunks(max_rows):  # type: ignore[union-attr]
            yield from _chunks(chunk, max_rows)

    def first_chunk(self) -> tuple[Rows, Iterator[Rows] | None]:
        """(the first chunk of rows, the chunks after it), read before a face sends anything, so an error there
        keeps its status code. The rest is None when the first chunk is all there is; the result is then
        closed, as it is on an error here."""
        try:
            rows = self._rows
            if rows is not None and len(rows) <= CHUNK_ROWS:
                self.close()
                return rows, None
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

    @property
    def streaming(self) -> bool:
        """Rows still to come from DuckDB (the statement holds its resources until they are read or closed)."""
        return self._rows is None and self._table is None and isinstance(self._answer, DuckAnswer)

    @property
    def rows_out(self) -> int:
        """Rows handed out so far without reading any more (a whole answer: all of them): what an audit counts."""
        if self._rows is not None:
            return len(self._rows)
        if self._table is not None:
            return self._table.num_rows
        return int(getattr(self._answer, "seen", 0))

    @property
    def row_count(self) -> int:
        if self._table is not None and self._rows is None:
            return self._table.num_rows
        return len(self.rows())

    # -- Arrow ----------------------------------------------------------------------------------------------
    def arrow_batches(self) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The answer as Arrow record batches; as DuckDB produces them when nothing was read yet (once)."""
        if self._table is None and self._rows is None:
            self._check_unstreamed()
            self._streamed = True
            return self._answer.batches()  # type: ignore[union-attr]
        table = self.to_arrow()
        return table.schema, iter(table.to_batches())

    def to_arrow(self) -> pa.Table:
        if self._table is None:
            if self._rows is not None:
                self._table = rows_table(self.columns, self._rows)
            else:
                schema, batches = self.arrow_batches()
                self._table = pa.Table.from_batches(list(batches), schema=schema)
        return self._table

    # -- DuckDB -----------------------------------------------------------------------------------------------
    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        """The statement as a DuckDB relation on ``cursor`` (joinable with its other relations).

        Over the statement's own reads when nothing was read yet (no Python
        rows: the stores' Arrow straight into DuckDB), else over what was
        read. The statement's budget ends here: the relation is yours to run.
        """
        if self._relation is None:
            answer = self._answer
            rel = answer.relation() if isinstance(answer, DuckAnswer) and not self._streamed \
                and self._rows is None and self._table is None else None
            if rel is not None:
                self._cursor = answer.cursor  # type: ignore[union-attr]
                self._relation = rel
            else:
                table = self.to_arrow()
                if self._cursor is None:  # a cursor of its own (the statement's went back to its pool)
                    self._cursor = self._pool.cursor(self._long_chains) if self._pool is not None else duckdb.connect()
                self._relation = self._cursor.from_arrow(table)
        return self._relation

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB cursor the relation lives on: build further relations on it, not on another connection."""
        self.relation  # noqa: B018 - makes sure the cursor exists
        assert self._cursor is not None
        return self._cursor

    # -- ending -----------------------------------------------------------------------------------------------
    def on_end(self, fn: Any) -> None:
        """Call ``fn`` once the statement has ended (at once for an answer in hand)."""
        if isinstance(self._answer, DuckAnswer):
            self._answer.on_end(fn)
        else:
            fn()

    def close(self) -> None:
        """Release what the statement still holds (idempotent; a read to the end has released it already)."""
        self._answer.close()
        cursor, self._cursor = self._cursor, None
        if cursor is not None and (not isinstance(self._answer, DuckAnswer) or self._answer.cursor is not cursor):
            try:
                cursor.close()
            except duckdb.Error:
                pass
        self._relation = None

    def _check_unstreamed(self) -> None:
        if self._streamed:
            raise RuntimeError("the rows of this result were streamed already (iter_batches and arrow_batches "
                               "read them once)")

    @property
    def failures(self) -> list[PartitionOutcome]:
        return [p for p in self.partitions if p.is_failure]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows())

    def __len__(self) -> int:
        return self.row_count

    def __enter__(self) -> Result:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Result({self.statement.value}, columns={[c for c, _ in self.columns]}, "
                f"position={self.position})")


def _chunks(rows: Rows, n: int) -> Iterator[Rows]:
    for i in range(0, len(rows), n):
        yield rows[i:i + n]
