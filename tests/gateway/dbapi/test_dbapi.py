"""gateway.dbapi beyond the compliance suite: positions, settings, errors, types, both transports.

Every behaviour is checked in-process and over real HTTP on 127.0.0.1 with the
same assertions, so the two transports cannot drift apart.
"""

from __future__ import annotations

import datetime as dt
import decimal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import gateway
import gateway.dbapi as dbapi
from gateway.engine import errors
from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from stores.iqv2.position import Position
from tests.gateway.dbapi.dbfixtures import (
    LATE,
    ORDER_ROWS,
    ORDERS,
    fill_orders,
    make_app,
    serve,
)

Connect = Callable[..., dbapi.Connection]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    app = make_app(tmp_path_factory.mktemp("dbapi"), [ORDERS, LATE])
    pos = fill_orders(app)
    gw = Gateway(app)
    with serve(gw) as url:
        yield {"app": app, "gw": gw, "url": url, "pos": pos}
    gw.close()
    app.close()


@pytest.fixture(params=["inprocess", "remote"])
def connect(request: pytest.FixtureRequest, world: dict[str, Any]) -> Iterator[Connect]:
    opened: list[dbapi.Connection] = []

    def _connect(**kw: Any) -> dbapi.Connection:
        conn = dbapi.connect(gateway=world["gw"], **kw) if request.param == "inprocess" \
            else dbapi.connect(world["url"], **kw)
        opened.append(conn)
        return conn

    yield _connect
    for c in opened:
        if not c.closed:
            c.close()


# -- reading -------------------------------------------------------------------------------
def test_point_lookup_with_qmark_parameter(connect: Connect, world: dict[str, Any]) -> None:
    cur = connect().cursor()
    cur.execute("SELECT customer, name, amount FROM orders WHERE customer = ?", [5])
    assert cur.fetchall() == [(5, "dee's", 99.75)]
    assert cur.rowcount == 1
    assert cur.statement == "select"
    assert cur.position == world["pos"]


def test_description_type_codes_equal_type_objects(connect: Connect) -> None:
    cur = connect().cursor()
    cur.execute("SELECT * FROM orders WHERE customer = 1")
    desc = {d[0]: d for d in cur.description}
    assert list(desc) == ["customer", "name", "amount", "vip", "first_order", "signup"]
    assert all(len(d) == 7 for d in desc.values())
    assert desc["customer"][1] == dbapi.NUMBER and desc["amount"][1] == dbapi.NUMBER
    assert desc["name"][1] == dbapi.STRING and desc["name"][1] != dbapi.NUMBER
    assert desc["first_order"][1] == dbapi.DATETIME and desc["signup"][1] == dbapi.DATETIME
    assert desc["vip"][1] != dbapi.STRING


def test_values_have_the_same_python_types_on_both_transports(connect: Connect, world: dict[str, Any]) -> None:
    cur = connect().cursor()
    cur.execute("SELECT customer, name, amount, vip, first_order, signup FROM orders ORDER BY customer")
    rows = cur.fetchall()
    assert [r[0] for r in rows] == [r[0] for r in ORDER_ROWS]
    first = rows[0]
    assert first[1] == "ada" and first[2] == 10.5 and first[3] is True
    assert isinstance(first[4], dt.datetime) and first[4].astimezone(dt.timezone.utc) == ORDER_ROWS[0][4]
    assert first[5] == dt.date(1970, 1, 1) + dt.timedelta(days=19000)
    assert rows[3][1:] == (None, 0.0, False, None, None)
    # The in-process rows are the reference: the remote JSON decoding must give identical values.
    with dbapi.connect(gateway=world["gw"]) as ref:
        assert ref.cursor().execute(
            "SELECT customer, name, amount, vip, first_order, signup FROM orders ORDER BY customer"
        ).fetchall() == rows


