"""The client distribution alone: installed into a venv that has no server, it connects, inspects and reads.

The venv (built once by tests/toolchain.py, cached) holds what a notebook or a
BI host has — SQLAlchemy 2 and pandas — and ``clients/python`` is installed
into it with plain ``pip install`` for every run. A script there uses only
public client API against a real server on 127.0.0.1 and reports which
modules it imported: none of the server (gateway, planner, stores) and none of
its engines (sqlglot, DuckDB, pyspark, Flask, waitress) may be among them, or
even installed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from tests.gateway.gwfixtures import Shop
from tests.toolchain import ROOT, ensure_client_venv

SERVER_ONLY = ("gateway", "planner", "stores", "sqlglot", "duckdb", "pyspark", "flask", "waitress")

SCRIPT = r"""
import json, sys
import pandas as pd
import sqlalchemy as sa

url = sys.argv[1]
engine = sa.create_engine("iqgate://" + url.split("//", 1)[1])
insp = sa.inspect(engine)
out = {
    "schemas": insp.get_schema_names(),
    "tables": insp.get_table_names(schema="main"),
    "columns": [c["name"] for c in insp.get_columns("per_min", schema="main")],
    "has_table": [insp.has_table("revenue", schema="main"), insp.has_table("nope")],
}
frame = pd.read_sql(sa.text("SELECT customer, revenue, orders FROM main.revenue WHERE customer = :c"), engine,
                    params={"c": "c03"})
out["frame"] = frame.to_dict(orient="records")
meta = sa.MetaData()
revenue = sa.Table("revenue", meta, schema="main", autoload_with=engine)
with engine.connect() as con:
    out["core"] = [list(r) for r in con.execute(
        sa.select(revenue.c.customer, revenue.c.orders).where(revenue.c.customer.in_(["c01", "c02"]))
        .order_by(revenue.c.customer))]
    out["info"] = [list(r) for r in con.execute(sa.text(
        "SELECT table_schema, table_name FROM information_schema.tables ORDER BY table_name"))]
from iqgate_client import dbapi
cur = dbapi.connect(url).cursor()
cur.execute("SELECT orders FROM revenue WHERE customer = ?", ["c03"])
out["position"] = cur.position.to_json_map()
out["modules"] = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def server(gw: Gateway) -> Iterator[str]:
    with ServerThread(create_app(gw), threads=2) as srv:
        yield srv.url


def test_client_alone_connects_inspects_and_reads(server: str, shop: Shop) -> None:
    venv = ensure_client_venv()
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "iqgate-client"], capture_output=True, timeout=120)
    inst = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT / "clients" / "python")],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]
    listed = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, timeout=120)
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "iqgate-client" in installed and not installed & {"iqgate", "sqlglot", "duckdb", "pyspark", "flask",
                                                              "waitress"}, installed

    run = subprocess.run([py, "-c", SCRIPT, server], capture_output=True, text=True, timeout=300, cwd="/")
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])

    assert not set(SERVER_ONLY) & set(out["modules"]), out["modules"]
    assert out["schemas"] == ["main"]
    assert out["tables"] == sorted(["revenue", "accounts", "per_min", "last_order", "latest"])
    assert out["columns"] == ["customer", "window_start", "window_end", "orders", "revenue"]
    assert out["has_table"] == [True, False]
    revenue, orders = shop.revenue["c03"]
    assert out["frame"] == [{"customer": "c03", "revenue": pytest.approx(revenue), "orders": orders}]
    assert out["core"] == [[c, shop.revenue[c][1]] for c in ("c01", "c02")]
    assert out["info"] == [["main", t] for t in sorted(["revenue", "accounts", "per_min", "last_order", "latest"])]
    assert set(out["position"]) == {"orders"} and out["position"]["orders"], out["position"]  # the IQv2 token
