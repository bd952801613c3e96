"""psycopg 3 against the PG port: the extended protocol with bound parameters (text and binary), prepared
statements, IQv2 session settings, and every failure as an ErrorResponse with a stable SQLSTATE."""

from __future__ import annotations

import decimal
import json
import random
import threading
import time

import psycopg
import pytest
from psycopg import errors as pe

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from tests.gateway.gwfixtures import Http, Shop
from tests.gateway.pg.conftest import Pg, http_rows

HEAVY = ("SELECT count(*) FROM revenue a, revenue b, revenue c, revenue d, revenue e, revenue f, revenue g "
         "WHERE a.revenue + b.revenue + c.revenue + d.revenue + e.revenue + f.revenue + g.revenue > -1")


def test_point_lookups_with_bound_parameters_match_http(pg: Pg, server: Http, shop: Shop) -> None:
    customers = sorted(shop.revenue)[:6]
    with pg.connect(autocommit=True) as con:
        for c in customers:
            got = con.execute("SELECT customer, revenue, orders FROM revenue WHERE customer = %s", [c]).fetchall()
            want = http_rows(server, "SELECT customer, revenue, orders FROM revenue WHERE customer = ?", params=[c])
            assert got == want
            assert got == [(c, pytest.approx(shop.revenue[c][0]), shop.revenue[c][1])]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_values_of_every_type_in_text_and_binary(pg: Pg, server: Http, shop: Shop, binary: bool) -> None:
    ids = sorted(shop.accounts)[:10]
    with pg.connect(autocommit=True) as con:
        cur = con.cursor(binary=binary)
        marks = ", ".join(["%s"] * len(ids))
        got = cur.execute(f"SELECT id, name, balance, active, opened FROM accounts WHERE id IN ({marks}) ORDER BY id",
                          ids).fetchall()
    assert [r[0] for r in got] == ids
    for (id_, name, balance, active, opened) in got:
        want_name, want_balance, want_active, want_opened_ms = shop.accounts[id_]
        assert (name, balance, active) == (want_name, want_balance, want_active)
        assert int(opened.timestamp() * 1000) == want_opened_ms and opened.utcoffset().total_seconds() == 0
    assert [d.name for d in cur.description] == ["id", "name", "balance", "active", "opened"]
    assert [d.type_code for d in cur.description] == [20, 25, 701, 16, 1184]  # int8 text float8 bool timestamptz


LISTS = ("SELECT [1, NULL, 3]::BIGINT[] a, []::INTEGER[] b, ['x', NULL, 'y z'] c, [1.5, NULL]::DOUBLE[] d, "
         "[true, false] e, [DATE '2024-01-02'] f, [TIMESTAMPTZ '2024-01-02 03:04:05+00'] g, [[1, 2], [3]] h, "
         "[1.25]::DECIMAL(10, 2)[] i, NULL::INTEGER[] j, [1, 2]::INTEGER[2] k, list(id ORDER BY id) l "
         "FROM accounts WHERE id IN (SELECT id FROM accounts ORDER BY id LIMIT 3)")


def test_lists_in_binary_are_the_lists_in_text(pg: Pg) -> None:
    """A list column was refused to clients reading results in binary ("binary format is not supported for type
    _int8"): it is now PostgreSQL's array_send, elements in their own binary format (s18)."""
    with pg.connect(autocommit=True) as con:
        text = con.cursor(binary=False).execute(LISTS).fetchall()
        cur = con.cursor(binary=True)
        binary = cur.execute(LISTS).fetchall()
    assert binary == text
    assert binary[0][:3] == ([1, None, 3], [], ["x", None, "y z"]) and binary[0][9] is None
    assert [d.type_code for d in cur.description][:7] == [1016, 1007, 1009, 1022, 1000, 1182, 1185]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_array_parameters_are_lists(pg: Pg, shop: Shop, binary: bool) -> None:
    """``= ANY(%s)`` with a list (psycopg sends an int8[] or text[]) was refused ("parameters are single
    values") until s19."""
    ids = sorted(shop.accounts)[:3] + [10**9]
    with pg.connect(autocommit=True) as con:
        cur = con.cursor(binary=binary)
        got = cur.execute("SELECT id FROM accounts WHERE id = ANY(%s) ORDER BY id", [ids]).fetchall()
        names = cur.execute("SELECT customer FROM revenue WHERE customer = ANY(%s) ORDER BY 1",
                            [["c01", "nobody"]]).fetchall()
        with pytest.raises(pe.DatatypeMismatch, match=r"cannot compare key column id \(BIGINT\) with \[1\]"):
            cur.execute("SELECT * FROM accounts WHERE id = %s", [[1]])
    assert got == [(i,) for i in ids[:3]]
    assert names == ([("c01",)] if "c01" in shop.revenue else [])