@pytest.mark.parametrize("expr", [
    "TIME '24:00:00'",  # DuckDB hands this out as text: the remote decoder crashed (hour must be in 0..23)
    "DATE '9999-12-31' + 1", "TIMESTAMP '9999-12-31 23:00:00' + INTERVAL 2 HOUR",  # text too
    "TIMETZ '12:00:00+05'", "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID", "'POINT(1 2)'::GEOMETRY",
    "[1.5::DECIMAL(4,1), NULL]", "[INTERVAL 1 DAY]", "['6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID]",
    "{'t': TIMESTAMPTZ '2024-01-01 00:00:00+00', 'n': NULL::DATE}",
    "{'a b': [1.5::DECIMAL(3,1)], 'c': {'d': DATE '2024-01-01'}}", "struct_pack(\"x,y\" := 1.5::DECIMAL(2,1))",
    "[[DATE '2024-01-01'], NULL]",
])
def test_remote_values_equal_the_in_process_ones(world: dict[str, Any], expr: str) -> None:
    """The remote transport decodes JSON by column type, inside LIST and STRUCT values too, and leaves what it
    cannot read as sent (as DuckDB does in process) instead of failing the fetch."""
    sql = f"SELECT {expr} AS v"
    with dbapi.connect(gateway=world["gw"]) as local, dbapi.connect(world["url"]) as remote:
        want = local.cursor().execute(sql).fetchall()
        got = remote.cursor().execute(sql).fetchall()
    assert got == want and type(got[0][0]) is type(want[0][0]), (got, want)


def test_decimal_interval_and_blob_survive_the_wire(connect: Connect) -> None:
    cur = connect().cursor()
    cur.execute(
        "SELECT CAST(amount AS DECIMAL(10,2)) AS d, INTERVAL 90 MINUTE AS i, encode(name) AS b"
        " FROM orders WHERE customer = 1"
    )
    assert cur.fetchone() == (decimal.Decimal("10.50"), dt.timedelta(minutes=90), b"ada")
    d, i, b = cur.description
    assert d[1] == dbapi.NUMBER and (d[4], d[5]) == (10, 2)
    assert i[1] == dbapi.DATETIME and b[1] == dbapi.BINARY


def test_fetch_styles_and_iteration(connect: Connect) -> None:
    cur = connect().cursor()
    cur.arraysize = 2
    cur.execute("SELECT customer FROM orders ORDER BY customer")
    assert cur.fetchone() == (1,)
    assert cur.rownumber == 1
    assert cur.fetchmany() == [(2,), (3,)]
    assert list(cur) == [(4,), (5,)]
    assert cur.fetchall() == [] and cur.fetchone() is None


def test_executemany_reads_each_parameter_set(connect: Connect) -> None:
    cur = connect().cursor()
    cur.executemany("SELECT name FROM orders WHERE customer = ?", [(1,), (2,)])
    assert cur.fetchall() == [("bob",)]  # the last statement's result set
    assert cur.rowcount == -1


def test_show_tables_and_describe(connect: Connect) -> None:
    cur = connect().cursor()
    cur.execute("SHOW TABLES")
    assert {r[0] for r in cur.fetchall()} == {"orders", "late_orders"}
    assert cur.statement == "show_tables"
    cur.execute("DESCRIBE orders")
    rows = cur.fetchall()
    assert rows[0][:2] == ("customer", cur.execute("SELECT customer FROM orders LIMIT 1").description[0][1])


# -- positions -------------------------------------------------------------------------------
def test_connection_position_merges_results(connect: Connect, world: dict[str, Any]) -> None:
    conn = connect()
    assert conn.position.is_empty()
    cur = conn.cursor()
    cur.execute("SELECT amount FROM late_orders WHERE customer = 1")
    assert cur.position == Position.from_map({"shop": {0: 3}})
    cur.execute("SELECT amount FROM orders WHERE customer = 1")
    assert conn.position == world["pos"]  # max per partition of 3 and 10


