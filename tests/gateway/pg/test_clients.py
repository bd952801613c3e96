"""pg8000, psql, SQLAlchemy (``postgresql+psycopg``) and pandas against the PG port, compared with HTTP."""

from __future__ import annotations

import os
import shutil
import subprocess

import pandas as pd
import pg8000.dbapi
import pg8000.native
import pytest
import sqlalchemy as sa

from tests.gateway.gwfixtures import SPECS, Http, Shop
from tests.gateway.pg.conftest import Pg

PSQL = shutil.which("psql")
needs_psql = pytest.mark.skipif(PSQL is None and not os.environ.get("IQGATE_CI"),
                                reason="psql missing (apt-get install postgresql-client; .ci/run installs it)")


def _http_rows(server: Http, sql: str, **fields: object) -> list[list[object]]:
    status, _, body = server.sql(sql, **fields)
    assert status == 200, body
    return body["rows"]


# -- pg8000 ----------------------------------------------------------------------------------------------------
def test_pg8000_native_named_parameters(pg: Pg, server: Http, shop: Shop) -> None:
    con = pg8000.native.Connection("iqgate", host=pg.host, port=pg.port, database="iqgate", password=pg.token,
                                   timeout=30)
    try:
        for c in sorted(shop.revenue)[:5]:
            got = con.run("SELECT customer, revenue, orders FROM revenue WHERE customer = :c", c=c)
            assert got == _http_rows(server, "SELECT customer, revenue, orders FROM revenue WHERE customer = ?",
                                     params=[c])
        sql = "SELECT window_start, window_end, orders FROM per_min WHERE customer = 'c01' ORDER BY window_start"
        got = con.run(sql)
        want = sorted((ws, n) for (c, ws), (n, _r) in shop.per_min.items() if c == "c01")
        assert [(int(r[0].timestamp() * 1000), r[2]) for r in got] == want
        assert all(r[1] - r[0] == pd.Timedelta(minutes=1) for r in got)
        with pytest.raises(pg8000.native.DatabaseError) as info:
            con.run("SELECT * FROM nope")
        assert info.value.args[0]["C"] == "42P01"
    finally:
        con.close()


def test_pg8000_dbapi_and_a_wrong_password(pg: Pg, shop: Shop) -> None:
    con = pg8000.dbapi.connect(user="iqgate", host=pg.host, port=pg.port, database="iqgate", password=pg.token,
                               timeout=30)
    try:
        cur = con.cursor()
        cur.execute("SELECT id, balance FROM accounts WHERE id BETWEEN %s AND %s ORDER BY id", (-100, -50))
        assert list(cur.fetchall()) == [[k, v[1]] for k, v in sorted(shop.accounts.items()) if -100 <= k <= -50]
        assert [d[0] for d in cur.description] == ["id", "balance"]
        con.rollback()
    finally:
        con.close()
    with pytest.raises(pg8000.dbapi.DatabaseError) as info:
        pg8000.dbapi.connect(user="iqgate", host=pg.host, port=pg.port, database="iqgate", password="wrong",
                             timeout=30)
    assert info.value.args[0]["C"] == "28P01"


