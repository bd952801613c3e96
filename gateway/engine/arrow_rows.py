"""Per-partition IQv2 results → the rows of a store relation, as Arrow or as Python tuples.

Each query type returns a differently shaped result (a value, a
ValueAndTimestamp, KeyValues over windows, VersionedRecords ...); this module
is the one place that knows those shapes, so the engine can treat every scan
as a table of the store's columns plus the pseudo-columns (``_partition``, ``_position``, ``_failure_reason``, ``_failure_message``).

Times: stores keep epoch ms; scans hand them to DuckDB as Arrow
``timestamp('ms', tz='UTC')``, answers carry them as TIMESTAMP WITH TIME ZONE
(``types.py``), Python ``datetime`` with ``tzinfo=UTC``. DATE keys are stored
as days since the epoch.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from stores.catalog.decimals import DecimalType
from stores.catalog.nested import NestedType
from stores.catalog.schema import SqlType, StoreKind, StoreSpec
from stores.engine.arrow_reads import ArrowQuery, ArrowRows
from stores.iqv2.position import Position
from stores.iqv2.query import ResultOrder, WindowKeyQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, StateQueryResult
from stores.iqv2.values import KeyValue, ValueAndTimestamp, VersionedRecord, Windowed

from .types import duck_type, scan_arrow_type

__all__ = ["ScanRows", "Failure", "collect", "StoreShapeMoved", "PSEUDO_FIELDS", "python_value", "position_json",
           "point_row_maker", "point_store_row", "PointRowMaker"]


class StoreShapeMoved(ValueError):
    """A partition answered with columns other than the planned store's: the store changed shape in between.

    What a statement planned on one catalog meets when the store is swapped
    to a rebuilt generation (a new column) before its scan reads: the engine
    plans it again on the new catalog rather than failing it.
    """


PSEUDO_FIELDS: tuple[pa.Field, ...] = (
    pa.field("_partition", pa.int32()),
    pa.field("_position", pa.string()),
    pa.field("_failure_reason", pa.string()),
    pa.field("_failure_message", pa.string()),
)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_DATE = date(1970, 1, 1)


def python_value(sql_type: SqlType | NestedType, v: Any) -> Any:
    """The Python value a client sees for a stored value (DuckDB's own conversion, without DuckDB)."""
    if v is None:
        return None
    if sql_type is SqlType.TIMESTAMP:
        return _EPOCH + timedelta(milliseconds=v)
    if sql_type is SqlType.DATE:
        return _EPOCH_DATE + timedelta(days=v)
    if isinstance(sql_type, NestedType):
        return _nested_python(sql_type, v)
    return v


def _nested_python(t: Any, v: Any) -> Any:
    """Times inside nested values as DuckDB returns them (datetime, date); MAP as a dict."""
    if v is None or not isinstance(t, NestedType):
        return python_value(t, v) if v is not None and t in (SqlType.TIMESTAMP, SqlType.DATE) else v
    if t.kind == "ARRAY":
        return [_nested_python(t.element, e) for e in v]
    if t.kind == "MAP":
        return {_nested_python(t.key, k): _nested_python(t.element, e) for k, e in v.items()}
    return {n: _nested_python(ft, v.get(n)) for n, ft in t.fields}


@dataclass(frozen=True, slots=True)
class Failure:
    store: str
    partition: int
    reason: FailureReason
    message: str
    position: Position | None


@dataclass(slots=True)
class ScanRows:
    """One scan's rows in ``spec.columns()`` order, each followed by (_partition, _position json)."""

    spec: StoreSpec
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    # Arrow scans (arrow_scans.py): (partition, position json, the partition's stream), read by the residual SQL
    streams: list[tuple[int, str | None, Any]] = field(default_factory=list)

    def schema(self) -> pa.Schema:
        cols = [pa.field(c.name, scan_arrow_type(c.type)) for c in self.spec.columns()]
        return pa.schema(cols + list(PSEUDO_FIELDS))

    def to_arrow(self, include_failures: bool, *, with_rows: bool = True) -> pa.Table:
        """The store relation; failure rows (data columns NULL) only when the statement asked for them."""
        schema = self.schema()
        width = len(self.spec.columns())
        cols: list[list[Any]] = [[] for _ in range(width + 4)]
        for row in self.rows if with_rows else ():
            for i, v in enumerate(row):
                cols[i].append(v)
            cols[width + 2].append(None)
            cols[width + 3].append(None)
        if include_failures:
            for f in self.failures:
                for i in range(width):
                    cols[i].append(None)
                cols[width].append(f.partition)
                cols[width + 1].append(position_json(f.position))
                cols[width + 2].append(f.reason.label)
                cols[width + 3].append(f.message)
        arrays = [pa.array(_arrow_ready(c, schema.field(i).type), type=schema.field(i).type) for i, c in enumerate(cols)]
        return pa.Table.from_arrays(arrays, schema=schema)

    def project(self, names: Sequence[str]) -> tuple[list[tuple[str, str]], list[tuple[Any, ...]]]:
        """``(columns, rows)`` of the named store columns as Python values (the fast path, no DuckDB)."""
        columns, picks = _projection(self.spec, tuple(names))
        if all(t is None for _, t in picks):
            out = [tuple(row[i] for i, _ in picks) for row in self.rows]
        else:
            out = [tuple(python_value(t, row[i]) if t else row[i] for i, t in picks) for row in self.rows]
        return list(columns), out


def _arrow_ready(values: list[Any], t: pa.DataType) -> list[Any]:
    """Python values pyarrow builds ``t`` from: a MAP's dict as (key, value) pairs, at any depth."""
    if not _has_map(t):
        return values
    return [_pairs(v, t) for v in values]


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    return False


def _pairs(v: Any, t: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_map(t):
        return [(k, _pairs(e, t.item_type)) for k, e in v.items()]
    if pa.types.is_list(t):
        return [_pairs(e, t.value_type) for e in v]
    if pa.types.is_struct(t):
        return {t.field(i).name: _pairs(v.get(t.field(i).name), t.field(i).type) for i in range(t.num_fields)}
    return v


@functools.lru_cache(maxsize=1024)
def _projection(spec: StoreSpec, names: tuple[str, ...]) -> tuple[tuple[tuple[str, str], ...],
                                                                   tuple[tuple[int, SqlType | None], ...]]:
    """(columns, (row index, type needing conversion)) of a fast-path projection; cached per store and names."""
    index = {c.name: (i, c.type) for i, c in enumerate(spec.columns())}
    index["_partition"] = (len(index), SqlType.INTEGER)
    picks = []
    columns = []
    for n in names:
        if n not in index:
            raise KeyError(f"fast path column {n!r} is not a column of store {spec.name!r}")
        i, t = index[n]
        picks.append((i, t if t in (SqlType.TIMESTAMP, SqlType.DATE) or isinstance(t, NestedType) else None))
        columns.append((n, duck_type(t)))
    return tuple(columns), tuple(picks)


# (key, value tuple, record timestamp, partition, position) → the row a point lookup answers
PointRowMaker = Callable[[Any, tuple[Any, ...], Any, int, Position], tuple[Any, ...]]


@functools.lru_cache(maxsize=1024)
def point_store_row(spec: StoreSpec) -> PointRowMaker:
    """A key-value store's point lookup answer as the row ``ScanRows`` holds for it: the store's columns, then
    ``_partition`` and ``_position`` (what a residual program's columns index)."""
    if spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE:
        return lambda key, value, ts, partition, position: (key, *value, ts, partition, position.to_json())
    return lambda key, value, ts, partition, position: (key, *value, partition, position.to_json())


@functools.lru_cache(maxsize=1024)
def point_row_maker(spec: StoreSpec, names: tuple[str, ...]) -> tuple[tuple[tuple[str, str], ...], PointRowMaker]:
    """(columns, maker) of a key-value store's point lookup answering ``names``: the row ``ScanRows.project``
    gives for a KeyQuery's (or a TimestampedKeyQuery's) answer, built from the parts the point lane reads
    (``Gateway.point``), without a ScanRows around one row."""
    columns, picks = _projection(spec, names)  # store columns and _partition only: never _position
    timestamped = spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE

    def store_row(key: Any, value: tuple[Any, ...], ts: Any, partition: int, _position: Any) -> tuple[Any, ...]:
        return (key, *value, ts, partition) if timestamped else (key, *value, partition)

    if any(t is not None for _, t in picks):
        def converted(key: Any, value: tuple[Any, ...], ts: Any, partition: int, position: Any) -> tuple[Any, ...]:
            row = store_row(key, value, ts, partition, position)
            return tuple(python_value(t, row[i]) if t else row[i] for i, t in picks)
        return columns, converted
    if not picks:
        return columns, lambda key, value, ts, partition, position: ()
    if len(picks) == 1:
        (only, _), = picks
        return columns, lambda key, value, ts, partition, position: (
            store_row(key, value, ts, partition, position)[only],)
    pick = operator.itemgetter(*(i for i, _ in picks))
    return columns, lambda key, value, ts, partition, position: pick(store_row(key, value, ts, partition, position))


def position_json(position: Position | None) -> str | None:
    """Compact JSON of a position (cached on it: a store's position repeats on every read until its next batch)."""
    return None if position is None else position.to_json()


class _Shaper:
    """Builds a row in the store's column order from the parts a result carries."""

    __slots__ = ("kind", "nvals", "store", "size", "composite")

    def __init__(self, spec: StoreSpec) -> None:
        self.kind = spec.kind
        self.nvals = len(spec.values)
        self.store = spec.name
        self.size = spec.window_size_ms
        self.composite = spec.composite

    def row(self, key: Any, value: Any, ts: int | None = None, ws: int | None = None, we: int | None = None,
            vt: int | None = None) -> tuple[Any, ...]:
        if self.composite:  # the key tuple becomes the key columns
            row = self._row(None, value, ts, ws, we, vt)
            return (*key, *row[1:])
        return self._row(key, value, ts, ws, we, vt)

    def _row(self, key: Any, value: Any, ts: int | None = None, ws: int | None = None, we: int | None = None,
             vt: int | None = None) -> tuple[Any, ...]:
        if isinstance(value, ValueAndTimestamp):
            ts = value.timestamp
            value = value.value
        elif isinstance(value, VersionedRecord):
            ts, vt = value.timestamp, value.valid_to
            value = value.value
        if not isinstance(value, tuple) or len(value) != self.nvals:
            raise StoreShapeMoved(f"store {self.store!r} returned a value {value!r}; expected a tuple of {self.nvals} values")
        kind = self.kind
        if kind is StoreKind.KEY_VALUE:
            return (key, *value)
        if kind is StoreKind.TIMESTAMPED_KEY_VALUE:
            return (key, *value, ts)
        if kind is StoreKind.VERSIONED:
            return (key, *value, ts, vt)
        if we is None and ws is not None and self.size is not None:
            we = ws + self.size
        return (key, ws, we, *value)


def _data_rows(shaper: _Shaper, request: StateQueryRequest, result: Any) -> Iterable[tuple[Any, ...]]:
    """Rows of one successful partition result, whatever the query type returned."""
    query = request.query
    if result is None:
        return ()
    if isinstance(result, (tuple, ValueAndTimestamp, VersionedRecord)):  # point lookups
        return (shaper.row(query.key, result),)
    items = result.remaining() if hasattr(result, "remaining") else list(result)
    out = []
    is_window_key = isinstance(query, WindowKeyQuery)
    for item in items:
        if isinstance(item, VersionedRecord):  # MultiVersionedKeyQuery
            out.append(shaper.row(query.key, item))
        elif isinstance(item, KeyValue) or (isinstance(item, tuple) and len(item) == 2):
            k, v = item
            if isinstance(v, VersionedRecord):  # MultiVersionedRangeQuery
                out.append(shaper.row(k, v))
            elif is_window_key:
                out.append(shaper.row(query.key, v, ws=k))
            elif isinstance(k, Windowed):
                out.append(shaper.row(k.key, v, ws=k.window.start, we=k.window.end))
            else:
                out.append(shaper.row(k, v))
        else:
            raise ValueError(f"store {shaper.store!r} returned an item {item!r} for {query!r}")
    return out


RawBuilder = Callable[[tuple[Any, ...], Any, tuple[Any, ...]], tuple[Any, ...]]


@functools.lru_cache(maxsize=256)
def _raw_builder(spec: StoreSpec, row_columns: tuple[str, ...]) -> RawBuilder | None:
    """Raw range rows (``RowIterator.remaining_rows``) → store column order + tail, or None to take the slow path.

    A million-row scan through KeyValue/ValueAndTimestamp objects held about
    six objects per row at once; the raw rows need one reordering tuple.
    BOOLEAN columns are stored as 0/1 and need decoding: slow path.
    """
    if spec.key.type is SqlType.BOOLEAN or spec.composite or isinstance(spec.key.type, DecimalType) or any(
            c.type is SqlType.BOOLEAN or c.nested or isinstance(c.type, DecimalType) for c in spec.values):
        return None  # stored forms readers do not get as they are: decoded on the slow path
    lead = len(row_columns)
    vals = tuple(range(lead, lead + len(spec.values)))
    kind = spec.kind
    if kind is StoreKind.KEY_VALUE and row_columns == ("key",):
        return lambda r, _key, tail: r + tail
    if kind is StoreKind.TIMESTAMPED_KEY_VALUE and row_columns == ("key", "timestamp"):
        pick = operator.itemgetter(0, *vals, 1)
    elif kind in (StoreKind.WINDOW, StoreKind.SESSION) and row_columns == ("key", "window_start", "window_end",
                                                                                "timestamp"):
        pick = operator.itemgetter(0, 1, 2, *vals)
    elif kind is StoreKind.VERSIONED and row_columns == ("valid_from", "valid_to"):
        pick_v = operator.itemgetter(*vals, 0, 1)
        return lambda r, key, tail: (key, *pick_v(r), *tail)
    elif kind is StoreKind.VERSIONED and row_columns == ("key", "valid_from", "valid_to"):
        pick = operator.itemgetter(0, *vals, 1, 2)
    else:
        return None
    return lambda r, _key, tail: pick(r) + tail


def collect(spec: StoreSpec, answers: Sequence[tuple[StateQueryRequest, StateQueryResult]],
            order: ResultOrder | None, limit: int | None) -> ScanRows:
    """Concatenate every partition's rows, merge them in key order when asked, then apply the limit.

    On an error, every partition's stream is closed: each holds a read transaction.
    """
    try:
        return _collect(spec, answers, order, limit)
    except BaseException:
        for _, answer in answers:
            for qr in answer.partition_results.values():
                if not qr.is_failure and isinstance(qr.result, ArrowRows):
                    qr.result.close()
        raise


def _collect(spec: StoreSpec, answers: Sequence[tuple[StateQueryRequest, StateQueryResult]],
             order: ResultOrder | None, limit: int | None) -> ScanRows:
    shaper = _Shaper(spec)
    names: list[tuple[str, pa.DataType]] | None = None
    scan = ScanRows(spec)
    rows = scan.rows
    for request, answer in answers:
        for partition, qr in answer.partition_results.items():
            if qr.is_failure:
                scan.failures.append(Failure(spec.name, partition, qr.failure_reason, qr.failure_message,
                                             qr.position))
                continue
            tail = (partition, position_json(qr.position))
            result = qr.result
            if isinstance(result, ArrowRows):
                if names is None:
                    names = [(f.name, f.type) for f in scan.schema()][: -len(PSEUDO_FIELDS)]
                got = [(f.name, f.type) for f in result.schema]
                if got != names:
                    raise StoreShapeMoved(f"store {spec.name!r} partition {partition} answered with columns "
                                          f"{_columns_text(got)}; the statement was planned on {_columns_text(names)}")
                scan.streams.append((partition, tail[1], result))
                continue
            shaped = getattr(result, "shaped_rows", None)
            if shaped is not None:  # a peer's answer (gateway/routing): already the store relation's rows
                if isinstance(request.query, ArrowQuery):  # a streamed scan: the peer's rows become one batch
                    scan.streams.append((partition, tail[1], _RowsStream(scan.schema(), shaped)))
                else:
                    rows.extend([r + tail for r in shaped])
                continue
            build = _raw_builder(spec, result.row_columns) if hasattr(result, "remaining_rows") else None
            if build is not None:
                raw = result.remaining_rows()
                width = len(result.row_columns) + shaper.nvals
                if raw and len(raw[0]) != width:  # one SELECT: every row has the first row's width
                    raise StoreShapeMoved(f"store {spec.name!r} returned rows of {len(raw[0]) - len(result.row_columns)}"
                                          f" values; expected a tuple of {shaper.nvals} values")
                key = getattr(request.query, "key", None)
                rows.extend([build(r, key, tail) for r in raw])
                continue
            for r in _data_rows(shaper, request, result):
                rows.append(r + tail)
    if order is not None and order is not ResultOrder.ANY and len(rows) > 1:
        rows.sort(key=_order_key(spec), reverse=order is ResultOrder.DESCENDING)
    if limit is not None and len(rows) > limit:
        del rows[limit:]
    return scan


def _columns_text(columns: list[tuple[str, pa.DataType]]) -> str:
    return "[" + ", ".join(f"{n} {t}" for n, t in columns) + "]"


class _RowsStream:
    """Rows already in memory (a peer's answer to a streamed scan) as the one-batch stream the scan expects."""

    def __init__(self, schema: pa.Schema, rows: list[tuple[Any, ...]]) -> None:
        self._schema = pa.schema(list(schema)[: len(schema) - len(PSEUDO_FIELDS)])
        self._rows = rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        cols = list(zip(*self._rows)) if self._rows else [[] for _ in self._schema]
        yield pa.RecordBatch.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, self._schema)],
                                         schema=self._schema)

    def close(self) -> None:
        self._rows = []


def _order_key(spec: StoreSpec):  # noqa: ANN202 - a sort key function
    """Key first, then window start / valid_from: the order a single sorted store would produce."""
    nk = len(spec.key_columns())
    if nk > 1:  # a composite key sorts as its tuple (the stored bytes' order)
        if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
            return lambda r: (r[:nk], r[nk])
        if spec.kind is StoreKind.VERSIONED:
            j = nk + len(spec.values)
            return lambda r: (r[:nk], r[j])
        return lambda r: r[:nk]
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        return lambda r: (r[0], r[1])
    if spec.kind is StoreKind.VERSIONED:
        i = 1 + len(spec.values)
        return lambda r: (r[0], r[i])
    return lambda r: r[0]
