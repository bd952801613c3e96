"""Scans that stay Arrow from the store file to DuckDB: no Python object per row, memory bounded by a batch.

A scan that reads ranges (a full scan, a key range, window starts, version
history) is asked as ``ArrowQuery`` (stores/engine/arrow_reads.py): each
partition answers with a stream of record batches holding its own read
transaction. ``relation_reader`` chains them, partition after partition,
adding the pseudo-columns (``_partition``, ``_position``, failure columns),
into ONE ``pyarrow.RecordBatchReader`` that DuckDB scans as it runs the
residual SQL, so the rows flow store → Arrow → DuckDB → the response in
batches. A statement that reads the relation more than once (a self-join)
gets it as a table instead, read from the same streams.

A pushed-down ``ORDER BY key`` merges partitions: each partition is read in
key order, with a pushed ``LIMIT`` only its first ``limit`` rows, and the
union is sorted by Arrow (in C), then cut to the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from planner.plan import StoreScan
from stores.catalog.schema import StoreKind, StoreSpec
from stores.engine.arrow_reads import ArrowQuery, ArrowRows
from stores.iqv2.query import ResultOrder
from stores.iqv2.request import StateQueryRequest

__all__ = ["streamable", "as_arrow_requests", "relation_reader", "reads_once", "close_streams"]


def streamable(scan: StoreScan, spec: StoreSpec) -> bool:
    """Every request of the scan reads a range the Arrow path answers (not key lookups: those are small).

    The Arrow path reads SQLite's columns as they are stored, so it takes stores whose every column is a plain
    type stored as itself; composite keys (tuple-encoded bytes) and nested or binary values go through the
    store's codec on the row path.
    """
    return (bool(scan.requests) and ArrowQuery.reads_spec(spec)
            and all(ArrowQuery.supports(r.query) for r in scan.requests))


def as_arrow_requests(scan: StoreScan, batch_rows: int) -> StoreScan:
    from dataclasses import replace

    return replace(scan, requests=tuple(_arrow_request(r, batch_rows) for r in scan.requests))


def _arrow_request(r: StateQueryRequest, batch_rows: int) -> StateQueryRequest:
    return r.with_query(ArrowQuery(r.query, batch_rows))  # type: ignore[arg-type]


# Statements DuckDB runs by scanning their input more than once, however often they name it: a recursive CTE
# reads its recursive part once per step, and PIVOT without an IN list reads its input once to find the
# columns and again to pivot (s18: both failed as "This RecordBatchReader has already been consumed").
_SCANS_AGAIN = re.compile(r"\bWITH\s+RECURSIVE\b|\bPIVOT\b", re.IGNORECASE)


def reads_once(sql: str, relation: str) -> bool:
    """Does DuckDB scan ``relation`` once for the residual SQL (so a stream suffices)? It names it once, and no
    part of the statement is run more than once (a mention of either in a literal only costs a table)."""
    return len(re.findall(re.escape(relation), sql)) <= 1 and _SCANS_AGAIN.search(sql) is None


def close_streams(streams: Sequence[tuple[int, str | None, ArrowRows]]) -> None:
    """End the snapshots (idempotent: a stream read to the end has already ended its own)."""
    for _, _, rows in streams:
        rows.close()


def _order_keys(spec: StoreSpec, descending: bool) -> list[tuple[str, str]]:
    names = [spec.key.name]
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        names.append("window_start")
    elif spec.kind is StoreKind.VERSIONED:
        names.append("valid_from")
    way = "descending" if descending else "ascending"
    return [(n, way) for n in names]


def relation_reader(schema: pa.Schema, spec: StoreSpec, streams: list[tuple[int, str | None, ArrowRows]],
                    failures: pa.Table | None, order: ResultOrder | None, limit: int | None,
                    rows: pa.Table | None = None) -> pa.RecordBatchReader:
    """The store relation (``schema``: store columns then pseudo-columns) over the partitions' streams.

    ``rows``: partitions answered as rows instead (a peer server answering a
    partition this one lacks), part of the relation like the streams.
    """
    if order is not None and order is not ResultOrder.ANY:
        return _sorted(schema, spec, streams, failures, order, limit, rows).to_reader()
    return pa.RecordBatchReader.from_batches(schema, _chain(schema, streams, failures, limit, rows))


def _with_pseudo(schema: pa.Schema, batch: pa.RecordBatch, partition: int, position: str | None) -> pa.RecordBatch:
    n = batch.num_rows
    width = len(schema) - 4
    if batch.num_columns != width:
        raise ValueError(f"a scan batch has columns {batch.schema.names}; the relation needs {schema.names[:width]}")
    arrays = list(batch.columns)
    arrays.append(_repeated_int32(partition, n))
    arrays.append(_repeated_text(position, n))
    arrays.append(pa.nulls(n, pa.string()))
    arrays.append(pa.nulls(n, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# The pseudo-columns are made from buffers, not from Python values: pyarrow's conversion of a Python value imports
# pandas the first time (~50 MB a process, to ask "is this a DataFrame?"), which a scan need not pay.
def _repeated_int32(value: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, value, dtype=np.int32))])


def _repeated_text(text: str | None, n: int) -> pa.Array:
    if text is None:
        return pa.nulls(n, pa.string())
    data = text.encode()
    offsets = np.arange(0, (n + 1) * len(data), len(data), dtype=np.int32) if data else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _chain(schema: pa.Schema, streams: list[tuple[int, str | None, ArrowRows]], failures: pa.Table | None,
           limit: int | None, rows: pa.Table | None = None) -> Iterator[pa.RecordBatch]:
    left = limit
    try:
        if rows is not None and rows.num_rows:
            if left is not None:
                rows = rows.slice(0, left)
                left -= rows.num_rows
            yield from rows.to_batches()
        for partition, position, rows in streams:
            if left is not None and left <= 0:
                break
            for batch in rows.batches():
                if left is not None:
                    if batch.num_rows > left:
                        batch = batch.slice(0, left)
                    left -= batch.num_rows
                yield _with_pseudo(schema, batch, partition, position)
                if left is not None and left <= 0:
                    rows.close()
                    break
        if failures is not None and failures.num_rows:
            yield from failures.to_batches()
    finally:
        close_streams(streams)  # a statement that stopped early still ends every snapshot


def _sorted(schema: pa.Schema, spec: StoreSpec, streams: list[tuple[int, str | None, ArrowRows]],
            failures: pa.Table | None, order: ResultOrder, limit: int | None, rows: pa.Table | None = None) -> pa.Table:
    """Every partition's rows (its first ``limit`` when a limit is pushed) merged in key order, then cut."""
    parts: list[pa.RecordBatch] = list(rows.to_batches()) if rows is not None else []
    try:
        for partition, position, rows in streams:
            got = 0
            for batch in rows.batches():
                if limit is not None and got + batch.num_rows > limit:
                    batch = batch.slice(0, limit - got)
                got += batch.num_rows
                parts.append(_with_pseudo(schema, batch, partition, position))
                if limit is not None and got >= limit:
                    rows.close()
                    break
    finally:
        close_streams(streams)
    table = pa.Table.from_batches(parts, schema=schema)
    if table.num_rows > 1:
        table = table.sort_by(_order_keys(spec, order is ResultOrder.DESCENDING))
    if limit is not None and table.num_rows > limit:
        table = table.slice(0, limit)
    if failures is not None and failures.num_rows:
        table = pa.concat_tables([table, failures])
    return table

