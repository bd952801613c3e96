"""Every face enforces the same grants: HTTP (fast path and Flask), the query page's links, /v1/stores, health,
metrics, the remote DB-API and SQLAlchemy, the PG port (SCRAM as the startup user, COPY, catalog queries), Flight
SQL, and the routing endpoints. alice attacks bob's ``last_order``; every answer must be the one a store that does
not exist gets, and the counting app must show 0 reads of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from gateway.access import AccessContext, Admission, AuditLog, Users
from gateway.engine.gateway import Gateway
from gateway.flight import start_flight
from gateway.http import create_app
from gateway.pg import PgServer
from gateway.routing import ON_BEHALF_OF
from gateway.routing.codec import encode_request
from gateway.serving.http_server import ServerThread
from stores.iqv2.query import KeyQuery
from stores.iqv2.request import StateQueryRequest
from tests.gateway.access.team import VICTIM, CountingApp, Team, users
from tests.gateway.flight.conftest import Raw
from tests.gateway.gwfixtures import Http

GHOST = "nast_ordex"  # a name that exists nowhere, as long as the victim's


@pytest.fixture(scope="module")
def access(team: Team, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccessContext]:
    ctx = AccessContext(Users.load(team.path), audit=AuditLog(str(tmp_path_factory.mktemp("audit") / "audit.log")),
                        admission=Admission(8))
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def http(team_gw: Gateway, access: AccessContext) -> Iterator[str]:
    with ServerThread(create_app(team_gw, access=access), threads=4) as srv:
        yield srv.url


@contextmanager
def unread(counting: CountingApp) -> Iterator[None]:
    """The block reads the victim's store not once."""
    before = counting.reads[VICTIM]
    yield
    assert counting.reads[VICTIM] == before, f"{VICTIM} was read"


def _as(url: str, team: Team, name: str | None) -> Http:
    return Http(url, team.tokens[name] if name else None)


def _error(body: Any) -> tuple[str, str]:
    return body["error"]["code"], body["error"]["message"]


# -- HTTP -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accept", [None, "application/x-ndjson", "text/csv", "application/vnd.apache.arrow.stream"])
@pytest.mark.parametrize("sql", ["SELECT * FROM last_order", "SELECT amount FROM last_order WHERE customer = 'c01'",
                                 "SELECT * FROM revenue JOIN last_order USING (customer)",
                                 "EXPLAIN SELECT * FROM last_order", "DESCRIBE last_order"])
def test_http_answers_a_forbidden_store_as_one_that_does_not_exist(http: str, team: Team, counting: CountingApp,
                                                                   sql: str, accept: str | None) -> None:
    _as(http, team, "peer").sql(sql)  # plan and point lane cached first by someone who may read it
    with unread(counting):
        status, _, body = _as(http, team, "alice").sql(sql, accept=accept)
        status2, _, body2 = _as(http, team, "alice").sql(sql.replace(VICTIM, GHOST), accept=accept)
    assert status == status2 == 404
    assert _error(body)[0] == "UNKNOWN_STORE"
    assert _error(body)[1] == _error(body2)[1].replace(GHOST, VICTIM)
    assert _as(http, team, "peer").sql(sql)[0] == 200


def test_http_catalog_endpoints_show_only_the_callers_stores(http: str, team: Team, counting: CountingApp) -> None:
    with unread(counting):
        _catalog_endpoints(http, team)


def _catalog_endpoints(http: str, team: Team) -> None:
    alice = _as(http, team, "alice")
    status, _, body = alice.request("GET", "/v1/stores")
    assert status == 200 and [s["name"] for s in json.loads(body)["stores"]] == ["accounts", "revenue"]
    for path in ("/metrics", "/v1/partitions", "/v1/stores"):
        status, _, body = alice.request("GET", path)
        assert status == 200 and VICTIM.encode() not in body and b"latest" not in body, path
    status, _, body = alice.request("GET", "/v1/query?sql=SELECT+*+FROM+last_order&format=csv")
    assert status == 404 and json.loads(body)["error"]["code"] == "UNKNOWN_STORE"
    status, _, body = alice.sql("SHOW TABLES")
    assert [r[0] for r in body["rows"]] == ["accounts", "revenue"]
    assert _as(http, team, "dave").sql("SHOW TABLES")[2]["rows"] == []


