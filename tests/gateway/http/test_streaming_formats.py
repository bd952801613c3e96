"""JSON and CSV answers stream chunk by chunk (issue 14): the same rows as before, and an error found after
the status line went out ends the response in the format's own well-defined way.

A gateway with 2-row chunks makes "after the status line" reachable with the shop's few rows: the first
two chunks are read before the response starts (a limit hit there is still a 4xx, and an answer of one
chunk is sent whole with a Content-Length), later ones are not.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
import pytest

from gateway import Gateway, GatewayConfig
from gateway.engine.errors import ResponseTooLarge, RowLimitExceeded
from gateway.engine.result import Result
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Http, Shop

SQL = "SELECT customer, revenue, orders FROM revenue ORDER BY customer"


@pytest.fixture(scope="module")
def small_chunks(shop_app: StreamsApp) -> Iterator[Http]:
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=2))
    with ServerThread(create_app(g), threads=2) as srv:
        yield Http(srv.url)
    g.close()


def _raw(server: Http, body: dict, accept: str) -> tuple[int, bytes, bool]:
    """(status, the bytes received, whether the response ended properly) over a real connection."""
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("POST", "/v1/sql", json.dumps(body), {"Content-Type": "application/json", "Accept": accept})
        resp = conn.getresponse()
        try:
            return resp.status, resp.read(), True
        except http.client.IncompleteRead as exc:
            return resp.status, exc.partial, False
    finally:
        conn.close()


def test_json_streams_the_same_answer(small_chunks: Http, shop: Shop) -> None:
    status, hdrs, body = small_chunks.sql(SQL)
    assert status == 200 and "content-length" not in hdrs  # chunked: it streamed
    assert body["rows"] == [[k, *shop.revenue[k]] for k in sorted(shop.revenue)]
    assert body["row_count"] == len(shop.revenue) > 4 and body["statement"] == "select"
    assert list(body) == ["columns", "rows", "statement", "position", "partitions", "row_count"]
    status, hdrs, small = small_chunks.sql(SQL + " LIMIT 2")
    assert status == 200 and int(hdrs["content-length"]) > 0 and small["rows"] == body["rows"][:2]
    assert list(small) == list(body)


def test_json_error_after_the_status_line_ends_the_object_with_an_error(small_chunks: Http) -> None:
    status, _, body = small_chunks.sql(SQL, max_rows=5)
    assert status == 200  # two chunks (4 rows) went out before the sixth row broke the limit
    assert len(body["rows"]) == 4
    assert body["error"]["code"] == "ROW_LIMIT_EXCEEDED"
    assert "row_count" not in body and "position" not in body  # never mistaken for a complete answer


def test_json_error_in_the_first_chunk_keeps_its_status(small_chunks: Http) -> None:
    for limit in (1, 3):
        status, _, body = small_chunks.sql(SQL, max_rows=limit)
        assert status == 422 and body["error"]["code"] == "ROW_LIMIT_EXCEEDED"


def test_json_over_the_size_budget(shop_app: StreamsApp) -> None:
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=2, max_response_bytes=300))
    with ServerThread(create_app(g), threads=2) as srv:
        status, _, body = Http(srv.url).sql(SQL)
        assert status == 200 and body["error"]["code"] == "RESPONSE_TOO_LARGE" and "row_count" not in body
        status, _, body = Http(srv.url).sql("SELECT repeat('x', 400) FROM revenue")
        assert status == ResponseTooLarge.http_status and body["error"]["code"] == "RESPONSE_TOO_LARGE"
    g.close()


def test_csv_streams_the_same_answer(small_chunks: Http, shop: Shop) -> None:
    status, raw, complete = _raw(small_chunks, {"sql": SQL}, "text/csv")
    assert status == 200 and complete
    rows = list(csv.reader(io.StringIO(raw.decode())))
    assert rows[0] == ["customer", "revenue", "orders"]
    assert [(r[0], float(r[1]), int(r[2])) for r in rows[1:]] == [(k, *shop.revenue[k]) for k in sorted(shop.revenue)]


def test_csv_error_after_the_status_line_drops_the_connection(small_chunks: Http) -> None:
    status, raw, complete = _raw(small_chunks, {"sql": SQL, "max_rows": 5}, "text/csv")
    assert status == 200 and not complete  # an incomplete chunked response, never a short CSV
    assert raw.decode().startswith("customer,revenue,orders\r\n")
    status, raw, complete = _raw(small_chunks, {"sql": SQL, "max_rows": 1}, "text/csv")
    assert status == 422 and complete and json.loads(raw)["error"]["code"] == "ROW_LIMIT_EXCEEDED"


def test_remote_dbapi_raises_an_in_band_error(small_chunks: Http) -> None:
    from iqgate_client.dbapi import connect
    from iqgate_client.errors import OperationalError

    con = connect(small_chunks.url, session={"max_rows": 5})
    try:
        cur = con.cursor()
        with pytest.raises(OperationalError, match="row limit"):
            cur.execute(SQL)
        cur.execute("SELECT customer FROM revenue ORDER BY customer LIMIT 3")
        assert len(cur.fetchall()) == 3
    finally:
        con.close()


def test_a_thread_cursor_handed_over_to_a_stream_leaves_the_thread_a_fresh_one(shop_app: StreamsApp,
                                                                              shop: Shop) -> None:
    """Scans held in memory (key lookups) run on the thread's reused DuckDB cursor; an answer larger than a
    chunk takes that cursor over to stream, and the next statement on the thread gets a cursor of its own."""
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=2))
    try:
        keys = sorted(shop.revenue)

        def lookup(ks: list[str], **kw: object) -> Result:
            sql = "SELECT customer, orders FROM revenue WHERE customer IN (" + ", ".join("?" * len(ks)) + ") ORDER BY 1"
            return g.sql(sql, params=ks, **kw)  # type: ignore[arg-type]

        big = lookup(keys, stream=True)
        assert big.streaming  # more than a chunk: handed over
        chunks = big.iter_batches()
        first = next(chunks)
        small = lookup(keys[:2], stream=True)  # same thread, meanwhile: a fresh cursor, its own rows
        assert not small.streaming and small.rows() == [(k, shop.revenue[k][1]) for k in keys[:2]]
        rest = [r for chunk in chunks for r in chunk]
        assert first + rest == [(k, shop.revenue[k][1]) for k in keys]
        big.close()
        with pytest.raises(RowLimitExceeded):
            over = lookup(keys, stream=True, max_rows=5)
            for _ in over.iter_batches():
                pass
        assert lookup(keys[3:5]).rows() == [(k, shop.revenue[k][1]) for k in keys[3:5]]
    finally:
        g.close()


TOO_LONG = "to_days(2000000000)"  # an INTERVAL DuckDB holds and Python's timedelta does not (999,999,999 days)


def test_a_value_rows_cannot_carry_is_a_400_in_every_row_format(small_chunks: Http) -> None:
    """DuckDB converts values to Python as they are fetched; an INTERVAL past timedelta's range raised
    OverflowError there, an INTERNAL 500 with a traceback in the log."""
    for accept in ("application/json", "application/x-ndjson", "text/csv"):
        status, raw, complete = _raw(small_chunks, {"sql": f"SELECT {TOO_LONG} AS i"}, accept)
        err = json.loads(raw)["error"]
        assert (status, err["code"], complete) == (400, "EXECUTION_ERROR", True), (accept, raw)
        assert "2000000000" in err["message"] and "VARCHAR" in err["message"]
    status, _, body = small_chunks.sql(f"SELECT CAST({TOO_LONG} AS VARCHAR) AS i")  # the way out it names
    assert status == 200 and body["rows"] == [["2000000000 days"]]
    status, raw, _ = _raw(small_chunks, {"sql": f"SELECT {TOO_LONG} AS i"}, "application/vnd.apache.arrow.stream")
    assert status == 200 and len(raw) > 0  # Arrow carries it


def test_a_value_rows_cannot_carry_after_the_status_line(small_chunks: Http, shop: Shop) -> None:
    fifth = sorted(shop.revenue)[4]
    sql = (f"SELECT customer, CASE WHEN customer = '{fifth}' THEN {TOO_LONG} ELSE INTERVAL 1 DAY END AS i "
           "FROM revenue ORDER BY customer")
    status, _, body = small_chunks.sql(sql)
    assert status == 200 and len(body["rows"]) == 4  # two chunks went out, the third could not be fetched
    assert body["error"]["code"] == "EXECUTION_ERROR" and "row_count" not in body
    status, raw, _ = _raw(small_chunks, {"sql": sql}, "application/x-ndjson")
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert status == 200 and len(lines) == 6 and lines[-1]["error"]["code"] == "EXECUTION_ERROR"


def test_a_value_rows_cannot_carry_in_process(shop_app: StreamsApp) -> None:
    from gateway.engine.errors import ExecutionError

    g = Gateway(shop_app)
    try:
        for stream in (False, True):
            with pytest.raises(ExecutionError, match="out of the range rows can carry"):
                g.sql(f"SELECT {TOO_LONG} AS i", stream=stream).rows()
            with pytest.raises(ExecutionError, match="out of the range rows can carry"):  # months overflow C int
                g.sql("SELECT to_months(2000000000) AS i", stream=stream).rows()
        assert g.sql(f"SELECT {TOO_LONG} AS i", arrow=True).to_arrow().column(0).type == pa.month_day_nano_interval()
    finally:
        g.close()
