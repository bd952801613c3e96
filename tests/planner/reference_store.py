"""A reference model of the stores for differential tests: rows in memory, IQv2 semantics from kafka-iqv2.md.

It answers a plan's requests the way DESIGN §4 says a store does (keys compare
by SQL type, range bounds inclusive, DOES_NOT_EXIST beyond the partition
count), builds each scan's relation (data rows + one row per failed
partition) in DuckDB and runs the residual SQL. The same rows, loaded as a
plain table, answer the original SQL directly: both answers must agree.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import duckdb

from planner.plan import Plan
from stores.partitioner import partition_for_key
from stores.query import (
    KeyQuery,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.schema import SqlType, StoreKind, StoreSpec

_DUCK_TYPES = {
    SqlType.BIGINT: "BIGINT", SqlType.INTEGER: "INTEGER", SqlType.DOUBLE: "DOUBLE", SqlType.VARCHAR: "VARCHAR",
    SqlType.BOOLEAN: "BOOLEAN", SqlType.TIMESTAMP: "TIMESTAMP", SqlType.DATE: "DATE",
}


def _to_sql_value(col_type: SqlType, v: Any) -> Any:
    if v is None:
        return None
    if col_type is SqlType.TIMESTAMP:
        return datetime.fromtimestamp(v / 1000, tz=timezone.utc).replace(tzinfo=None)
    return v


class ReferenceStore:
    """Rows of one store: dicts of column -> canonical value (epoch ms for TIMESTAMP columns)."""

    def __init__(self, spec: StoreSpec, rows: list[dict[str, Any]]) -> None:
        self.spec = spec
        self.rows = rows
        self.partition_of = [partition_for_key(r[spec.key.name], spec.partitions, spec.key.type) for r in rows]

    def _sort_key(self, row: dict[str, Any]) -> tuple:
        extra = row.get("window_start", 0) if self.spec.kind in (StoreKind.WINDOW, StoreKind.SESSION) else 0
        return (row[self.spec.key.name], extra)

    def answer(self, request: Any) -> list[tuple[int, dict[str, Any] | None, str | None]]:
        """(partition, row, failure reason) triples for every partition the request names."""
        out: list[tuple[int, dict[str, Any] | None, str | None]] = []
        q = request.query
        key = self.spec.key.name
        for p in sorted(request.partitions):
            if p >= self.spec.partitions:
                out.append((p, None, "DOES_NOT_EXIST"))
                continue
            rows = [r for r, rp in zip(self.rows, self.partition_of) if rp == p]
            if isinstance(q, (KeyQuery, TimestampedKeyQuery)):
                hit = [r for r in rows if r[key] == q.key]
            elif isinstance(q, (RangeQuery, TimestampedRangeQuery)):
                hit = [r for r in rows if (q.lower is None or r[key] >= q.lower) and (q.upper is None or r[key] <= q.upper)]
            elif isinstance(q, WindowKeyQuery):
                hit = [r for r in rows if r[key] == q.key and q.time_from <= r["window_start"] <= q.time_to]
            elif isinstance(q, WindowRangeQuery) and q.key is None:
                hit = [r for r in rows if q.time_from <= r["window_start"] <= q.time_to]
            elif isinstance(q, WindowRangeQuery):
                hit = [r for r in rows if r[key] == q.key]
            else:
                raise AssertionError(f"reference store has no handler for {q!r}")
            out += [(p, r, None) for r in hit]
        return out


def _insert(con: duckdb.DuckDBPyConnection, table: str, values: list[list[Any]]) -> None:
    """One multi-row INSERT (executemany costs a round trip per row)."""
    if not values:
        return
    row = "(" + ", ".join("?" * len(values[0])) + ")"
    con.execute(f'INSERT INTO "{table}" VALUES ' + ", ".join([row] * len(values)), [v for r in values for v in r])


def run_plan(plan: Plan, stores: dict[str, ReferenceStore]) -> list[tuple]:
    """The plan's answer: requests against the reference stores, relations in DuckDB, then the residual SQL."""
    con = duckdb.connect()
    for scan in plan.scans:
        store = stores[scan.store]
        spec = store.spec
        answers = [a for r in scan.requests for a in store.answer(r)]
        data = [a for a in answers if a[2] is None]
        if scan.order is not None:
            data.sort(key=lambda a: store._sort_key(a[1]), reverse=scan.order is ResultOrder.DESCENDING)
        if scan.limit is not None:
            data = data[: scan.limit]
        failures = [a for a in answers if a[2] is not None]
        cols = spec.columns()
        ddl = ", ".join(f'"{c.name}" {_DUCK_TYPES[c.type]}' for c in cols)
        con.execute(f'CREATE TABLE "{scan.relation}" ({ddl}, "_partition" INTEGER, "_position" VARCHAR, '
                    '"_failure_reason" VARCHAR, "_failure_message" VARCHAR)')
        values = [[_to_sql_value(c.type, row.get(c.name)) for c in cols] + [p, "{}", None, None] for p, row, _ in data]
        values += [[None] * len(cols) + [p, "{}", reason, f"partition {p}: {reason}"] for p, _, reason in failures]
        _insert(con, scan.relation, values)
    result = con.execute(plan.residual_sql).fetchall()
    con.close()
    return result


def run_direct(sql: str, stores: dict[str, ReferenceStore], params: Any = None, *, with_partition: bool = False) -> list[tuple]:
    """The original SQL over the same rows loaded as plain tables (the ground truth)."""
    con = duckdb.connect()
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
    return result
