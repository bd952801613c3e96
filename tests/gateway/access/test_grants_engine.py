"""A store a user may not read does not exist for that user: the engine, against every trick, with an oracle.

alice may read revenue and accounts; bob's ``last_order`` is the target. The oracle is a server whose catalog
really holds only revenue and accounts, with the same rows: every statement alice sends must answer exactly as
the oracle answers it (the same rows, or the same error with the same message, line and column), and not one
read of ``last_order`` may happen. bob runs each statement first, so the plan cache and the point lane hold the
target store when alice comes (the most dangerous state), and his answer shows each trick would reveal.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from gateway.access import Users
from gateway.engine.errors import ForbiddenError, GatewayError, RowLimitExceeded, StatementTimeout
from gateway.engine.gateway import Gateway
from planner.systables import SystemContext
from tests.gateway.access.team import VICTIM, CountingApp, Team
from tests.gateway.gwfixtures import Shop

PG = SystemContext(schema="public", flavor="postgres")

ATTACKS = [
    "SELECT * FROM last_order",
    "SELECT * FROM LAST_ORDER",
    'SELECT * FROM "last_order"',
    "SELECT * FROM main.last_order",
    "SELECT * FROM public.last_order",
    "SELECT * FROM iqgate.main.last_order",
    "SELECT amount FROM last_order WHERE customer = 'c01'",
    "SELECT amount FROM last_order FOR SYSTEM_TIME AS OF TIMESTAMP '2024-05-01 12:10:00' WHERE customer = 'c01'",
    "SELECT count(*) FROM last_order",
    "SELECT r.customer, l.amount FROM revenue r JOIN last_order l ON r.customer = l.customer",
    "SELECT customer FROM revenue WHERE customer IN (SELECT customer FROM last_order)",
    "SELECT customer FROM revenue r WHERE EXISTS (SELECT 1 FROM last_order l WHERE l.customer = r.customer)",
    "SELECT (SELECT max(amount) FROM last_order) AS m",
    "WITH x AS (SELECT * FROM last_order) SELECT * FROM x",
    "WITH revenue AS (SELECT * FROM last_order) SELECT * FROM revenue",
    "SELECT customer FROM revenue UNION SELECT customer FROM last_order",
    "SELECT customer FROM revenue UNION ALL SELECT customer FROM last_order",
    "SELECT customer FROM revenue EXCEPT SELECT customer FROM last_order",
    "SELECT * FROM (SELECT * FROM (SELECT * FROM last_order) a) b",
    "SELECT * FROM revenue, LATERAL (SELECT amount FROM last_order WHERE customer = revenue.customer) t",
    "EXPLAIN SELECT * FROM last_order",
    "EXPLAIN SELECT * FROM last_order WHERE customer = 'c01'",
    "DESCRIBE last_order",
    "SHOW TABLES",
    "SELECT table_name FROM information_schema.tables ORDER BY 1",
    "SELECT table_name, column_name, data_type FROM information_schema.columns ORDER BY 1, 2",
    "SELECT * FROM information_schema.columns WHERE table_name = 'last_order'",
    "SELECT * FROM information_schema.table_constraints ORDER BY constraint_name",
    "SELECT * FROM information_schema.key_column_usage ORDER BY constraint_name",
    "SELECT oid, relname FROM pg_catalog.pg_class ORDER BY oid",
    "SELECT relname FROM pg_class WHERE relname LIKE '%order%'",
    "SELECT attrelid, attname FROM pg_catalog.pg_attribute ORDER BY 1, 2",
    "SELECT * FROM pg_catalog.pg_description ORDER BY objoid",
    "SELECT * FROM pg_catalog.pg_tables ORDER BY tablename",
    "SELECT to_regclass('last_order') AS r",
    "SELECT 'last_order'::regclass AS r",
    "SELECT 'public.last_order'::regclass::oid AS r",
    "SELECT obj_description('last_order'::regclass, 'pg_class') AS d",
    "SELECT has_table_privilege('last_order', 'SELECT') AS p",
    "SELECT c.relname FROM pg_catalog.pg_class c WHERE pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1",
    "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON a.attrelid = c.oid "
    "WHERE c.relname = 'last_order'",
    "SELECT * FROM last_ordr",
    "SELECT * FROM revenue JOIN lastorder USING (customer)",
]


def outcome(gw: Gateway, sql: str, principal: Any, context: SystemContext | None = None) -> tuple[Any, ...]:
    """What a client of ``gw`` learns from ``sql``: the columns and rows, or the error's code, message and place."""
    try:
        with gw.sql(sql, principal=principal, context=context) as result:
            return ("rows", result.columns, sorted(map(repr, result.rows())))
    except GatewayError as exc:
        return ("error", exc.code, exc.message, exc.line, exc.col)


@pytest.fixture(scope="module")
def who(team_users: Users) -> dict[str, Any]:
    return {name: team_users.principal(name) for name in ("alice", "bob", "carol", "peer", "dave")}