def test_settings_select_runs_left_to_right(pg: Pg) -> None:
    """asyncpg's JIT switch: one SELECT of current_setting and set_config calls (set_config beside anything
    else was FORBIDDEN_FUNCTION)."""
    with pg.connect(autocommit=True) as con:
        row = con.execute("SELECT current_setting('jit') AS cur, set_config('jit', 'on', false) AS new, "
                          "pg_catalog.current_setting('jit')").fetchone()
        cur = con.execute("SELECT set_config('application_name', %s, false) AS a, current_setting('nope', true) b",
                          ["asy"])
        assert [d.name for d in cur.description] == ["a", "b"] and cur.fetchone() == ("asy", None)
        assert con.execute("SELECT current_setting(%s) AS a, set_config('jit', 'off', false) b",
                           [None]).fetchone() == (None, "off")  # current_setting(NULL) is NULL
        with pytest.raises(pe.InvalidParameterValue, match="must not be NULL"):
            con.execute("SELECT set_config(%s, 'x', false), current_setting('jit')", [None])
        con.execute("SELECT set_config('jit', 'on', false), current_setting('jit')")
        with pytest.raises(pe.UndefinedObject, match="unrecognized configuration parameter"):
            con.execute("SELECT set_config('jit', 'off', false), current_setting('nope')")
        assert con.execute("SHOW jit").fetchone() == ("on",)  # the failed statement changed nothing
    assert row == ("off", "on", "on")


def test_catalog_oids_are_described_as_oid(pg: Pg) -> None:
    """pg_catalog's oid columns are PostgreSQL's oid (26) and oid[] (1028), which asyncpg decodes without
    introspection (it introspected int8[] with a query whose own result was int8[], forever)."""
    with pg.connect(autocommit=True) as con:
        for binary in (False, True):
            cur = con.cursor(binary=binary)
            row = cur.execute("SELECT oid, typelem, array_agg(oid) OVER () FROM pg_type WHERE typname = '_int8'"
                              ).fetchone()
            assert [d.type_code for d in cur.description] == [26, 26, 1028]
            assert row == (1016, 20, [1016])


def test_prepared_statement_reused_with_new_parameters(pg: Pg, shop: Shop) -> None:
    with pg.connect(autocommit=True, prepare_threshold=0) as con:  # server-side prepared from the first run
        for c in sorted(shop.revenue)[:8]:
            row = con.execute("SELECT orders FROM revenue WHERE customer = %s", [c]).fetchone()
            assert row == (shop.revenue[c][1],)


def test_aggregates_and_windows_match_http(pg: Pg, server: Http) -> None:
    sql = ("SELECT customer, count(*) AS windows, sum(orders) AS orders FROM per_min GROUP BY customer "
           "ORDER BY orders DESC, customer LIMIT 5")
    with pg.connect(autocommit=True) as con:
        assert con.execute(sql).fetchall() == http_rows(server, sql)


@pytest.mark.parametrize("sql, sqlstate, error", [
    ("SELECT * FROM no_such_store", "42P01", pe.UndefinedTable),
    ("SELECT no_such_column FROM revenue", "42703", pe.UndefinedColumn),
    ("SELEC customer FROM revenue", "42601", pe.SyntaxError),
    ("INSERT INTO revenue VALUES ('x', 1.0, 1)", "25006", pe.ReadOnlySqlTransaction),
    ("DELETE FROM revenue", "25006", pe.ReadOnlySqlTransaction),
    ("SELECT * FROM read_csv('/etc/passwd')", "42501", pe.InsufficientPrivilege),
])
def test_failures_have_stable_sqlstates(pg: Pg, sql: str, sqlstate: str, error: type) -> None:
    with pg.connect(autocommit=True) as con:
        with pytest.raises(error) as info:
            con.execute(sql)
        assert info.value.sqlstate == sqlstate
        assert con.execute("SELECT 1").fetchone() == (1,)  # the connection goes on


