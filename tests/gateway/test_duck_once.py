"""A statement DuckDB runs over reads already in hand runs once, whatever the caller then reads (issue 50 item 2).

``Gateway.sql`` from Python (Form.ANY) used to bind such a statement to learn its columns and run it again when
read; now it runs at once. Rows, Arrow and the relation must still be the statement's answer, each checked
against hashlib (md5 is DuckDB's alone: no lane or evaluator takes it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from gateway import Gateway, GatewayConfig
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Shop

SQL = "SELECT customer, md5(customer) AS h, orders FROM revenue WHERE customer IN ({})"


def _expected(shop: Shop, keys: list[str]) -> list[tuple[str, str, int]]:
    return sorted((k, hashlib.md5(k.encode()).hexdigest(), shop.revenue[k][1]) for k in keys)


@pytest.fixture(scope="module")
def small_chunks(shop_app: StreamsApp) -> Iterator[Gateway]:
    """A gateway whose answers come 4 rows at a time: an answer of 10 rows is more than its first chunk."""
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=4))
    yield g
    g.close()


@pytest.mark.parametrize("n", [1, 10])
def test_rows_arrow_and_relation_are_the_answer(gw: Gateway, small_chunks: Gateway, shop: Shop, n: int) -> None:
    keys = sorted(shop.revenue)[:n]
    sql = SQL.format(", ".join("?" * n))
    want = _expected(shop, keys)
    for g in (gw, small_chunks):
        r = g.sql(sql, keys)
        assert r.route == "duckdb" and [c for c, _ in r.columns] == ["customer", "h", "orders"]
        assert sorted(r.rows()) == want
        assert sorted(tuple(x.values()) for x in g.sql(sql, keys).to_arrow().to_pylist()) == want
        with g.sql(sql, keys) as r:
            rel = r.relation
            assert sorted(rel.fetchall()) == want
            assert sorted(rel.fetchall()) == want  # a relation runs every time it is asked
            assert rel.aggregate("count(*)").fetchall() == [(n,)]


def test_an_error_of_such_a_statement_is_raised_by_sql_itself(gw: Gateway) -> None:
    from gateway.engine.errors import GatewayError

    with pytest.raises(GatewayError) as e:
        gw.sql("SELECT customer, CAST(customer AS INTEGER) FROM revenue WHERE customer = ?", ["c01"])
    assert "c01" in str(e.value) or "INTEGER" in str(e.value).upper()
