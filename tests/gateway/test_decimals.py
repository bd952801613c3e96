"""DECIMAL keys and values (issue 16 item 7) through the gateway, against DuckDB DECIMAL arithmetic over the rows.

Rows arrive as Spark hands them over (Arrow decimal128 columns, via
``write_table``) and as Python Decimals (``write_batch``); every answer must
equal DuckDB's over a table of the same rows with DECIMAL columns, exactly
(sums of 0.10 stay exact), a key predicate must be a KeyQuery / RangeQuery in
numeric order (negative keys included), and every face renders the exact
digits: JSON/CSV text, DB-API ``decimal.Decimal``, PG ``numeric`` (OID 1700).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from gateway import connect
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.decimals import EXACT
from stores.catalog.schema import Column, StoreKind, StoreSpec
from stores.engine.batch import BatchError
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest
from tests.gateway.gwfixtures import Http, answers_and_oracle, explain

PRICES = StoreSpec("prices", StoreKind.KEY_VALUE, Column("price", "DECIMAL(6,2)"),
                   (Column("total", "DECIMAL(20,2)"), Column("n", "BIGINT"), Column("big", "DECIMAL(38,10)")),
                   partitions=3, source_topics=("orders",))
BY_REGION = StoreSpec("by_region", StoreKind.KEY_VALUE, (Column("region", "VARCHAR"), Column("rate", "DECIMAL(10,3)")),
                      (Column("amount", "DECIMAL(12,4)"),), partitions=2, source_topics=("orders",))


def _rows(seed: int = 3) -> dict[Decimal, tuple[Decimal, int, Decimal | None]]:
    rnd = random.Random(seed)
    out: dict[Decimal, tuple[Decimal, int, Decimal | None]] = {}
    for _ in range(150):
        price = Decimal(rnd.randrange(-99999, 99999)).scaleb(-2, EXACT)
        n = rnd.randrange(1, 30)
        total = sum((Decimal("0.10") for _ in range(n)), Decimal("0.00")) + price  # exact decimal arithmetic
        big = None if rnd.random() < 0.1 else Decimal(rnd.randrange(-10**37, 10**37)).scaleb(-10, EXACT)
        out[price] = (total, n, big)
    return out


ROWS = _rows()
REGION_ROWS = {(r, Decimal(rnd).scaleb(-3, EXACT)): Decimal(a).scaleb(-4, EXACT)
               for r, rnd, a in ((random.Random(i).choice("ab"), random.Random(i).randrange(-5000, 5000),
                                  random.Random(i + 99).randrange(-10**8, 10**8)) for i in range(60))}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    state = tmp_path_factory.mktemp("decimals")
    app = StreamsApp(StoreTopology([PRICES, BY_REGION]), application_id="decimals", state_dir=str(state))
    app.start()
    keys = list(ROWS)
    table = pa.table({  # as Spark's toArrow() hands them over: decimal128 columns
        "k": pa.array(keys, pa.decimal128(6, 2)),
        "v0": pa.array([ROWS[k][0] for k in keys], pa.decimal128(20, 2)),
        "v1": pa.array([ROWS[k][1] for k in keys], pa.int64()),
        "v2": pa.array([ROWS[k][2] for k in keys], pa.decimal128(38, 10)),
    })
    app.writer("prices").write_table(0, table, Position.from_map({"orders": {0: 1}}))
    app.writer("by_region").write_batch(0, [Change(k, (v,)) for k, v in REGION_ROWS.items()],
                                        Position.from_map({"orders": {0: 1}}))
    try:
        yield Gateway(app)
    finally:
        app.close()


@pytest.fixture(scope="module")
def oracle() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE prices (price DECIMAL(6,2), total DECIMAL(20,2), n BIGINT, big DECIMAL(38,10))")
    con.executemany("INSERT INTO prices VALUES (?, ?, ?, ?)", [(k, *v) for k, v in ROWS.items()])
    con.execute("CREATE TABLE by_region (region VARCHAR, rate DECIMAL(10,3), amount DECIMAL(12,4))")
    con.executemany("INSERT INTO by_region VALUES (?, ?, ?)", [(*k, v) for k, v in REGION_ROWS.items()])
    yield con
    con.close()


K = sorted(ROWS)[40]
QUERIES = [
    (f"SELECT * FROM prices WHERE price = {K}", "KeyQuery"),
    (f"SELECT price, total FROM prices WHERE price = {K}0", "KeyQuery"),  # 12.340 is the key 12.34
    ("SELECT price, total FROM prices WHERE price = 12.345", "cannot match any row"),  # more places: no key equals it
    ("SELECT price, total, n FROM prices WHERE price BETWEEN -150.5 AND 99.999 ORDER BY price", "RangeQuery"),
    ("SELECT price FROM prices WHERE price > -3.005 AND price < 200 ORDER BY price", "RangeQuery"),
    ("SELECT price FROM prices WHERE price >= '10.1' ORDER BY price DESC LIMIT 7", "RangeQuery"),
    ("SELECT price, total FROM prices WHERE price IN (1.5, -2, 3.25)", "KeyQuery"),
    ("SELECT sum(total), sum(big), avg(total), min(price), max(price), count(*) FROM prices", "full scan"),
    ("SELECT price, total * 2, total - price, big / 3 FROM prices WHERE total > 100.05 ORDER BY price", "full scan"),
    ("SELECT region, rate, amount FROM by_region WHERE region = 'a' AND rate = -1.5", "KeyQuery"),
    ("SELECT region, rate, amount FROM by_region WHERE region = 'b' AND rate > 0.5 ORDER BY rate", "RangeQuery"),
    ("SELECT region, sum(amount), min(rate) FROM by_region GROUP BY region ORDER BY region", "full scan"),
]


@pytest.mark.parametrize("sql, request_kind", QUERIES)
def test_answers_equal_duckdb_decimal_arithmetic(gw: Gateway, oracle: duckdb.DuckDBPyConnection, sql: str,
                                                 request_kind: str) -> None:
    got, want = answers_and_oracle(gw, oracle, sql)
    assert got == want
    assert [tuple(map(type, r)) for r in got] == [tuple(map(type, r)) for r in want]  # Decimal where DuckDB has it
    plan = explain(gw, sql)
    assert any(k in plan for k in request_kind.split("|")), plan
    assert ("full scan" in plan) is (request_kind == "full scan")


def test_sums_of_tenths_stay_exact_and_keys_come_back_with_their_scale(gw: Gateway) -> None:
    rows = gw.sql("SELECT price, total, n FROM prices").rows()
    assert {r[0]: r[1] for r in rows} == {k: v[0] for k, v in ROWS.items()}
    assert all(r[1] == r[0] + Decimal("0.10") * r[2] for r in rows)
    assert all(str(r[0]) == f"{r[0]:.2f}" for r in rows)  # scale 2 always: 12.50, never 12.5
    cols = dict(gw.sql("SELECT * FROM prices LIMIT 1").columns)
    assert cols == {"price": "DECIMAL(6,2)", "total": "DECIMAL(20,2)", "n": "BIGINT", "big": "DECIMAL(38,10)"}
    types = dict(gw.sql("SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_name = 'prices'").rows())
    assert types["price"] == "DECIMAL(6,2)" and types["big"] == "DECIMAL(38,10)"
    prec = gw.sql("SELECT numeric_precision, numeric_scale FROM information_schema.columns "
                  "WHERE table_name = 'prices' AND column_name = 'total'").rows()
    assert prec == [(20, 2)]


def test_iqv2_keys_are_decimals_ranges_in_numeric_order(gw: Gateway) -> None:
    app = gw.source

    def lookup(key: object) -> list[tuple]:
        res = app.query(StateQueryRequest.in_store("prices").with_query(KeyQuery.with_key(key)))
        return [tuple(r.result) for r in res.partition_results.values() if r.result is not None]

    assert lookup(K) == lookup(str(K)) == lookup(K.quantize(Decimal("0.0001"))) == [ROWS[K]]
    lo, hi = Decimal("-100"), Decimal("100.5")
    res = app.query(StateQueryRequest.in_store("prices").with_query(RangeQuery.with_range(lo, hi)))
    keys = []
    for r in res.partition_results.values():
        part = [kv.key for kv in r.result]
        assert part == sorted(part)  # each partition answers in numeric key order (negative keys first)
        keys += part
    assert sorted(keys) == [k for k in sorted(ROWS) if lo <= k <= hi]
    assert any(k < 0 for k in keys) and any(k > 0 for k in keys)


def test_faces_render_the_exact_digits(gw: Gateway) -> None:
    key = next(k for k, v in ROWS.items() if v[2] is not None and k < 0)
    total, n, big = ROWS[key]
    sql = "SELECT price, total, big FROM prices WHERE price = ?"
    with ServerThread(create_app(gw), threads=2) as srv:
        server = Http(srv.url)
        status, _h, body = server.sql(sql, params=[str(key)])
        assert status == 200, body
        assert [c["type"] for c in body["columns"]] == ["DECIMAL(6,2)", "DECIMAL(20,2)", "DECIMAL(38,10)"]
        assert body["rows"] == [[str(key), str(total), str(big)]]
        status, _h, text = server.sql(sql, accept="text/csv", params=[str(key)])
        assert status == 200
        assert list(csv.reader(io.StringIO(text.decode())))[1] == [str(key), str(total), str(big)]
        status, _h, body = server.sql("SELECT price FROM prices WHERE price = 'x'")
        assert status == 400 and "price" in body["error"]["message"]
    cur = connect(gateway=gw).cursor()
    cur.execute(sql, [key])
    assert cur.fetchall() == [(key, total, big)]
    assert [d[1] for d in cur.description] == ["DECIMAL(6,2)", "DECIMAL(20,2)", "DECIMAL(38,10)"]


def test_pg_wire_sends_numeric(gw: Gateway) -> None:
    psycopg = pytest.importorskip("psycopg")
    from gateway.pg import PgServer

    key = sorted(ROWS)[7]
    with PgServer(gw, token=None, body_timeout_s=5.0) as srv:
        with psycopg.connect(host=srv.host, port=srv.port, user="iqgate", dbname="iqgate", connect_timeout=10) as con:
            cur = con.execute("SELECT price, total FROM prices WHERE price = %s", [key])
            assert [d.type_code for d in cur.description] == [1700, 1700]
            assert cur.fetchall() == [(key, ROWS[key][0])]


def test_bad_decimals_are_refused_whole_batches_with_the_column_named(tmp_path: Path) -> None:
    app = StreamsApp(StoreTopology([PRICES]), application_id="bad-dec", state_dir=str(tmp_path))
    app.start()
    try:
        w = app.writer("prices")
        pos = Position.from_map({"orders": {0: 1}})
        good = Change(Decimal("1.00"), (Decimal("2.00"), 1, None))
        with pytest.raises(BatchError, match="value column 'total'.*more than 2 decimal places"):
            w.write_batch(0, [good, Change(Decimal("1.50"), (Decimal("0.125"), 1, None))], pos)
        with pytest.raises(BatchError, match="key column 'price'.*digits"):
            w.write_batch(0, [Change(Decimal("12345.5"), (Decimal("1"), 1, None))], pos)
        floats = pa.table({"k": pa.array([1.5]), "v0": pa.array([Decimal("1")], pa.decimal128(20, 2)),
                           "v1": pa.array([1]), "v2": pa.nulls(1, pa.decimal128(38, 10))})
        with pytest.raises(BatchError, match="key column 'price'.*double.*cast it to a DECIMAL"):
            w.write_table(0, floats, pos)
        wide = floats.set_column(0, "k", pa.array([Decimal("1234567.5")], pa.decimal128(9, 1)))
        with pytest.raises(BatchError, match="key column 'price'.*DECIMAL\\(6,2\\)"):
            w.write_table(0, wide, pos)
        assert list(app.query(StateQueryRequest.in_store("prices").with_query(
            RangeQuery.with_no_bounds())).partition_results.values())[0].result is not None
        assert Gateway(app).sql("SELECT count(*) FROM prices").rows() == [(0,)]  # nothing half-applied
    finally:
        app.close()


def test_precision_over_38_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="precision 39 is not supported.*1 to 38"):
        Column("x", "DECIMAL(39,2)")
    with pytest.raises(ValueError, match="scale 7 must be between 0 and the precision 5"):
        Column("x", "DECIMAL(5,7)")


def test_decimals_cross_to_peers_exactly() -> None:
    """A forwarded request's DECIMAL key and a peer's DECIMAL cells travel as text, never as JSON floats."""
    import json

    from gateway.engine.json_values import dumps
    from gateway.routing.codec import CodecError, decode_answer, decode_request, encode_answer, encode_request
    from stores.iqv2.result import QueryResult

    big = Decimal("1234567890123456789012345678.0123456789")
    req = StateQueryRequest.in_store("prices").with_query(RangeQuery.with_range(Decimal("-1.50"), big))
    back = decode_request(json.loads(dumps(encode_request(req))))
    assert back.query.lower_bound == Decimal("-1.50") and back.query.upper_bound == big
    pos = Position.from_map({"orders": {0: 1}})
    raw = json.loads(dumps(encode_answer(2, QueryResult.for_result(None, pos), [[Decimal("0.10"), 3, None, big]])))
    _p, qr = decode_answer(raw, "http://peer", True)
    assert qr.result.shaped_rows == [(Decimal("0.10"), 3, None, big)]
    raw["rows"][0][0] = {"$dec": "x"}
    with pytest.raises(CodecError, match="DECIMAL cell"):
        decode_answer(raw, "http://peer", True)
