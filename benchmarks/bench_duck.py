"""Statements DuckDB must run pay DuckDB's cost, not the gateway's on top (issue 50 item 2).

On the shop state (``revenue``, a timestamped key-value store, and
``last_order``, a versioned store, 300,000 customers each over 4
partitions; 30,000 in quick mode), in process, ``Gateway.sql(...).rows()``:

- a small statement the point lane cannot answer alone (a scalar function of
  the key: ``regexp_replace``), p50;
- a join of two point lookups on their keys (``JOIN … USING (key) WHERE
  r.key = …``), p50;
- a statement only DuckDB answers (``md5`` of the key: no lane or evaluator
  takes it), p50: what the gateway adds on top of DuckDB's own cost.

Each beside its two floors measured in the same run: the point lane (one
lookup, or two lookups one after the other for the join) and DuckDB's own
time for the same SQL over already-registered 1-row tables of the same
columns (a prepared statement on one cursor, the rows fetched): what a
statement costs when nothing but DuckDB stands between the rows and the
answer. Goals: <= 0.3 ms and <= 1 ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from benchmarks.common import Figure, percentile, scratch_dir, time_calls

__all__ = ["run", "SMALL", "JOIN", "DUCK_ONLY", "fill_shop"]

SMALL = "SELECT key, regexp_replace(key, 'c', 'k') FROM revenue WHERE key = ?"
JOIN = "SELECT r.key, l.amount FROM revenue r JOIN last_order l USING (key) WHERE r.key = ?"
DUCK_ONLY = "SELECT key, md5(key) FROM revenue WHERE key = ?"
POINT = "SELECT key, revenue FROM revenue WHERE key = ?"
POINT_LAST = "SELECT key, amount FROM last_order WHERE key = ?"
T0 = 1_700_000_000_000


def fill_shop(state: Path, keys: int) -> Any:
    """A running StreamsApp with ``revenue`` and ``last_order`` holding ``keys`` customers each (``c0000000`` …)."""
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
    from stores.engine.change import Change
    from stores.iqv2.position import Position

    revenue = StoreSpec("revenue", StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.VARCHAR, nullable=False),
                        (Column("revenue", SqlType.DOUBLE), Column("orders", SqlType.BIGINT)), partitions=4,
                        source_topics=("orders",))
    last = StoreSpec("last_order", StoreKind.VERSIONED, Column("key", SqlType.VARCHAR, nullable=False),
                     (Column("amount", SqlType.DOUBLE), Column("item", SqlType.VARCHAR)), partitions=4,
                     source_topics=("orders",), history_retention_ms=365 * 24 * 3600 * 1000)
    app = StreamsApp(StoreTopology([revenue, last]), application_id="bench-duck", state_dir=state,
                     synchronous="NORMAL")
    app.start()
    step = 50_000
    for b, lo in enumerate(range(0, keys, step)):
        hi = min(keys, lo + step)
        pos = Position.from_map({"orders": {0: hi - 1}})
        app.writer("revenue").write_batch(b, [Change(f"c{i:07d}", (i * 1.5, i % 17), T0 + i) for i in range(lo, hi)],
                                          pos)
        app.writer("last_order").write_batch(
            b, [Change(f"c{i:07d}", (float(i % 1000) / 4, f"item{i % 8}"), timestamp=T0 + i) for i in range(lo, hi)],
            pos)
    return app


def _duck_floor(sql: str, tables: dict[str, pa.Table], params: list[Any], n: int) -> float:
    """p50 seconds of DuckDB alone: ``sql`` prepared on one cursor over already-registered 1-row tables."""
    con = duckdb.connect()
    cur = con.cursor()
    for name, table in tables.items():
        cur.register(name, table)

    def once() -> None:
        cur.execute(sql, params).fetchall()

    took = percentile(time_calls(once, n), 50)
    con.close()
    return took


def _tables(gw: Any, key: str) -> dict[str, pa.Table]:
    """1-row Arrow tables of the two stores' columns as the statements name them (``revenue``, ``last_order``)."""
    out = {}
    for store in ("revenue", "last_order"):
        rows = gw.sql(f"SELECT * FROM {store} WHERE key = ?", params=[key], arrow=True).to_arrow()
        out[store] = rows
    return out


def run(quick: bool = False) -> list[Figure]:
    from gateway.engine.gateway import Gateway

    keys, n = (30_000, 1_000) if quick else (300_000, 3_000)
    root = scratch_dir("iqgate-bench-duck-")
    app = fill_shop(root / "state", keys)
    gw = Gateway(app)
    try:
        counter = iter(range(10**9))

        def key() -> str:
            return f"c{(next(counter) * 7919) % keys:07d}"

        def p50(sql: str) -> float:
            def once() -> None:
                assert len(gw.sql(sql, params=[key()]).rows()) == 1
            return percentile(time_calls(once, n), 50)

        def lanes() -> None:
            k = key()
            assert len(gw.sql(POINT, params=[k]).rows()) == 1
            assert len(gw.sql(POINT_LAST, params=[k]).rows()) == 1

        small = p50(SMALL)
        join = p50(JOIN)
        duck_only = p50(DUCK_ONLY)
        lane = p50(POINT)
        two_lanes = percentile(time_calls(lanes, n), 50)
        assert gw.sql(POINT, params=["c0000001"]).route == "point lane"
        tables = _tables(gw, "c0000002")
        duck_small = _duck_floor(SMALL, tables, ["c0000002"], n)
        duck_join = _duck_floor(JOIN, tables, ["c0000002"], n)
        duck_alone = _duck_floor(DUCK_ONLY, tables, ["c0000002"], n)
        small_route = gw.sql(SMALL, params=["c0000003"]).route
        join_route = gw.sql(JOIN, params=["c0000003"]).route
        only_route = gw.sql(DUCK_ONLY, params=["c0000003"]).route
    finally:
        gw.close()
        app.close()
    note = f"{keys:,} keys per store, 4 partitions; Gateway.sql(...).rows() in process"
    small_note = f"{note}; {SMALL!r}; answered by: {small_route}"
    join_note = f"{note}; {JOIN!r}; answered by: {join_route}"
    duck_note = "the same SQL prepared on one DuckDB cursor over already-registered 1-row Arrow tables"
    return [
        Figure("small statement DuckDB runs (regexp_replace of a point lookup) p50", small * 1e6, "us",
               lane * 1e6, "the point lane p50", "<= 300 us", small * 1e6 <= 300, small_note),
        Figure("small statement DuckDB runs, against DuckDB alone", small * 1e6, "us", duck_small * 1e6,
               "DuckDB's own p50", "", None, duck_note),
        Figure("join of two point lookups on their keys p50", join * 1e6, "us", two_lanes * 1e6,
               "two point lanes p50", "<= 1000 us", join * 1e6 <= 1000, join_note),
        Figure("join of two point lookups, against DuckDB alone", join * 1e6, "us", duck_join * 1e6,
               "DuckDB's own p50", "", None, duck_note),
        Figure("statement only DuckDB answers (md5 of a point lookup), against DuckDB alone", duck_only * 1e6, "us",
               duck_alone * 1e6, "DuckDB's own p50", "", None,
               f"{note}; {DUCK_ONLY!r}; answered by: {only_route}; the ratio is the gateway's cost on top of DuckDB's"),
    ]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