def test_health_without_a_token_names_no_store(http: str, team: Team) -> None:
    status, _, raw = Http(http).request("GET", "/v1/health")
    body = json.loads(raw)
    assert body["state"] == "RUNNING" and body["stores"] == {} and VICTIM.encode() not in raw
    body = json.loads(_as(http, team, "carol").request("GET", "/v1/health")[2])
    assert set(body["stores"]) <= {"accounts"}
    wrong = Http(http, "iqg_00000000_" + "x" * 43).request("GET", "/v1/health")
    assert wrong[0] == 200 and json.loads(wrong[2])["stores"] == {}  # an open endpoint never refuses


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc", "Bearer iqg_00000000_" + "y" * 43])
def test_http_without_a_users_token_is_401(http: str, header: str | None) -> None:
    for path, method, body in (("/v1/sql", "POST", {"sql": "SELECT 1"}), ("/v1/stores", "GET", None),
                               ("/v1/ping", "GET", None), ("/v1/query?sql=SELECT+1", "GET", None)):
        status, hdrs, raw = Http(http).request(method, path, body, headers={"Authorization": header} if header else {})
        assert status == 401 and json.loads(raw)["error"]["code"] == "UNAUTHORIZED", (path, raw)
        assert hdrs.get("www-authenticate") == 'Bearer realm="iqgate"'


def test_remote_dbapi_and_sqlalchemy_see_only_the_users_stores(http: str, team: Team, counting: CountingApp) -> None:
    with unread(counting):
        _remote_clients(http, team)


def _remote_clients(http: str, team: Team) -> None:
    import sqlalchemy as sa
    from iqgate_client import connect
    from iqgate_client.errors import ProgrammingError, UnknownStoreError

    with connect(http, token=team.tokens["alice"]) as con:
        cur = con.cursor()
        with pytest.raises(UnknownStoreError) as err:
            cur.execute("SELECT * FROM last_order")
        assert isinstance(err.value, ProgrammingError)
        cur.execute("SELECT count(*) FROM revenue")
        assert cur.fetchone()[0] > 0
    host_port = http.removeprefix("http://")
    engine = sa.create_engine(f"iqgate://:{team.tokens['alice']}@{host_port}")
    try:
        assert sorted(sa.inspect(engine).get_table_names()) == ["accounts", "revenue"]
    finally:
        engine.dispose()


def test_a_revoke_takes_effect_at_the_next_statement(tmp_path: Any, team_gw: Gateway, counting: CountingApp) -> None:
    path = tmp_path / "users.toml"
    users(path, "grant", "r", "revenue")
    users(path, "grant", "r", "last_order")
    token = users(path, "add", "zoe", "--role", "r")
    ctx = AccessContext(Users.load(path))
    with ServerThread(create_app(team_gw, access=ctx), threads=2) as srv, \
            PgServer(team_gw, access=ctx) as pg:
        import psycopg

        zoe = Http(srv.url, token)
        with psycopg.connect(host=pg.host, port=pg.port, user="zoe", password=token, dbname="iqgate",
                             connect_timeout=10) as con:
            assert con.execute("SELECT count(*) FROM last_order").fetchone()[0] > 0
            assert zoe.sql("SELECT count(*) FROM last_order")[0] == 200
            users(path, "revoke", "r", "last_order")  # the running server re-reads the file by itself
            before = counting.reads[VICTIM]
            assert zoe.sql("SELECT count(*) FROM last_order")[0] == 404
            with pytest.raises(psycopg.errors.UndefinedTable):
                con.execute("SELECT count(*) FROM last_order")
            con.rollback()
            assert counting.reads[VICTIM] == before
            assert con.execute("SELECT count(*) FROM revenue").fetchone()[0] > 0  # the same connection goes on
            users(path, "remove", "zoe")
            with pytest.raises(psycopg.errors.InvalidPassword):
                con.execute("SELECT count(*) FROM revenue")
        assert zoe.sql("SELECT 1")[0] == 401


# -- PG -------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg(team_gw: Gateway, access: AccessContext) -> Iterator[PgServer]:
    with PgServer(team_gw, access=access, body_timeout_s=5.0) as srv:
        yield srv