def test_position_bound_unmet_is_a_retryable_operational_error(connect: Connect) -> None:
    cur = connect(position={"shop": {0: 999}}).cursor()
    with pytest.raises(dbapi.OperationalError) as info:
        cur.execute("SELECT name FROM orders WHERE customer = 1")
    err = info.value
    assert isinstance(err, errors.NotUpToBoundError) and err.retryable
    assert {p["failure_reason"] for p in err.partitions} == {"NOT_UP_TO_BOUND"}
    assert {p["store"] for p in err.partitions} == {"orders"}


def test_position_bound_met_reads(connect: Connect, world: dict[str, Any]) -> None:
    cur = connect(position='{"shop": {"0": 10}}').cursor()
    assert cur.execute("SELECT name FROM orders WHERE customer = 2").fetchall() == [("bob",)]


def test_monotonic_connection_refuses_to_go_back_in_time(connect: Connect) -> None:
    # late_orders lags orders on the same topic: after reading orders at offset 10, a monotonic
    # connection must not answer from late_orders at offset 3; a plain one does.
    plain = connect().cursor()
    plain.execute("SELECT amount FROM orders WHERE customer = 1")
    assert plain.execute("SELECT amount FROM late_orders WHERE customer = 1").fetchall() == [(10.5,)]

    mono = connect(monotonic=True)
    cur = mono.cursor()
    cur.execute("SELECT amount FROM orders WHERE customer = 1")
    with pytest.raises(errors.NotUpToBoundError):
        cur.execute("SELECT amount FROM late_orders WHERE customer = 1")


def test_partial_results_return_rows_with_failures_beside_them(connect: Connect) -> None:
    cur = connect(position={"shop": {0: 5}}, partial=True).cursor()
    cur.execute("SELECT customer FROM orders UNION ALL SELECT customer FROM late_orders")
    assert sorted(r[0] for r in cur.fetchall()) == [1, 2, 3, 4, 5]  # late_orders (offset 3) is behind
    failed = {(p.store, p.partition): p.failure_reason for p in cur.partitions if p.is_failure}
    assert failed == {("late_orders", 0): "NOT_UP_TO_BOUND", ("late_orders", 1): "NOT_UP_TO_BOUND"}


# -- session settings ----------------------------------------------------------------------------
def test_set_is_kept_per_connection(connect: Connect) -> None:
    conn, other = connect(), connect()
    cur = conn.cursor()
    cur.execute("SET max_rows = 2")
    assert cur.description is None and cur.rowcount == -1
    assert conn.settings["max_rows"] == 2
    with pytest.raises(errors.RowLimitExceeded):
        cur.execute("SELECT customer FROM orders")
    assert len(conn.cursor().execute("SELECT customer FROM orders LIMIT 2").fetchall()) == 2
    assert len(other.cursor().execute("SELECT customer FROM orders").fetchall()) == 5
    assert "max_rows" not in other.settings


def test_initial_session_settings(connect: Connect) -> None:
    conn = connect(session={"max_rows": 1})
    with pytest.raises(errors.RowLimitExceeded):
        conn.cursor().execute("SELECT customer FROM orders")


def test_invalid_setting_is_a_programming_error(connect: Connect) -> None:
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("SET max_rows = 'lots'")
    assert info.value.code == "INVALID_SETTING"


# -- errors ------------------------------------------------------------------------------------------
def test_syntax_error_names_line_and_column(connect: Connect) -> None:
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("SELECT name\nFROM orders WHERE customer = = 1")
    assert info.value.code == "SQL_SYNTAX_ERROR"
    assert info.value.line == 2


def test_unknown_store_and_column(connect: Connect) -> None:
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("SELECT * FROM nowhere")
    assert isinstance(info.value, errors.UnknownStoreError)
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("SELECT colour FROM orders")
    assert info.value.code == "UNKNOWN_COLUMN"


def test_writes_are_refused(connect: Connect) -> None:
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("INSERT INTO orders VALUES (9, 'x', 1.0, true, NULL, NULL)")
    assert info.value.code == "READ_ONLY"
    assert cur.description is None


