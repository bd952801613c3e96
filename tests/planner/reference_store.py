"""Rows for differential tests, answered two ways that must agree.

- Through the product: the rows are written into real stores (a StreamsApp
  over ``StoreTopology``, filled by its writer) and the SQL runs through the
  real ``Gateway`` — planner, IQv2 requests, Arrow, DuckDB residual SQL.
- Directly: the same rows loaded as plain DuckDB tables answer the original
  SQL (the ground truth: what the statement means without any pushdown).

TIMESTAMP columns are TIMESTAMPTZ in UTC on both sides, as the gateway shows them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position

_DUCK_TYPES = {
    SqlType.BIGINT: "BIGINT", SqlType.INTEGER: "INTEGER", SqlType.DOUBLE: "DOUBLE", SqlType.VARCHAR: "VARCHAR",
    SqlType.BOOLEAN: "BOOLEAN", SqlType.TIMESTAMP: "TIMESTAMPTZ", SqlType.DATE: "DATE",
}


def _to_sql_value(col_type: SqlType, v: Any) -> Any:
    if v is None:
        return None
    if col_type is SqlType.TIMESTAMP:
        return datetime.fromtimestamp(v / 1000, tz=timezone.utc)
    return v


class ReferenceStore:
    """Rows of one store: dicts of column -> canonical value (epoch ms for TIMESTAMP columns)."""

    def __init__(self, spec: StoreSpec, rows: list[dict[str, Any]]) -> None:
        self.spec = spec
        self.rows = rows
        self.partition_of = [partition_for_key(r[spec.key.name], spec.partitions, spec.key.type) for r in rows]

    def changes(self) -> list[Change]:
        """The rows as one batch of store writes."""
        spec = self.spec
        windowed = spec.kind in (StoreKind.WINDOW, StoreKind.SESSION)
        return [
            Change(r[spec.key.name], tuple(r.get(c.name) for c in spec.values), r.get("rowtime", 0),
                   r["window_start"] if windowed else None, r["window_end"] if windowed else None)
            for r in self.rows
        ]


@contextmanager
def product_gateway(stores: dict[str, ReferenceStore], state_dir: Path) -> Iterator[Gateway]:
    """A Gateway over a real StreamsApp whose stores hold exactly ``stores``' rows."""
    specs = [s.spec for s in stores.values()]
    app = StreamsApp(StoreTopology(specs), application_id="planner-differential", state_dir=state_dir,
                     synchronous="NORMAL")
    app.start()
    try:
        for name, store in stores.items():
            app.writer(name).write_batch(0, store.changes(), Position.from_map({"t": {0: 0}}))
        gw = Gateway(app)
        try:
            yield gw
        finally:
            gw.close()
    finally:
        app.close(10)


def _canon(rows: list[tuple]) -> list[tuple]:
    """Aware datetimes with one tzinfo object, so equal instants also print alike."""
    def one(v: Any) -> Any:
        return v.astimezone(timezone.utc) if isinstance(v, datetime) and v.tzinfo is not None else v
    return [tuple(one(v) for v in r) for r in rows]


def run_sql(gw: Gateway, sql: str, params: Any = None, *, partial: bool = False) -> list[tuple]:
    """The product's answer to ``sql``."""
    return _canon(gw.sql(sql, params=params, partial=partial).fetchall())


def _insert(con: duckdb.DuckDBPyConnection, table: str, values: list[list[Any]]) -> None:
    """One multi-row INSERT (executemany costs a round trip per row)."""
    if not values:
        return
    row = "(" + ", ".join("?" * len(values[0])) + ")"
    con.execute(f'INSERT INTO "{table}" VALUES ' + ", ".join([row] * len(values)), [v for r in values for v in r])


def run_direct(sql: str, stores: dict[str, ReferenceStore], params: Any = None, *, with_partition: bool = False) -> list[tuple]:
    """The original SQL over the same rows loaded as plain tables (the ground truth)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    lowered = sql.lower()
    for name, store in stores.items():
        if name not in lowered:
            continue  # only the stores the statement names
        cols = store.spec.columns()
        ddl = ", ".join(f'"{c.name}" {_DUCK_TYPES[c.type]}' for c in cols) + (', "_partition" INTEGER' if with_partition else "")
        con.execute(f'CREATE TABLE "{name}" ({ddl})')
        values = [[_to_sql_value(c.type, r.get(c.name)) for c in cols] + ([p] if with_partition else [])
                  for r, p in zip(store.rows, store.partition_of)]
        _insert(con, name, values)
    result = con.execute(sql, params).fetchall() if params is not None else con.execute(sql).fetchall()
    con.close()
    return _canon(result)