def _pg(pg: PgServer, user: str, password: str) -> Any:
    import psycopg

    return psycopg.connect(host=pg.host, port=pg.port, user=user, password=password, dbname="iqgate",
                           connect_timeout=10, autocommit=True)


@pytest.mark.parametrize("sql", ["SELECT * FROM last_order", "SELECT * FROM public.last_order",
                                 "COPY last_order TO STDOUT", "COPY (SELECT * FROM last_order) TO STDOUT WITH CSV",
                                 "SELECT 'last_order'::regclass", "DESCRIBE last_order",
                                 "SELECT * FROM revenue r JOIN last_order l ON r.customer = l.customer"])
def test_pg_answers_a_forbidden_store_as_one_that_does_not_exist(pg: PgServer, team: Team, counting: CountingApp,
                                                                  sql: str) -> None:
    import psycopg

    with unread(counting), _pg(pg, "alice", team.tokens["alice"]) as con:
        errors = []
        for text in (sql, sql.replace(VICTIM, GHOST)):
            try:
                if text.startswith("COPY"):
                    with con.cursor().copy(text) as copy:
                        for _ in copy:
                            pass
                else:
                    con.execute(text).fetchall()
                errors.append(None)
            except psycopg.Error as exc:
                errors.append((exc.sqlstate, str(exc).replace(GHOST, VICTIM)))
        assert errors[0] == errors[1]
    with _pg(pg, "peer", team.tokens["peer"]) as con:  # who may read it does, on the same port
        if not sql.startswith("COPY") and "regclass" not in sql:
            assert con.execute(sql).fetchall()


def test_pg_catalog_queries_and_prepared_statements_see_only_the_users_stores(pg: PgServer, team: Team,
                                                                              counting: CountingApp) -> None:
    import psycopg

    with unread(counting), _pg(pg, "alice", team.tokens["alice"]) as con:
        dt = con.execute("SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON "
                         "n.oid = c.relnamespace WHERE n.nspname = 'public' ORDER BY 1").fetchall()
        assert dt == [("accounts",), ("revenue",)]
        assert con.execute("SELECT to_regclass('last_order')").fetchone() == (None,)
        assert con.execute("SELECT current_user").fetchone() == ("alice",)
        with pytest.raises(psycopg.errors.UndefinedTable):
            con.execute("SELECT amount FROM last_order WHERE customer = %s", ["c01"], prepare=True)


def test_pg_logs_in_the_startup_user_with_their_password_or_token(pg: PgServer, team: Team,
                                                                  access: AccessContext) -> None:
    import psycopg

    from tests.gateway.access.team import CAROL_PASSWORD

    with _pg(pg, "carol", CAROL_PASSWORD) as con:  # her PG password (SCRAM, SASLprep'ed: non-ASCII)
        assert con.execute("SELECT count(*) FROM accounts").fetchone()[0] > 0
    failures = []
    for user, password in (("carol", team.tokens["carol"]), ("alice", team.tokens["bob"]), ("mallory", "x"),
                           ("alice", "wrong")):
        with pytest.raises(psycopg.OperationalError) as err:
            _pg(pg, user, password)
        failures.append(str(err.value))
        assert "password authentication failed" in str(err.value) and "Traceback" not in str(err.value)
    # a name that is no user fails exactly like a wrong password (no way to probe which names exist)
    assert failures[2].replace("mallory", "alice") == failures[1]


# -- Flight SQL -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flight(team_gw: Gateway, access: AccessContext) -> Iterator[Any]:
    handle = start_flight(team_gw, access=access)
    yield handle
    handle.close()


def test_flight_sees_only_the_users_stores(flight: Any, team: Team, counting: CountingApp) -> None:
    with unread(counting):
        _flight_as_alice(flight, team)