def test_bad_parameters(connect: Connect) -> None:
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError, match="parameters must be"):
        cur.execute("SELECT name FROM orders WHERE customer = ?", "1")
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT name FROM orders WHERE customer = ?", [])
    with pytest.raises(dbapi.ProgrammingError, match="SQL string"):
        cur.execute(b"SELECT 1")  # type: ignore[arg-type]
    for not_sets in (5, None, "1", b"1"):
        with pytest.raises(dbapi.ProgrammingError, match="executemany\\(\\) takes a sequence of parameter sets"):
            cur.executemany("SELECT name FROM orders WHERE customer = ?", not_sets)  # type: ignore[arg-type]


def test_misuse_raises_interface_error(connect: Connect) -> None:
    conn = connect()
    cur = conn.cursor()
    with pytest.raises(dbapi.InterfaceError, match="no statement"):
        cur.fetchone()
    cur.execute("SET partial_results = false")
    with pytest.raises(dbapi.InterfaceError, match="no result set"):
        cur.fetchall()
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT 1").fetchmany(-1)
    with pytest.raises(dbapi.NotSupportedError):
        cur.nextset()
    cur.close()
    cur.close()  # closing a cursor twice is harmless
    with pytest.raises(dbapi.InterfaceError, match="cursor is closed"):
        cur.execute("SELECT 1")
    cur2 = conn.cursor()
    conn.close()
    assert cur2.closed
    for call in (lambda: cur2.execute("SELECT 1"), conn.cursor, conn.commit, conn.rollback, conn.close):
        with pytest.raises(dbapi.InterfaceError):
            call()


def test_context_managers_close(connect: Connect) -> None:
    with connect() as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        assert cur.closed
    assert conn.closed


# -- connect() ------------------------------------------------------------------------------------------
def test_connect_arguments_are_checked(world: dict[str, Any]) -> None:
    with pytest.raises(dbapi.InterfaceError, match="exactly one"):
        dbapi.connect()
    with pytest.raises(dbapi.InterfaceError, match="exactly one"):
        dbapi.connect(world["url"], gateway=world["gw"])
    with pytest.raises(dbapi.InterfaceError, match="http://host:port"):
        dbapi.connect("ftp://127.0.0.1:1")
    with pytest.raises(dbapi.InterfaceError, match="position"):
        dbapi.connect(world["url"], position={"shop": {0: -1}})
    with pytest.raises(dbapi.InterfaceError, match="position"):
        dbapi.connect(world["url"], position=42)  # type: ignore[arg-type]
    with pytest.raises(dbapi.InterfaceError, match="session"):
        dbapi.connect(world["url"], session=["max_rows"])  # type: ignore[arg-type]
    with pytest.raises(dbapi.InterfaceError, match="do not apply"):
        dbapi.connect(gateway=world["gw"], token="t")
    with pytest.raises(dbapi.InterfaceError, match="unexpected keyword"):
        dbapi.connect(world["url"], colour="red")
    with pytest.raises(dbapi.ProgrammingError):
        dbapi.connect(gateway=world["gw"], session={"max_rows": -5})


def test_gateway_connect_is_the_dbapi_connect() -> None:
    assert gateway.connect is dbapi.connect


def test_module_globals() -> None:
    assert (dbapi.apilevel, dbapi.paramstyle, dbapi.threadsafety) == ("2.0", "qmark", 2)
    assert issubclass(errors.PartitionFailureError, dbapi.OperationalError)
    assert issubclass(errors.SqlError, dbapi.ProgrammingError)
    assert dbapi.Binary(b"x") == b"x" and dbapi.Date(2024, 1, 2) == dt.date(2024, 1, 2)
    assert dbapi.ROWID != "BIGINT" and dbapi.STRING != dbapi.NUMBER
    for name in dbapi.__all__:
        assert hasattr(dbapi, name), name