def test_syntax_error_has_a_position(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con, pytest.raises(pe.UndefinedColumn) as info:
        con.execute("SELECT customer,\n       nope FROM revenue")
    assert info.value.diag.statement_position == str(len("SELECT customer,\n       ") + 1)


def test_position_bound_not_reached_is_retryable_and_names_reason_and_partitions(pg: Pg, shop: Shop) -> None:
    ahead = {"orders": {"1": shop.position.offset("orders", 1) + 5}}
    with pg.connect(autocommit=True) as con:
        con.execute(f"SET position_bound = '{json.dumps(ahead)}'")
        assert json.loads(con.execute("SHOW position_bound").fetchone()[0]) == ahead
        with pytest.raises(pe.SerializationFailure) as info:
            con.execute("SELECT * FROM revenue WHERE customer = %s", [sorted(shop.revenue)[0]])
        err = info.value
        assert err.sqlstate == "40001"
        assert err.diag.message_primary.startswith("NOT_UP_TO_BOUND")
        assert "NOT_UP_TO_BOUND" in err.diag.message_detail and "store revenue partition" in err.diag.message_detail
        assert err.diag.message_hint and "wait_for_bound_ms" in err.diag.message_hint
        # a full scan: every partition named in DETAIL
        with pytest.raises(pe.SerializationFailure) as info:
            con.execute("SELECT count(*) FROM revenue")
        detail = info.value.diag.message_detail
        assert all(f"store revenue partition {p}: NOT_UP_TO_BOUND" in detail for p in range(4))
        con.execute("RESET position_bound")
        assert con.execute("SELECT count(*) FROM revenue").fetchone() == (len(shop.revenue),)


def test_show_last_position_is_the_position_of_the_last_answer(pg: Pg, server: Http, shop: Shop) -> None:
    with pg.connect(autocommit=True) as con:
        assert json.loads(con.execute("SHOW last_position").fetchone()[0]) == {}
        con.execute("SELECT * FROM revenue WHERE customer = %s", [sorted(shop.revenue)[0]]).fetchall()
        got = json.loads(con.execute("SHOW last_position").fetchone()[0])
    _, _, body = server.sql("SELECT * FROM revenue WHERE customer = ?", params=[sorted(shop.revenue)[0]])
    assert got == body["position"] == {"orders": {str(p): o for p, o in shop.position.to_json_map()["orders"].items()}}


def test_bound_reached_answers_and_set_config_sets_it(pg: Pg, shop: Shop) -> None:
    reached = {"orders": {"0": shop.position.offset("orders", 0)}}
    with pg.connect(autocommit=True) as con:
        row = con.execute("SELECT set_config('position_bound', %s, false)", [json.dumps(reached)]).fetchone()
        assert json.loads(row[0]) == reached
        assert con.execute("SELECT count(*) FROM revenue").fetchone() == (len(shop.revenue),)
        assert con.execute("SELECT set_config('search_path', 'public', false)").fetchone() == ("public",)
        assert con.execute("SHOW search_path").fetchone() == ("public",)


def test_partial_results_failures_come_as_a_notice(pg: Pg, shop: Shop) -> None:
    ahead = {"orders": {"1": shop.position.offset("orders", 1) + 5}}
    notices: list[dict[str, str | None]] = []  # a Diagnostic is only valid inside the handler
    with pg.connect(autocommit=True) as con:
        con.add_notice_handler(lambda d: notices.append({"severity": d.severity, "sqlstate": d.sqlstate,
                                                         "message": d.message_primary, "detail": d.message_detail}))
        con.execute("SET partial_results = true")
        con.execute(f"SET position_bound = '{json.dumps(ahead)}'")
        assert con.execute("SELECT customer FROM revenue").fetchall() == []  # every partition is behind
    assert len(notices) == 1
    n = notices[0]
    assert n["severity"] == "WARNING" and n["sqlstate"] == "01000" and "partial result" in str(n["message"])
    assert all(f"store revenue partition {p}: NOT_UP_TO_BOUND" in str(n["detail"]) for p in range(4))


def test_statement_timeout_is_57014(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con:
        con.execute("SET statement_timeout = 100")
        assert con.execute("SHOW statement_timeout").fetchone() == ("100ms",)
        with pytest.raises(pe.QueryCanceled) as info:
            con.execute(HEAVY)
        assert info.value.sqlstate == "57014" and "STATEMENT_TIMEOUT" in str(info.value)
        con.execute("RESET statement_timeout")
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_cancel_request_stops_the_running_statement(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con:
        timer = threading.Timer(0.5, con.cancel_safe)  # cancel() blocks holding the GIL: the server runs in this process
        timer.start()
        try:
            with pytest.raises(pe.QueryCanceled) as info:
                con.execute(HEAVY)
        finally:
            timer.cancel()
        assert info.value.sqlstate == "57014"
        assert con.execute("SELECT 2").fetchone() == (2,)


def test_out_of_memory_is_53200(shop_app: object) -> None:
    gw = Gateway(shop_app, config=GatewayConfig(max_memory_bytes=16 * 2**20))
    try:
        with PgServer(gw) as srv, psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate",
                                                  autocommit=True, connect_timeout=10) as con:
            with pytest.raises(pe.OutOfMemory) as info:
                con.execute("SELECT count(DISTINCT a.customer || b.customer || c.customer || d.customer) "
                            "FROM revenue a, revenue b, revenue c, revenue d")
            assert info.value.sqlstate == "53200"
            # the server stays up and answers again once the failed statement's memory is given back (DuckDB's
            # allocator flushes within seconds; until then the budget still counts it): bounded retry
            deadline = time.monotonic() + 15
            for _ in range(100):
                try:
                    assert con.execute("SELECT count(*) FROM revenue").fetchone()[0] > 0
                    break
                except pe.OutOfMemory:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    finally:
        gw.close()


def test_transactions_are_read_only_groupings(pg: Pg, shop: Shop) -> None:
    with pg.connect() as con:  # psycopg's default: BEGIN before the first statement
        assert con.execute("SELECT count(*) FROM revenue").fetchone() == (len(shop.revenue),)
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert con.execute("SHOW transaction_read_only").fetchone() == ("on",)
        con.commit()
        with pytest.raises(pe.UndefinedTable):
            con.execute("SELECT * FROM nope")
        with pytest.raises(pe.InFailedSqlTransaction):
            con.execute("SELECT 1")
        con.rollback()
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_what_clients_send_on_connect(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con:
        assert con.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 16")
        assert con.info.parameter_status("server_version") == "16.4"
        assert con.execute("SHOW transaction isolation level").fetchone() == ("read committed",)
        assert con.execute("SELECT current_setting('DateStyle')").fetchone() == ("ISO, MDY",)
        con.execute("SET application_name = 'pg-tests'")
        assert con.info.parameter_status("application_name") == "pg-tests"
        assert con.execute("SELECT current_schema(), current_database()").fetchone() == ("public", "iqgate")
        # BI tools alias with keywords PostgreSQL allows after AS
        assert con.execute("SELECT 1 AS select, 2 AS \"from\"").fetchone() == (1, 2)
        assert [d.name for d in con.execute("SELECT customer AS select FROM revenue LIMIT 1").description] == ["select"]


def test_bad_password_is_28P01_for_every_method(gw: Gateway) -> None:
    for method in ("scram-sha-256", "md5", "password"):
        with PgServer(gw, token="right", auth_method=method) as srv:
            with pytest.raises(psycopg.OperationalError) as info:
                psycopg.connect(host=srv.host, port=srv.port, user="u", password="wrong", dbname="iqgate",
                                connect_timeout=10)
            assert "password authentication failed" in str(info.value), method
            with psycopg.connect(host=srv.host, port=srv.port, user="u", password="right", dbname="iqgate",
                                 connect_timeout=10, autocommit=True) as con:
                assert con.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("scale", [0, 2, 4, 9, 12, 18])
def test_decimals_in_binary_are_the_decimals_in_text(pg: Pg, scale: int) -> None:
    """numeric_send wrote 0.0001 as 0.1000 (a fraction with fewer digits than its scale lost its leading zeros;
    found by asyncpg, which reads every result in binary). psycopg parses the text itself."""
    rnd = random.Random(scale)
    values = ["0", "1", "-1", "0.0001", "0.1", "0.00000001", "-0.000123", "12345.6789"]
    values += [str(decimal.Decimal(rnd.randrange(-10**m, 10**m)).scaleb(-rnd.randrange(0, 19)))
               for m in (1, 3, 6, 9, 12, 15, 18) for _ in range(6)]
    sql = (f"SELECT v::DECIMAL(38,{scale}) FROM (VALUES " + ", ".join(f"('{v}')" for v in values)
           + ") t(v)")
    with pg.connect(autocommit=True) as con:
        text = con.cursor(binary=False).execute(sql).fetchall()
        binary = con.cursor(binary=True).execute(sql).fetchall()
    assert binary == text
    assert any(0 < abs(r[0]) < 1 for r in text) or scale == 0