def _flight_as_alice(flight: Any, team: Team) -> None:
    import adbc_driver_flightsql.dbapi as dbapi

    raw = Raw(fl.FlightClient(flight.location), team.tokens["alice"])
    try:
        _, tables = raw.fetch("CommandGetTables")
        assert sorted(tables.column("table_name").to_pylist()) == ["accounts", "revenue"]
        with pytest.raises((fl.FlightError, pa.ArrowInvalid), match="UNKNOWN_STORE"):
            raw.sql("SELECT * FROM last_order")
        assert raw.sql("SELECT count(*) AS n FROM revenue")[1].column("n")[0].as_py() > 0
    finally:
        raw.close()
    with dbapi.connect(flight.location, db_kwargs={"username": "alice", "password": team.tokens["alice"]},
                       autocommit=True) as con, con.cursor() as cur:
        with pytest.raises(Exception, match="UNKNOWN_STORE"):
            cur.execute("SELECT * FROM last_order")
    with pytest.raises(fl.FlightUnauthenticatedError):
        Raw(fl.FlightClient(flight.location), "iqg_00000000_" + "z" * 43).sql("SELECT 1")


# -- routing ----------------------------------------------------------------------------------------------------------
def _iq(url: str, token: str, store: str, on_behalf_of: str | None = None) -> tuple[int, Any]:
    request = StateQueryRequest.in_store(store).with_query(KeyQuery.with_key("c01"))
    headers = {ON_BEHALF_OF: on_behalf_of} if on_behalf_of else {}
    status, _, raw = Http(url, token).request("POST", "/v1/iq", encode_request(request), headers)
    return status, json.loads(raw)


def test_peers_answer_only_what_the_forwarded_user_may_read(http: str, team: Team, counting: CountingApp) -> None:
    peer = team.tokens["peer"]
    with unread(counting):
        assert _iq(http, peer, VICTIM, "alice")[0] == 404
        assert _iq(http, team.tokens["alice"], VICTIM)[0] == 404  # a user calling the peer endpoint for themself
        assert _iq(http, team.tokens["alice"], VICTIM, "bob")[0] == 404  # identity forwarding only narrows
        assert _iq(http, peer, "revenue", "alice")[0] == 200
    assert _iq(http, team.tokens["bob"], VICTIM, "bob")[0] == 200  # forwarding for oneself
    status, body = _iq(http, peer, "revenue", "nobody-here")
    assert status == 401 and "not a user of this server" in body["error"]["message"]


def test_a_routed_statement_is_answered_by_the_peer_in_the_users_name(team: Team, team_gw: Gateway,
                                                                       counting: CountingApp, half_app: Any,
                                                                       tmp_path: Any) -> None:
    """Server B hosts revenue's partitions 0 and 1 (``half_app``); A has all four. B forwards 2 and 3 to A with its
    own credential (the peer user's token) and alice's name: A answers what alice may read, and audits it as hers."""
    import time

    from gateway.routing import RoutedSource
    from gateway.routing.membership import Membership

    audit_path = tmp_path / "a.log"
    a_access = AccessContext(Users.load(team.path), audit=AuditLog(str(audit_path)))
    with ServerThread(create_app(team_gw, access=a_access), threads=4) as a:
        membership = Membership([a.url], interval_s=0.1, timeout_s=2.0, token=team.tokens["peer"])
        routed = RoutedSource(half_app, membership, "http://unset")
        b_gw = Gateway(routed)
        with ServerThread(create_app(b_gw, access=AccessContext(Users.load(team.path))), threads=4) as b:
            routed.self_url = b.url
            membership.start()
            try:
                deadline = time.monotonic() + 20
                while not all(p.alive for p in membership.peers.values()):
                    assert time.monotonic() < deadline, [p.error for p in membership.peers.values()]
                    time.sleep(0.05)
                status, _, body = _as(b.url, team, "alice").sql("SELECT count(*) FROM revenue")
                assert status == 200, body
                hosts = {p["partition"]: p["host"] for p in body["partitions"]}
                assert hosts[2] == hosts[3] == a.url and hosts[0] == hosts[1] == b.url
                before = counting.reads["revenue"]
                assert _as(b.url, team, "bob").sql("SELECT count(*) FROM revenue")[0] == 404
                assert counting.reads["revenue"] == before  # refused by B's engine: nothing forwarded
            finally:
                membership.close()
                b_gw.close()
    a_access.close()
    lines = [json.loads(line) for line in audit_path.read_text().splitlines()]
    peer_lines = [r for r in lines if r["face"] == "peer"]
    assert peer_lines and {r["user"] for r in peer_lines} == {"alice"}
    assert all(r["stores"] == ["revenue"] and r["status"] == "ok" for r in peer_lines)
    assert team.tokens["peer"] not in audit_path.read_text()
