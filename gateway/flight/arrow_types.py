"""One Arrow type per SQL type: what a statement's columns are as Arrow, before it runs and whichever way it ran.

The engine answers most statements through DuckDB's Arrow export, but a key
lookup answered without DuckDB (the point lane, a fast path) builds its
Arrow from Python rows, where a TIMESTAMP WITH TIME ZONE is milliseconds
rather than DuckDB's microseconds and a DECIMAL's precision is inferred from
its values. A Flight client reads the schema first (a prepared statement's
dataset schema, GetSchema, the FlightInfo) and then every answer in it, so
this face settles each SQL type's Arrow type once — as DuckDB exports it,
asked of the engine itself (``SELECT CAST(NULL AS <type>)``) — and casts a
batch that arrives in another (same values, other width or precision).

Parameter types come as PostgreSQL names (``Gateway.parameter_types``);
``parameter_type`` gives the Arrow type a client should bind.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import pyarrow as pa

from .internals import Gateway, GatewayError

__all__ = ["ArrowTypes", "parameter_type", "conform"]

_MAX_CACHED = 4096


class ArrowTypes:
    """DuckDB type name -> Arrow type, learnt from the engine and kept (None: the engine could not say)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._known: dict[str, pa.DataType | None] = {}
        self._lock = threading.Lock()

    def schema(self, columns: Sequence[tuple[str, str]], fallback: pa.Schema | None = None) -> pa.Schema:
        """The Arrow schema of ``columns`` ((name, DuckDB type) pairs). A type the engine cannot cast to takes
        its type in ``fallback`` (the answer's own), else text."""
        missing = [t for _, t in columns if t not in self._known]
        if missing:
            self._learn(list(dict.fromkeys(missing)))
        fields = []
        for i, (name, duck) in enumerate(columns):
            arrow = self._known.get(duck)
            if arrow is None:
                arrow = fallback.field(i).type if fallback is not None and i < len(fallback) else pa.string()
            fields.append(pa.field(name, arrow))
        return pa.schema(fields)

    def _learn(self, types: list[str]) -> None:
        found = self._ask(types)
        if found is None:  # one of them failed the statement: ask one by one
            found = {}
            for t in types:
                one = self._ask([t])
                found[t] = None if one is None else one[t]
        with self._lock:
            if len(self._known) + len(found) > _MAX_CACHED:
                self._known.clear()
            self._known.update(found)

    def _ask(self, types: list[str]) -> dict[str, pa.DataType | None] | None:
        sql = "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "c{i}"' for i, t in enumerate(types))
        try:
            result = self._gateway.sql(sql, arrow=True)
        except GatewayError:
            return None
        try:
            schema, batches = result.arrow_batches()
            for _ in batches:
                pass
        except GatewayError:
            return None
        finally:
            result.close()
        return {t: schema.field(i).type for i, t in enumerate(types)}


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``'s types (the same values), or as it is when it already is."""
    if batch.schema.equals(schema):
        return batch
    if batch.schema.names == schema.names and all(a.type.equals(b.type) for a, b in zip(batch.schema, schema)):
        return batch.replace_schema_metadata(schema.metadata)
    return batch.cast(schema)


_PG_SCALARS: dict[str, pa.DataType] = {
    "bigint": pa.int64(), "integer": pa.int32(), "smallint": pa.int16(), "double precision": pa.float64(),
    "real": pa.float32(), "text": pa.string(), "character varying": pa.string(), "varchar": pa.string(),
    "boolean": pa.bool_(), "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "timestamptz": pa.timestamp("us", tz="UTC"), "timestamp": pa.timestamp("us"), "date": pa.date32(),
    "bytea": pa.binary(), "time": pa.time64("us"), "uuid": pa.string(), "oid": pa.uint32(),
}
_DECIMAL = re.compile(r"^(?:decimal|numeric)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def parameter_type(pg_name: str | None) -> pa.DataType:
    """The Arrow type to bind a parameter the statement types as ``pg_name``; text when it does not decide
    (as PostgreSQL resolves an undecided parameter)."""
    if not pg_name:
        return pa.string()
    name = pg_name.strip().lower()
    if name.endswith("[]"):
        return pa.list_(parameter_type(name[:-2]))
    if name in _PG_SCALARS:
        return _PG_SCALARS[name]
    m = _DECIMAL.match(name)
    if m and 0 < int(m.group(1)) <= 38:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return pa.string()