# -- psql --------------------------------------------------------------------------------------------------------
def _psql(pg: Pg, *args: str) -> str:
    assert PSQL is not None, "psql is not installed (Debian: apt-get install postgresql-client)"
    env = {**os.environ, **pg.libpq_env()}
    proc = subprocess.run([PSQL, "-X", "-v", "ON_ERROR_STOP=1", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_psql
def test_psql_c_runs_a_query(pg: Pg, shop: Shop) -> None:
    c = sorted(shop.revenue)[3]
    out = _psql(pg, "-A", "-t", "-F", "|", "-c", f"SELECT customer, orders FROM revenue WHERE customer = '{c}'")
    assert out.strip() == f"{c}|{shop.revenue[c][1]}"


@needs_psql
def test_psql_dt_lists_the_stores(pg: Pg) -> None:
    out = _psql(pg, "-c", r"\dt")
    lines = [line.split("|") for line in out.splitlines() if line.count("|") == 3]
    assert [c.strip() for c in lines[0]] == ["Schema", "Name", "Type", "Owner"]
    assert sorted(r[1].strip() for r in lines[1:]) == sorted(s.name for s in SPECS)
    assert {(r[0].strip(), r[2].strip()) for r in lines[1:]} == {("public", "table")}


@needs_psql
def test_psql_d_describes_a_store(pg: Pg) -> None:
    out = _psql(pg, "-c", r"\d revenue")
    assert 'Table "public.revenue"' in out
    rows = [[c.strip() for c in line.split("|")] for line in out.splitlines() if line.count("|") >= 4]
    assert rows[1:] == [["customer", "text", "", "not null", ""], ["revenue", "double precision", "", "", ""],
                        ["orders", "bigint", "", "", ""]]


@needs_psql
def test_psql_errors_and_settings(pg: Pg) -> None:
    env = {**os.environ, **pg.libpq_env()}
    assert PSQL is not None
    proc = subprocess.run([PSQL, "-X", "-c", "SELECT * FROM nope"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "UNKNOWN_STORE" in proc.stderr and "LINE 1" in proc.stderr
    out = _psql(pg, "-A", "-t", "-c", "SET position_bound = '{\"orders\": {\"0\": 0}}'", "-c", "SHOW position_bound")
    assert out.strip().splitlines()[-1] == '{"orders":{"0":0}}'
    proc = subprocess.run([PSQL, "-X", "-c", "SELECT 1"], env={**env, "PGPASSWORD": "wrong"}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "password authentication failed" in proc.stderr


# -- SQLAlchemy postgresql+psycopg, pandas ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(pg: Pg) -> sa.Engine:
    from urllib.parse import quote

    eng = sa.create_engine(f"postgresql+psycopg://iqgate:{quote(pg.token or '')}@{pg.host}:{pg.port}/iqgate",
                           connect_args={"connect_timeout": 10})
    yield eng
    eng.dispose()


def test_sqlalchemy_inspection_from_the_store_catalog(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    assert insp.get_table_names() == sorted(s.name for s in SPECS)
    assert insp.get_schema_names() == ["information_schema", "public"]
    assert insp.has_table("revenue") and not insp.has_table("nope")
    assert insp.get_view_names() == [] and insp.get_foreign_keys("revenue") == []
    for spec in SPECS:
        cols = insp.get_columns(spec.name)
        assert [c["name"] for c in cols] == [c.name for c in spec.columns()]
        assert cols[0]["nullable"] is False
    types = {c["name"]: type(c["type"]).__name__ for c in insp.get_columns("accounts")}
    assert types == {"id": "BIGINT", "name": "TEXT", "balance": "DOUBLE_PRECISION", "active": "BOOLEAN",
                     "opened": "TIMESTAMP"}
    table = sa.Table("revenue", sa.MetaData(), autoload_with=engine)
    assert list(table.c.keys()) == ["customer", "revenue", "orders"]


def test_sqlalchemy_core_query_and_pandas_match_http(engine: sa.Engine, server: Http, shop: Shop) -> None:
    table = sa.Table("revenue", sa.MetaData(), autoload_with=engine)
    with engine.connect() as con:
        got = con.execute(sa.select(table.c.customer, table.c.orders).where(table.c.orders > 10)
                          .order_by(table.c.customer)).all()
    assert [tuple(r) for r in got] == sorted((c, n) for c, (_r, n) in shop.revenue.items() if n > 10)
    df = pd.read_sql(sa.text("SELECT customer, revenue, orders FROM revenue WHERE customer = :c"), engine,
                     params={"c": "c01"})
    assert df.to_dict("records") == [dict(zip(["customer", "revenue", "orders"], r)) for r in
                                     _http_rows(server, "SELECT customer, revenue, orders FROM revenue "
                                                        "WHERE customer = 'c01'")]
    whole = pd.read_sql_table("accounts", engine)
    assert len(whole) == len(shop.accounts) and list(whole.columns) == [c.name for c in SPECS[1].columns()]
