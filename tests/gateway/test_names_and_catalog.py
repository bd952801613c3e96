"""Names as BI tools write them, and information_schema from the store catalog, on every face.

Expectations come from the catalog (``gw.catalog()``) and the rows written
(``Shop``), never typed in; the same statements run through the engine, HTTP
and the remote DB-API.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway import dbapi
from gateway.engine.errors import UnknownStoreError
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from planner.systables import SystemContext
from tests.gateway.gwfixtures import Http, Shop


@pytest.fixture(scope="module")
def http(gw: Gateway) -> Iterator[Http]:
    with ServerThread(create_app(gw), threads=2) as srv:
        yield Http(srv.url)


@pytest.mark.parametrize("name", ["revenue", "main.revenue", '"main"."revenue"', "public.revenue", "MAIN.Revenue",
                                  "iqgate.main.revenue", '"iqgate"."public"."revenue"'])
def test_every_spelling_of_a_store_reads_it(gw: Gateway, shop: Shop, name: str) -> None:
    rows = gw.sql(f"SELECT customer, orders FROM {name} WHERE customer = ?", ["c05"]).rows()
    assert rows == [("c05", shop.revenue["c05"][1])]


def test_schema_qualified_columns_and_describe(gw: Gateway, shop: Shop) -> None:
    rows = gw.sql("SELECT main.revenue.customer, main.revenue.orders FROM main.revenue ORDER BY 1 LIMIT 2").rows()
    assert rows == [(c, shop.revenue[c][1]) for c in sorted(shop.revenue)[:2]]
    described = gw.sql("DESCRIBE public.per_min").rows()
    assert [r[0] for r in described] == [c.name for c in gw.catalog()["per_min"].columns()]


@pytest.mark.parametrize("sql, where", [
    ("SELECT * FROM sales.revenue", "sales.revenue"),
    ('SELECT * FROM "Main2"."revenue"', "Main2"),
    ("DESCRIBE shop_schema.per_min", "shop_schema"),
])
def test_an_unknown_schema_names_the_schemas_there_are(gw: Gateway, sql: str, where: str) -> None:
    with pytest.raises(UnknownStoreError) as info:
        gw.sql(sql)
    err = info.value
    assert err.code == "UNKNOWN_SCHEMA" and where in err.message
    assert "main and public hold the stores" in err.message and err.line == 1 and err.col is not None


def test_information_schema_is_the_store_catalog(gw: Gateway) -> None:
    catalog = gw.catalog()
    tables = gw.sql("SELECT table_catalog, table_schema, table_name, table_type FROM information_schema.tables "
                    "ORDER BY table_name").rows()
    assert tables == [("iqgate", "main", n, "BASE TABLE") for n in sorted(catalog)]
    cols = gw.sql("SELECT table_name, column_name, ordinal_position, data_type, is_nullable "
                  "FROM information_schema.columns ORDER BY table_name, ordinal_position").rows()
    want = [(n, c.name, i, c.type.value if c.type.value != "TIMESTAMP" else "TIMESTAMP WITH TIME ZONE",
             "NO" if c is spec.key or not c.nullable else "YES")
            for n, spec in sorted(catalog.items()) for i, c in enumerate(spec.columns(), start=1)]
    assert cols == want
    assert [r[0] for r in gw.sql("SELECT schema_name FROM information_schema.schemata").rows()] == [
        "main", "information_schema", "pg_catalog"]


def test_postgres_clients_see_public_and_postgres_type_names(gw: Gateway) -> None:
    pg = SystemContext(schema="public", flavor="postgres")
    rows = gw.sql("SELECT DISTINCT table_schema FROM information_schema.tables", context=pg).rows()
    assert rows == [("public",)]
    types = dict(gw.sql("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'per_min'",
                        context=pg).rows())
    assert types["customer"] == "text" and types["window_start"] == "timestamp with time zone"
    assert types["orders"] == "bigint" and types["revenue"] == "double precision"


def test_nothing_but_stores_is_visible_through_the_catalog(gw: Gateway) -> None:
    """DuckDB's own catalog, the request's scan relations and the system relations' internal names stay hidden."""
    names = {r[0] for r in gw.sql("SELECT table_name FROM information_schema.tables").rows()}
    assert names == set(gw.catalog())
    classes = {r[0] for r in gw.sql("SELECT relname FROM pg_catalog.pg_class").rows()}
    assert classes == set(gw.catalog())
    for sql in ("SELECT * FROM duckdb_tables()", 'SELECT * FROM "__iq_sys_information_schema__tables"',
                "SELECT * FROM __iq_scan_0", "SELECT * FROM information_schema.character_sets",
                "SELECT * FROM system.information_schema.tables"):
        with pytest.raises(Exception) as info:
            gw.sql(sql)
        assert getattr(info.value, "code", "") in ("UNKNOWN_STORE", "UNKNOWN_SCHEMA", "FORBIDDEN_FUNCTION"), sql


def test_information_schema_over_http_and_the_remote_dbapi(gw: Gateway, http: Http) -> None:
    status, _, body = http.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                               "ORDER BY 1")
    assert status == 200 and [r[0] for r in body["rows"]] == sorted(gw.catalog())
    cur = dbapi.connect(http.url).cursor()
    cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                ["accounts"])
    assert [r[0] for r in cur.fetchall()] == [c.name for c in gw.catalog()["accounts"].columns()]
    cur.execute('SELECT count(*) FROM "main"."accounts"')
    assert cur.fetchone()[0] == gw.sql("SELECT count(*) FROM accounts").rows()[0][0]
    status, _, body = http.sql("SELECT * FROM nowhere.accounts")
    assert status == 404 and body["error"]["code"] == "UNKNOWN_SCHEMA"