@pytest.mark.parametrize("context", [None, PG], ids=["iqgate", "pg"])
@pytest.mark.parametrize("sql", ATTACKS)
def test_alice_sees_what_a_server_without_bobs_stores_shows(team_gw: Gateway, oracle_gw: Gateway,
                                                            counting: CountingApp, who: dict[str, Any], sql: str,
                                                            context: SystemContext | None) -> None:
    for _ in range(2):  # bob first (twice: planned, then the point lane), so the caches hold his store
        outcome(team_gw, sql, who["bob"], context)
    before = counting.reads[VICTIM]
    assert outcome(team_gw, sql, who["alice"], context) == outcome(oracle_gw, sql, None, context)
    assert outcome(team_gw, sql, who["alice"], context) == outcome(oracle_gw, sql, None, context)  # cached too
    assert counting.reads[VICTIM] == before, f"{sql}: alice's statement read {VICTIM}"


def test_each_trick_would_reveal_the_store_to_someone_who_may_read_it(team_gw: Gateway, oracle_gw: Gateway,
                                                                      who: dict[str, Any]) -> None:
    """Not a test of nothing: for bob (and peer) the tricks naming the store answer differently than the oracle."""
    revealing = [sql for sql in ATTACKS if "last_order" in sql or "information_schema" in sql or "pg_" in sql
                 or sql == "SHOW TABLES"]
    differ = [sql for sql in revealing if outcome(team_gw, sql, who["peer"]) != outcome(oracle_gw, sql, None)]
    assert len(differ) >= len(revealing) - 3, sorted(set(revealing) - set(differ))


def test_did_you_mean_suggests_only_readable_stores(team_gw: Gateway, who: dict[str, Any]) -> None:
    for name, principal, suggested in (("alice", who["alice"], False), ("bob", who["bob"], True)):
        with pytest.raises(GatewayError) as err:
            team_gw.sql("SELECT * FROM last_ordr", principal=principal)
        assert err.value.code == "UNKNOWN_STORE"
        assert ("'last_order'" in err.value.message) is suggested, (name, err.value.message)
    with pytest.raises(GatewayError) as err:
        team_gw.sql("SELECT * FROM nothing_like_it", principal=who["alice"])
    assert err.value.message.endswith("known stores: accounts, revenue"), err.value.message


def test_catalog_for_and_store_positions_show_only_readable_stores(team_gw: Gateway, who: dict[str, Any]) -> None:
    assert sorted(team_gw.catalog_for(who["alice"])) == ["accounts", "revenue"]
    assert sorted(team_gw.catalog_for(who["bob"])) == ["last_order", "latest", "per_min"]
    assert sorted(team_gw.catalog_for(who["dave"])) == []
    assert sorted(team_gw.store_positions(who["carol"])) == ["accounts"]
    assert sorted(team_gw.catalog_for(None)) == sorted(team_gw.catalog())


def test_the_system_schema_needs_the_system_grant(team_gw: Gateway, counting: CountingApp,
                                                  who: dict[str, Any]) -> None:
    for sql in ("SELECT * FROM system.stores", "SELECT * FROM system.partitions",
                "SELECT s.store FROM revenue r, system.stores s"):
        with pytest.raises(ForbiddenError, match="needs the 'system' grant"):
            team_gw.sql(sql, principal=who["alice"])
        with pytest.raises(ForbiddenError):
            team_gw.result_columns(sql, principal=who["alice"])
    before = counting.reads[VICTIM]
    stores = team_gw.sql("SELECT store FROM system.stores", principal=who["carol"]).rows()
    parts = team_gw.sql("SELECT DISTINCT store FROM system.partitions", principal=who["carol"]).rows()
    assert stores == [("accounts",)] and parts == [("accounts",)]
    assert counting.reads[VICTIM] == before  # not even probed for its position
    everything = {r[0] for r in team_gw.sql("SELECT DISTINCT store FROM system.partitions", principal=who["peer"])}
    assert VICTIM in everything


def test_describe_parameter_types_and_explain_use_the_users_catalog(team_gw: Gateway, who: dict[str, Any]) -> None:
    sql = "SELECT amount FROM last_order WHERE customer = $1"
    assert team_gw.result_columns(sql, principal=who["bob"]) == [("amount", "DOUBLE")]
    assert 1 in team_gw.parameter_types(sql, principal=who["bob"])  # the key's type decides $1
    for call in (lambda: team_gw.result_columns(sql, principal=who["alice"]),
                 lambda: team_gw.explain(sql.replace("$1", "'c01'"), principal=who["alice"])):
        with pytest.raises(GatewayError) as err:
            call()
        assert err.value.code == "UNKNOWN_STORE"
    assert team_gw.parameter_types(sql, principal=who["alice"]) == {}


