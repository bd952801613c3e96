"""Apache Superset 6.1, driven over its REST API as a user would, against the shop pipeline.

Superset runs from its own venv (tests/toolchain.py builds and caches it) with
``iqgate-client[superset]`` installed from this checkout, on a free 127.0.0.1
port, its metadata in SQLite. For each way Superset can reach iqgate
(``iqgate://`` through the client's dialect and engine spec; ``postgresql://``
over the PG port with Superset's own Postgres spec) the test adds the
database, lists schemas, tables and columns, creates datasets for a key-value
and a window store (and a virtual one: a sub-query in FROM), runs SQL Lab, and
asks ``/api/v1/chart/data`` for a top-10 bar chart, a big number and a
per-minute time series — each answer compared with the same question over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from stores.catalog.streams import streams_of
from tests.bi.conftest import ShopServer
from tests.bi.superset_app import Superset

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class _Starting:
    """Superset starting in a thread while the pipeline loads (both take tens of seconds)."""

    def __init__(self, workdir: Path) -> None:
        self.superset: Superset | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(workdir,), daemon=True)
        self._thread.start()

    def _start(self, workdir: Path) -> None:
        try:
            self.superset = Superset(workdir).start()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            self.error = exc

    def ready(self) -> Superset:
        self._thread.join(900)
        if self.error is not None:
            raise self.error
        assert self.superset is not None, "Superset did not start within 15 minutes"
        return self.superset


@pytest.fixture(scope="module")
def starting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Starting]:
    s = _Starting(tmp_path_factory.mktemp("superset"))
    yield s
    if s.superset is not None:
        s.superset.stop()


def _metric(column: str, aggregate: str) -> dict[str, Any]:
    return {"expressionType": "SIMPLE", "column": {"column_name": column}, "aggregate": aggregate,
            "label": f"{aggregate}({column})"}


def _chart(sup: Superset, dataset: int, query: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"datasource": {"id": dataset, "type": "table"}, "force": True, "queries": [query],
            "result_format": "json", "result_type": "full"}
    status, out = sup.api("POST", "/api/v1/chart/data", body)
    assert status == 200, out
    result = out["result"][0]
    assert not result.get("error"), result
    return result["data"]


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp() * 1000


def _drive(sup: Superset, shop: ShopServer, name: str, uri: str, schema: str) -> None:
    """Every step a user takes, for one database connection; each compared with HTTP."""
    status, out = sup.api("POST", "/api/v1/database/test_connection/", {"sqlalchemy_uri": uri, "database_name": name})
    assert status == 200, (uri, out)
    status, out = sup.api("POST", "/api/v1/database/", {"sqlalchemy_uri": uri, "database_name": name,
                                                        "expose_in_sqllab": True})
    assert status == 201, out
    db = out["id"]

    # schemas, tables, columns: exactly the stores and the queryable streams (issue 51), as the catalog has them
    status, out = sup.api("GET", f"/api/v1/database/{db}/schemas/")
    assert status == 200 and schema in out["result"], out
    assert not {"information_schema", "pg_catalog"} & set(out["result"]) or schema == "public", out
    status, out = sup.api("GET", f"/api/v1/database/{db}/tables/?q=(schema_name:{schema})")
    assert status == 200, out
    catalog = shop.gateway.catalog()
    assert sorted(t["value"] for t in out["result"]) == sorted([*catalog, *streams_of(catalog)]), out
    assert "orders" in streams_of(catalog)  # the demo publishes its source stream
    status, out = sup.api("GET", f"/api/v1/database/{db}/table_metadata/?name=revenue_per_min&schema={schema}")
    assert status == 200, out
    want_cols = [c.name for c in shop.gateway.catalog()["revenue_per_min"].columns()]
    assert [c["name"] for c in out["columns"]] == want_cols, out

    # datasets: a key-value store, a window store, and a virtual dataset (a sub-query in FROM)
    datasets = {}
    for table in ("revenue", "revenue_per_min"):
        status, out = sup.api("POST", "/api/v1/dataset/", {"database": db, "schema": schema, "table_name": table})
        assert status == 201, out
        datasets[table] = out["id"]
    status, out = sup.api("POST", "/api/v1/dataset/", {
        "database": db, "schema": schema, "table_name": f"{name}_busy_customers",
        "sql": f"SELECT key, revenue, orders FROM {schema}.revenue WHERE orders > 20"})
    assert status == 201, out
    datasets["virtual"] = out["id"]

    # SQL Lab (Superset rewrites the LIMIT to its own)
    sql = f'SELECT key, revenue FROM "{schema}"."revenue" ORDER BY revenue DESC, key'
    status, out = sup.api("POST", "/api/v1/sqllab/execute/", {"database_id": db, "sql": sql, "schema": schema,
                                                               "runAsync": False, "queryLimit": 7})
    assert status == 200 and out["status"] == "success", out
    want = shop.sql("SELECT key, revenue FROM revenue ORDER BY revenue DESC, key LIMIT 7")["rows"]
    assert [[r["key"], r["revenue"]] for r in out["data"]] == [[k, pytest.approx(v)] for k, v in want]

    # a top-10 bar chart: GROUP BY a column, ORDER BY the metric, LIMIT
    data = _chart(sup, datasets["revenue"], {"columns": ["key"], "metrics": [_metric("revenue", "SUM")],
                                             "orderby": [[_metric("revenue", "SUM"), False]], "row_limit": 10})
    want = shop.sql("SELECT key, sum(revenue) FROM revenue GROUP BY key ORDER BY 2 DESC LIMIT 10")["rows"]
    assert [(r["key"], r["SUM(revenue)"]) for r in data] == [(k, pytest.approx(v)) for k, v in want]

    # a big number
    data = _chart(sup, datasets["revenue"], {"metrics": [_metric("orders", "SUM")], "row_limit": 1})
    assert data == [{"SUM(orders)": shop.sql("SELECT sum(orders) FROM revenue")["rows"][0][0]}]
    assert data[0]["SUM(orders)"] == len(shop.orders)

    # a per-minute time series over the window store (time grain PT1M), whole range and a time filter
    axis = {"timeGrain": "PT1M", "columnType": "BASE_AXIS", "sqlExpression": "window_start", "label": "window_start",
            "expressionType": "SQL"}
    data = _chart(sup, datasets["revenue_per_min"], {
        "columns": [axis], "metrics": [_metric("orders", "SUM")], "row_limit": 10_000, "granularity": "window_start",
        "orderby": [[{"expressionType": "SQL", "sqlExpression": "window_start", "label": "window_start"}, True]],
        "time_range": "No filter"})
    want = shop.sql("SELECT date_trunc('minute', window_start) AS m, sum(orders) FROM revenue_per_min "
                    "GROUP BY 1 ORDER BY 1")["rows"]
    assert len(want) > 5
    assert [(r["window_start"], r["SUM(orders)"]) for r in data] == [(_ms(m), n) for m, n in want]
    lo, hi = want[2][0], want[5][0]
    data = _chart(sup, datasets["revenue_per_min"], {
        "columns": [axis], "metrics": [_metric("orders", "SUM")], "row_limit": 10_000, "granularity": "window_start",
        "time_range": f"{lo[:19]} : {hi[:19]}"})
    assert sorted((r["window_start"], r["SUM(orders)"]) for r in data) == [(_ms(m), n) for m, n in want[2:5]]

    # a table chart on the virtual dataset: GROUP BY an expression, ORDER BY a metric, LIMIT/OFFSET
    bucket = {"expressionType": "SQL", "sqlExpression": "CAST(orders / 5 AS INTEGER) * 5", "label": "bucket"}
    data = _chart(sup, datasets["virtual"], {"columns": [bucket], "metrics": [_metric("revenue", "COUNT")],
                                             "orderby": [[_metric("revenue", "COUNT"), False], [bucket, True]],
                                             "row_limit": 3, "row_offset": 1})
    want = shop.sql("SELECT CAST(orders / 5 AS INTEGER) * 5 AS b, count(revenue) FROM revenue WHERE orders > 20 "
                    "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3 OFFSET 1")["rows"]
    assert [(r["bucket"], r["COUNT(revenue)"]) for r in data] == [tuple(w) for w in want]


def test_superset_over_iqgate_url(starting: _Starting, shop_server: ShopServer) -> None:
    sup = starting.ready()
    _drive(sup, shop_server, "iqgate_shop", "iqgate://" + shop_server.http_url.split("//", 1)[1], "main")
