"""Composite keys and nested values through the gateway (issue 16 items 1-2), checked against DuckDB over the rows.

The oracle is a DuckDB table of the written rows (nested values as DuckDB
LIST/STRUCT/MAP built from the same Python values); every query's answer
must equal the oracle's, and the plan must be the one the key predicates
allow: a lookup for a whole key, a range for a key prefix, a scan otherwise.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gateway.engine import errors as ge
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import Http, answers_and_oracle, explain

SALES = StoreSpec("sales", StoreKind.TIMESTAMPED_KEY_VALUE,
                  key=(Column("region", SqlType.VARCHAR), Column("product", SqlType.BIGINT)),
                  values=(Column("units", SqlType.BIGINT), Column("items", "ARRAY<VARCHAR>"),
                          Column("last", "STRUCT<price DOUBLE, sold_at TIMESTAMP>"), Column("by_day", "MAP<DATE, BIGINT>")),
                  partitions=3, source_topics=("sales",))
REGIONS = ["eu", "us", "e", "asia"]


def _rows(seed: int = 5) -> dict[tuple[str, int], tuple[Any, ...]]:
    rnd = random.Random(seed)
    out = {}
    for _ in range(120):
        key = (rnd.choice(REGIONS), rnd.randrange(-20, 20))
        items = None if rnd.random() < 0.1 else [rnd.choice("abcde") for _ in range(rnd.randrange(4))]
        last = None if rnd.random() < 0.1 else {"price": round(rnd.uniform(1, 9), 2), "sold_at": 1_700_000_000_000 + rnd.randrange(10**6)}
        by_day = {19000 + d: rnd.randrange(9) for d in range(rnd.randrange(3))}
        out[key] = (rnd.randrange(100), items, last, by_day)
    return out


ROWS = _rows()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    state = tmp_path_factory.mktemp("composite")
    app = StreamsApp(StoreTopology([SALES]), application_id="composite", state_dir=str(state))
    app.start()
    app.writer("sales").write_batch(0, [Change(k, v, timestamp=1) for k, v in ROWS.items()],
                                    Position.from_map({"sales": {0: len(ROWS)}}))
    try:
        yield Gateway(app)
    finally:
        app.close()


@pytest.fixture(scope="module")
def oracle() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE sales (region VARCHAR, product BIGINT, units BIGINT, items VARCHAR[], "
                "last STRUCT(price DOUBLE, sold_at TIMESTAMPTZ), by_day MAP(DATE, BIGINT), rowtime TIMESTAMPTZ)")
    for (r, p), (units, items, last, by_day) in ROWS.items():
        last_v = None if last is None else {"price": last["price"], "sold_at": _ts(last["sold_at"])}
        day_map = {"key": [_day(d) for d in by_day], "value": list(by_day.values())}
        con.execute("INSERT INTO sales VALUES (?, ?, ?, ?, ?, MAP(?::DATE[], ?::BIGINT[]), to_timestamp(0.001))",
                    [r, p, units, items, last_v, day_map["key"], day_map["value"]])
    yield con
    con.close()


def _ts(ms: int) -> Any:
    from datetime import datetime, timedelta, timezone
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


def _day(d: int) -> Any:
    from datetime import date, timedelta
    return date(1970, 1, 1) + timedelta(days=d)


QUERIES = [
    # (sql, the request the plan must use)
    ("SELECT * FROM sales WHERE region = 'eu' AND product = 3", "KeyQuery"),
    ("SELECT * FROM sales WHERE product = 3 AND region = 'eu'", "KeyQuery"),
    ("SELECT region, product, units FROM sales WHERE region IN ('eu', 'us') AND product IN (1, 2, 3)", "MultiKeyQuery|KeyQuery"),
    ("SELECT region, product, units FROM sales WHERE region = 'eu'", "RangeQuery{lower=Optional[b"),
    ("SELECT region, product, units FROM sales WHERE region = 'eu' AND product BETWEEN -3 AND 7", "RangeQuery{lower=Optional[b"),
    ("SELECT region, product, units FROM sales WHERE region = 'e' AND product > 5", "RangeQuery{lower=Optional[b"),
    ("SELECT region, product FROM sales WHERE region >= 'e' AND region < 'f'", "RangeQuery{lower=Optional[b"),
    ("SELECT region, product, units FROM sales WHERE product = 3", "full scan"),
    ("SELECT region, product, units FROM sales WHERE region = 'eu' AND product = 3 AND units > 50", "KeyQuery"),
    ("SELECT region, product FROM sales WHERE region = 'nowhere' AND product = 1", "KeyQuery"),
    ("SELECT items, last, by_day FROM sales WHERE region = 'us' AND product = 0", "Query"),
    ("SELECT region, product, last.price, last.sold_at, by_day[DATE '2022-01-08'] FROM sales WHERE region = 'asia'", "Range"),
    ("SELECT region, product, unnest(items) AS item FROM sales WHERE region = 'eu'", "Range"),
    ("SELECT region, count(*), sum(len(items)) FROM sales GROUP BY region", "full scan"),
    ("SELECT region, product FROM sales WHERE list_contains(items, 'a') AND region = 'us'", "Range"),
    ("SELECT region, product, units FROM sales ORDER BY region DESC, product DESC LIMIT 5", "full scan"),
    ("SELECT region, product, map_keys(by_day) FROM sales WHERE region = 'e' AND product < 0", "Range"),
]


@pytest.mark.parametrize("sql, request_kind", QUERIES)
def test_answers_equal_duckdb_over_the_rows(gw: Gateway, oracle: duckdb.DuckDBPyConnection, sql: str,
                                            request_kind: str) -> None:
    got, want = answers_and_oracle(gw, oracle, sql)
    assert got == want
    plan = explain(gw, sql)
    assert any(k in plan for k in request_kind.split("|")), plan
    assert ("full scan" in plan) is (request_kind == "full scan")


def test_a_whole_key_goes_to_its_one_partition_and_takes_the_fast_path(gw: Gateway) -> None:
    plan = explain(gw, "SELECT * FROM sales WHERE region = 'eu' AND product = 3")
    assert "KeyQuery{key=('eu', 3)" in plan and "fast path" in plan
    parts = [p for p in plan.split() if p.startswith("partitions=")]
    assert len(parts) == 1 and parts[0].count(",") == 0


def test_table_scans_off_allow_keys_and_prefixes_but_not_a_later_column(gw: Gateway) -> None:
    off = {"table_scans": False}
    gw.sql("SELECT * FROM sales WHERE region = 'eu' AND product = 3", session=off)
    gw.sql("SELECT * FROM sales WHERE region = 'eu'", session=off)
    with pytest.raises(ge.SqlError, match="region = … AND product = …") as err:
        gw.sql("SELECT * FROM sales WHERE product = 3", session=off)
    assert err.value.code == "TABLE_SCAN_DISABLED"


def test_describe_and_catalogs_show_every_key_column(gw: Gateway) -> None:
    rows = gw.sql("DESCRIBE sales").rows()
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("region", "VARCHAR", "PRI"), ("product", "BIGINT", "PRI"), ("units", "BIGINT", None),
        ("items", "VARCHAR[]", None), ("last", "STRUCT(price DOUBLE, sold_at TIMESTAMP WITH TIME ZONE)", None),
        ("by_day", "MAP(DATE, BIGINT)", None), ("rowtime", "TIMESTAMP WITH TIME ZONE", None)]
    usage = gw.sql("SELECT column_name, ordinal_position FROM information_schema.key_column_usage "
                   "WHERE table_name = 'sales' ORDER BY 2").rows()
    assert usage == [("region", 1), ("product", 2)]
    types = dict(gw.sql("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'sales'").rows())
    assert types["items"] == "VARCHAR[]" and types["by_day"] == "MAP(DATE, BIGINT)"


def test_http_renders_nested_values_as_json(gw: Gateway, oracle: duckdb.DuckDBPyConnection) -> None:
    with ServerThread(create_app(gw), threads=2) as srv:
        server = Http(srv.url)
        key = next(k for k, v in ROWS.items() if v[1] and v[2] and v[3])
        status, _h, body = server.sql("SELECT region, product, items, last, by_day FROM sales WHERE region = ? AND product = ?",
                                      params=list(key))
        assert status == 200, body
        assert [c["type"] for c in body["columns"]][2:] == [
            "VARCHAR[]", "STRUCT(price DOUBLE, sold_at TIMESTAMP WITH TIME ZONE)", "MAP(DATE, BIGINT)"]
        (row,) = body["rows"]
        units, items, last, by_day = ROWS[key]
        assert row[:3] == [key[0], key[1], items]
        assert row[3]["price"] == last["price"] and row[3]["sold_at"] == _ts(last["sold_at"]).isoformat()
        assert {k: v for k, v in row[4].items()} == {_day(d).isoformat(): n for d, n in by_day.items()}
        status, _h, body = server.sql("SELECT * FROM sales WHERE region = 'eu' AND product = 'x'")
        assert status == 400 and "product" in body["error"]["message"]


BLOBS = StoreSpec("blobs", StoreKind.KEY_VALUE, Column("id", SqlType.BLOB), (Column("n", SqlType.BIGINT),),
                  partitions=3, source_topics=("b",))
BLOB_ROWS = {bytes([i, 0, 255 - i]) if i % 3 else f"k{i}".encode(): i for i in range(40)}


def test_blob_keys_are_point_lookups_from_parameters_and_escaped_literals(tmp_path: Path) -> None:
    app = StreamsApp(StoreTopology([BLOBS]), application_id="blobs", state_dir=str(tmp_path))
    app.start()
    try:
        app.writer("blobs").write_batch(0, [Change(k, (v,)) for k, v in BLOB_ROWS.items()],
                                        Position.from_map({"b": {0: 1}}))
        gw = Gateway(app)
        off = {"table_scans": False}
        for k, v in BLOB_ROWS.items():
            assert gw.sql("SELECT id, n FROM blobs WHERE id = ?", params=[k], session=off).rows() == [(k, v)]
        assert gw.sql("SELECT n FROM blobs WHERE id = 'k3'", session=off).rows() == [(3,)]
        k = bytes([1, 0, 254])
        assert gw.sql("SELECT n FROM blobs WHERE id = '\\x01\\x00\\xFE'", session=off).rows() == [(BLOB_ROWS[k],)]
        lo, hi = sorted(BLOB_ROWS)[5], sorted(BLOB_ROWS)[20]
        got = gw.sql("SELECT id FROM blobs WHERE id BETWEEN ? AND ? ORDER BY id", params=[lo, hi], session=off).rows()
        assert [r[0] for r in got] == [b for b in sorted(BLOB_ROWS) if lo <= b <= hi]
        with pytest.raises(ge.SqlError, match="id"):
            gw.sql("SELECT n FROM blobs WHERE id = 5")
    finally:
        app.close()