def _our_calls(fn: Any) -> Counter[str]:
    """The functions of iqgate's packages and its SQL parser ``fn`` calls, by name: how much work a path does."""
    calls: Counter[str] = Counter()
    roots = ("/gateway/", "/planner/", "/stores/", "/sqlglot/")

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if any(r in code.co_filename for r in roots):
                calls[f"{code.co_filename.rsplit('/', 2)[-2]}/{code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_forbidden_name_and_an_unknown_name_do_the_same_work(team_gw: Gateway, who: dict[str, Any]) -> None:
    """The timing of the two cannot differ by what they do: the same functions, the same number of times, but for
    a lookup of a cached point lane (a microsecond beside the millisecond of planning both do).

    (No clock here: benchmarks/bench_grants.py prints both paths' time distributions side by side.)
    The unknown name has the forbidden one's length and no close match among alice's stores either.
    """
    def attempt(name: str) -> Any:
        def run() -> None:
            try:
                team_gw.sql(f"SELECT amount FROM {name} WHERE customer = 'c01'", principal=who["alice"]).close()
            except GatewayError as exc:
                assert exc.code == "UNKNOWN_STORE"
        return run

    for name in (VICTIM, "nast_ordex"):  # warm both (bob's point lane exists for the forbidden one)
        team_gw.sql(f"SELECT amount FROM {VICTIM} WHERE customer = 'c01'", principal=who["bob"]).close()
        attempt(name)()
    forbidden, unknown = _our_calls(attempt(VICTIM)), _our_calls(attempt("nast_ordex"))
    differing = {k: (forbidden.get(k, 0), unknown.get(k, 0)) for k in set(forbidden) | set(unknown)
                 if forbidden.get(k) != unknown.get(k)}
    # the only difference: bob's cached point lane is found for the forbidden text and refused (one grant lookup),
    # where the unknown text misses the cache (one more key normalization); then both plan alike and fail alike
    assert set(differing) <= {"planner/<genexpr>", "planner/_normalize", "engine/can_read"}, differing
    assert sum(abs(f - u) for f, u in differing.values()) <= 4, differing
    assert sum(unknown.values()) > 40  # the work both do: the catalog view, planning, the error


def test_limits_tighten_each_statement_budget(tmp_path: Any, team: Team, team_gw: Gateway, shop: Shop) -> None:
    from tests.gateway.access.team import users

    path = tmp_path / "limited.toml"
    users(path, "grant", "all", "*")
    users(path, "add", "erin", "--role", "all")
    users(path, "limit", "--user", "erin", "max_rows=5", "statement_timeout_ms=200")
    erin = Users.load(path).principal("erin")
    with pytest.raises(RowLimitExceeded):
        team_gw.sql("SELECT * FROM revenue", principal=erin).rows()
    assert len(team_gw.sql("SELECT * FROM revenue LIMIT 5", principal=erin).rows()) == 5
    assert len(team_gw.sql("SELECT * FROM revenue", principal=None).rows()) == len(shop.revenue)  # the server's
    # a user asks for less, never more: their own max_rows above the ceiling is the ceiling
    with pytest.raises(RowLimitExceeded):
        team_gw.sql("SELECT * FROM revenue", max_rows=100, principal=erin).rows()
    # the timeout: waiting for a bound nobody reaches ends at erin's 200 ms, not the server's 30 s
    far = {"orders": {0: 10**9}}
    with pytest.raises((StatementTimeout, GatewayError)) as err:
        team_gw.sql("SELECT * FROM revenue", position=far, wait_ms=20_000, principal=erin).rows()
    assert err.value.code in ("STATEMENT_TIMEOUT", "NOT_UP_TO_BOUND"), err.value
    assert team_gw.config_for(erin).max_rows == 5 and team_gw.config_for(erin).statement_timeout_ms == 200
    assert team_gw.config_for(None) is team_gw.config
    # the point lane obeys the user's row ceiling as the general way does
    users(path, "limit", "--user", "erin", "max_rows=none", "max_response_bytes=1024")
    assert team_gw.config_for(Users.load(path).principal("erin")).max_response_bytes == 1024


def test_a_users_memory_ceiling_is_their_statements_budget() -> None:
    """``max_memory_bytes`` is each statement's watch (the growth the guard allows it), never above the server's."""
    from gateway.engine.errors import OutOfMemoryError
    from gateway.engine.guards import Guards

    guards = Guards(100 * 2**20)
    mine, higher, default = (guards.watch(1000, None, 10 * 2**20), guards.watch(1000, None, 10**12),
                             guards.watch(1000, None))
    try:
        assert (mine.memory_bytes, higher.memory_bytes, default.memory_bytes) == (10 * 2**20, 100 * 2**20,
                                                                                  100 * 2**20)
        mine.trip("memory")
        err = mine.error()
        assert isinstance(err, OutOfMemoryError) and "budget of 10 MB" in str(err)
    finally:
        for w in (mine, higher, default):
            w.close()