# -- remote only -------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_is_an_operational_error() -> None:
    conn = dbapi.connect(f"http://127.0.0.1:{_free_port()}", timeout=2)
    with pytest.raises(dbapi.OperationalError, match="cannot reach"):
        conn.cursor().execute("SELECT 1")


def test_wrong_path_is_reported_as_the_servers_error(world: dict[str, Any]) -> None:
    conn = dbapi.connect(world["url"] + "/not-the-gateway")
    with pytest.raises(dbapi.InterfaceError) as info:
        conn.cursor().execute("SELECT 1")
    assert isinstance(info.value, errors.RouteNotFound)


def test_bearer_token(world: dict[str, Any]) -> None:
    with serve(world["gw"], GatewayConfig(auth_token="s3cret")) as url:
        with pytest.raises(errors.Unauthorized):
            dbapi.connect(url).cursor().execute("SELECT 1")
        with pytest.raises(errors.Unauthorized):
            dbapi.connect(url, token="wrong").cursor().execute("SELECT 1")
        assert dbapi.connect(url, token="s3cret").cursor().execute("SELECT 1").fetchall() == [(1,)]


def test_remote_parameters_of_every_type_are_encoded(world: dict[str, Any]) -> None:
    cur = dbapi.connect(world["url"]).cursor()
    cur.execute(
        "SELECT CAST(? AS TIMESTAMP), CAST(? AS DATE), CAST(? AS DECIMAL(5,2)), CAST(? AS BIGINT)",
        [dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2), decimal.Decimal("1.25"), 7],
    )
    assert cur.fetchone() == (dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2), decimal.Decimal("1.25"), 7)
    with pytest.raises(dbapi.InterfaceError, match="cannot send"):
        cur.execute("SELECT ?", [object()])


def test_position_bound_session_setting(connect: Connect) -> None:
    cur = connect().cursor()
    cur.execute("""SET position_bound = '{"shop": {"0": 999}}'""")
    with pytest.raises(errors.NotUpToBoundError):
        cur.execute("SELECT name FROM orders WHERE customer = 1")
    cur.execute("SET position_bound = ''")
    assert cur.execute("SELECT name FROM orders WHERE customer = 1").fetchall() == [("ada",)]


def test_remote_retryable_error_carries_retry_after(world: dict[str, Any]) -> None:
    cur = dbapi.connect(world["url"], position={"shop": {0: 999}}).cursor()
    with pytest.raises(errors.NotUpToBoundError) as info:
        cur.execute("SELECT name FROM orders WHERE customer = 1")
    assert info.value.retry_after == float(world["gw"].config.retry_after_s)
    assert info.value.http_status == 503


# -- KIP-216: the application's state reaches DB-API callers as OperationalError subclasses ------------------
def test_app_states_map_to_operational_errors(tmp_path: Path) -> None:
    app = make_app(tmp_path, [ORDERS])
    gw = Gateway(app)
    try:
        app.writer("orders").write_batch(1, [], Position.from_map({"shop": {0: 1}}))
        with serve(gw) as url:
            remote, local = dbapi.connect(url).cursor(), dbapi.connect(gateway=gw).cursor()
            for cur in (remote, local):
                assert cur.execute("SELECT count(*) FROM orders").fetchone() == (0,)
            app.close()
            for cur in (remote, local):
                with pytest.raises(dbapi.OperationalError) as info:
                    cur.execute("SELECT name FROM orders WHERE customer = 1")
                assert isinstance(info.value, (errors.StreamsStoppedError, errors.StateStoreNotAvailableError))
                assert not info.value.retryable
    finally:
        gw.close()
        app.close()


