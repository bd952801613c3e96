"""The in-process DB-API streams a large result (issue 14): fetches pull chunk after chunk from the engine,
rowcount is -1 until the end is reached, and an error met while the rows stream is raised by that fetch.

A gateway with 2-row chunks makes a result of the shop's 25 customers "large".
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from iqgate_client.dbapi import connect
from iqgate_client.errors import OperationalError

from gateway import Gateway, GatewayConfig
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Shop

SQL = "SELECT customer, orders FROM revenue ORDER BY customer"


@pytest.fixture(scope="module")
def small_chunks(shop_app: StreamsApp) -> Iterator[Gateway]:
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=2))
    yield g
    g.close()


def test_fetches_stream_chunk_by_chunk(small_chunks: Gateway, shop: Shop) -> None:
    want = [(c, shop.revenue[c][1]) for c in sorted(shop.revenue)]
    con = connect(gateway=small_chunks)
    cur = con.cursor()
    cur.execute(SQL)
    assert cur.rowcount == -1  # not known before the last chunk
    got = [cur.fetchone()]
    got += cur.fetchmany(3)  # across a chunk boundary
    assert cur.rownumber == 4
    got += cur.fetchmany(7)
    got += list(cur)
    assert got == want and cur.rowcount == len(want)
    assert cur.fetchone() is None and cur.fetchmany(2) == [] and cur.fetchall() == []
    cur.execute(SQL)
    assert cur.fetchmany(5) + cur.fetchall() == want
    cur.execute(SQL + " LIMIT 2")  # one chunk: fetched whole, rowcount exact at once
    assert cur.rowcount == 2 and cur.fetchall() == want[:2]
    con.close()


def test_an_error_while_streaming_is_raised_by_the_fetch(small_chunks: Gateway) -> None:
    con = connect(gateway=small_chunks, session={"max_rows": 5})
    cur = con.cursor()
    cur.execute(SQL)  # the first chunks are within the limit
    assert len(cur.fetchmany(4)) == 4
    with pytest.raises(OperationalError, match="row limit"):
        cur.fetchall()
    cur.execute("SELECT count(*) FROM revenue")  # the cursor and connection still work
    assert cur.fetchone()[0] > 5
    con.close()


def test_a_new_statement_ends_the_streaming_one(small_chunks: Gateway) -> None:
    con = connect(gateway=small_chunks)
    cur = con.cursor()
    for _ in range(50):  # each abandoned stream gives its statement back (no watch or cursor left behind)
        cur.execute(SQL)
        assert len(cur.fetchmany(3)) == 3
    cur.close()
    assert not small_chunks._guards._watches  # noqa: SLF001 - the engine's record of running statements
    con.close()