def test_app_not_started_is_retryable(tmp_path: Path) -> None:
    from stores.app.streams import StoreTopology, StreamsApp

    app = StreamsApp(StoreTopology([ORDERS]), application_id="dbapi-created", state_dir=tmp_path / "state",
                     coordination_base=tmp_path / "coord")
    gw = Gateway(app)
    try:
        with serve(gw) as url:
            for conn in (dbapi.connect(url), dbapi.connect(gateway=gw)):
                with pytest.raises(dbapi.OperationalError) as info:
                    conn.cursor().execute("SELECT name FROM orders WHERE customer = 1")
                assert isinstance(info.value, errors.StreamsNotStartedError) and info.value.retryable
    finally:
        gw.close()
        app.close()


# -- a misbehaving server (or a proxy in front of it) --------------------------------------------------------
@pytest.fixture()
def canned_server() -> Iterator[tuple[str, list[tuple[int, str, bytes]]]]:
    """A stdlib HTTP server on 127.0.0.1 answering each POST with the next canned (status, type, body)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers: list[tuple[int, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, ctype, body = answers.pop(0)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_answers_that_are_not_results_are_operational_errors(
    canned_server: tuple[str, list[tuple[int, str, bytes]]]
) -> None:
    url, answers = canned_server
    cur = dbapi.connect(url).cursor()
    cases = [
        ((200, "text/html", b"<html>proxy login</html>"), "not JSON"),
        ((200, "application/json", b'{"hello": 1}'), "not a result"),
        ((200, "application/json", b'{"columns": [], "rows": [], "position": {"t": {"0": -4}}}'), "malformed"),
        ((200, "application/json", b'{"columns": [], "rows": [], "partitions": [{"store": "s"}]}'), "malformed"),
    ]
    for answer, match in cases:
        answers.append(answer)
        with pytest.raises(dbapi.OperationalError, match=match):
            cur.execute("SELECT 1")
    answers.append((502, "text/html", b"<html>bad gateway</html>"))
    with pytest.raises(errors.GatewayInternalError, match="without an error body") as info:
        cur.execute("SELECT 1")
    assert info.value.http_status == 502


def test_remote_parameters_that_json_cannot_carry(world: dict[str, Any]) -> None:
    cur = dbapi.connect(world["url"]).cursor()
    with pytest.raises(dbapi.InterfaceError, match="cannot be encoded as JSON"):
        cur.execute("SELECT ?", [float("nan")])


def test_unexpected_failures_still_raise_pep249_classes() -> None:
    from gateway.dbapi.inprocess import as_dbapi_error
    from planner.errors import SqlSyntaxError
    from stores.iqv2.errors import StreamsRebalancingException

    syntax = as_dbapi_error(SqlSyntaxError("bad", line=1, col=3))
    assert isinstance(syntax, dbapi.ProgrammingError) and (syntax.code, syntax.col) == ("SQL_SYNTAX_ERROR", 3)
    rebalancing = as_dbapi_error(StreamsRebalancingException("moving"))
    assert isinstance(rebalancing, dbapi.OperationalError) and rebalancing.retryable
    assert isinstance(as_dbapi_error(TypeError("sql() got an unexpected keyword")), dbapi.InterfaceError)
    internal = as_dbapi_error(RuntimeError("boom"))
    assert isinstance(internal, dbapi.InternalError) and "RuntimeError: boom" in str(internal)


def test_threads_share_a_connection_with_a_cursor_each(connect: Connect, world: dict[str, Any]) -> None:
    """threadsafety = 2: one connection, one cursor per thread (bounded: 4 threads x 25 lookups)."""
    from concurrent.futures import ThreadPoolExecutor

    conn = connect()
    names = {r[0]: r[1] for r in ORDER_ROWS}

    def work(i: int) -> list[bool]:
        cur = conn.cursor()
        out = []
        for n in range(25):
            key = (i + n) % 5 + 1
            out.append(cur.execute("SELECT name FROM orders WHERE customer = ?", [key]).fetchall() == [(names[key],)])
        cur.close()
        return out

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [ok for chunk in pool.map(work, range(4), timeout=60) for ok in chunk]
    assert len(results) == 100 and all(results)
    assert conn.position == world["pos"]
