"""SUBSCRIBE and EMIT CHANGES in the planner: every form parses into a Subscription plan carrying the store, the
SQL the engine runs per batch, the options and the resume point; what a subscription cannot follow is refused
with a message that says so and the line and column of the offending part."""

from __future__ import annotations

import pytest

from planner import Planner, plan, plan_shape
from planner.errors import (
    InvalidPositionError,
    ParameterError,
    PlanningError,
    SqlSyntaxError,
    TableScanDisabledError,
    UnknownColumnError,
    UnknownStoreError,
    UnsupportedSqlError,
)
from planner.plan import StatementKind
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.iqv2.position import Position

KV = StoreSpec("revenue", StoreKind.TIMESTAMPED_KEY_VALUE, Column("customer", SqlType.VARCHAR),
               (Column("total", SqlType.DOUBLE), Column("n", SqlType.BIGINT)), 4, ("orders",))
WIN = StoreSpec("per_min", StoreKind.WINDOW, Column("customer", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),), 2,
                ("orders",), window_size_ms=60_000, window_advance_ms=60_000)
SES = StoreSpec("visits", StoreKind.SESSION, Column("customer", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),), 2,
                ("orders",), gap_ms=30_000)
VER = StoreSpec("prices", StoreKind.VERSIONED, Column("item", SqlType.VARCHAR), (Column("price", SqlType.DOUBLE),), 2,
                ("orders",))
CK = StoreSpec("stock", StoreKind.KEY_VALUE, (Column("region", SqlType.VARCHAR), Column("item", SqlType.BIGINT)),
               (Column("qty", SqlType.BIGINT),), 2, ("orders",))
CAT = {s.name: s for s in (KV, WIN, SES, VER, CK)}
POS = '{"orders":{"0":41,"1":7}}'


def sub(sql: str, **kw):
    p = plan(sql, CAT, **kw)
    assert p.kind is StatementKind.SUBSCRIBE and p.subscription is not None
    return p.subscription


@pytest.mark.parametrize("sql", [
    "SUBSCRIBE revenue", "subscribe to revenue", "SUBSCRIBE main.revenue", 'SUBSCRIBE "revenue"',
    "SUBSCRIBE public.revenue;", "SUBSCRIBE (SELECT * FROM revenue)", "SUBSCRIBE TO (SELECT * FROM revenue)",
    "SELECT * FROM revenue EMIT CHANGES", "select * from revenue emit changes ;",
])
def test_every_form_names_the_store_with_a_snapshot_and_progress(sql) -> None:
    s = sub(sql)
    assert (s.store, s.snapshot, s.progress, s.resume) == ("revenue", True, True, None)
    assert s.identity == ("customer",) and s.identity_at == (0,) and s.added == () and not s.membership
    assert s.relation in s.sql and s.keys is None and s.full_scan and s.store_kind == "timestamped_key_value"
    assert s.emit_changes == ("emit" in sql.lower())


@pytest.mark.parametrize("options,snapshot,progress", [
    ("WITH (SNAPSHOT = false)", False, True), ("WITH (SNAPSHOT = FALSE, PROGRESS = false)", False, False),
    ("WITH (progress)", True, True), ("WITH (snapshot = 'off', progress = 1)", False, True),
    ("WITH (PROGRESS = true, SNAPSHOT = 0)", False, True), ("", True, True),
])
def test_options(options, snapshot, progress) -> None:
    s = sub(f"SUBSCRIBE revenue {options}")
    assert (s.snapshot, s.progress) == (snapshot, progress)


def test_the_resume_point_follows_the_subscription_in_either_form() -> None:
    want = Position.from_json(POS)
    assert sub(f"SUBSCRIBE revenue WITH (SNAPSHOT = false) AS OF POSITION '{POS}'").resume == want
    assert sub(f"SUBSCRIBE (SELECT customer FROM revenue) AS OF POSITION '{POS}'").resume == want
    assert sub(f"SELECT * FROM revenue AS OF POSITION '{POS}' EMIT CHANGES").resume == want
    assert sub(f"SELECT * FROM revenue WHERE n > 1 EMIT CHANGES AS OF POSITION '{POS}'").resume == want
    feed_token = '{"orders":{"0":41},"shop-revenue-changelog":{"0":3,"1":3,"2":3,"3":3}}'
    assert sub(f"SUBSCRIBE revenue AS OF POSITION '{feed_token}'").resume == Position.from_json(feed_token)


def test_identity_columns_are_found_or_appended() -> None:
    s = sub("SUBSCRIBE (SELECT total, customer AS who FROM revenue)")
    assert (s.identity_at, s.added) == ((1,), ())
    s = sub("SUBSCRIBE (SELECT n * 2 AS twice FROM per_min)")
    assert s.identity == ("customer", "window_start", "window_end") and s.added == s.identity
    assert s.identity_at == (1, 2, 3) and s.sql.startswith('SELECT n * 2 AS twice, "customer", "window_start"')
    s = sub("SUBSCRIBE (SELECT * EXCLUDE (customer) FROM revenue)")
    assert s.added == ("customer",) and s.identity_at == (3,)
    s = sub("SUBSCRIBE (SELECT item, * FROM stock)")
    assert s.identity == ("region", "item") and s.identity_at == (1, 0) and s.added == ()
    assert sub("SUBSCRIBE prices").identity == ("item",)  # the current version of an item is its row


def test_filters_on_identity_need_no_memory_filters_on_values_do() -> None:
    s = sub("SUBSCRIBE (SELECT * FROM revenue WHERE customer LIKE 'c1%' AND _partition IN (0, 1))")
    assert not s.membership and s.failing_sql is None and "LIKE 'c1%'" in s.delete_sql
    s = sub("SUBSCRIBE (SELECT * FROM per_min WHERE window_start > TIMESTAMP '2026-01-01 00:00:00')")
    assert not s.membership and "window_start >" in s.delete_sql
    s = sub("SUBSCRIBE (SELECT customer FROM revenue WHERE total > 10 OR customer = 'x')")
    assert s.membership and "NOT COALESCE((total > 10 OR customer = 'x'), FALSE)" in s.failing_sql
    assert "WHERE" not in s.delete_sql.split("AS \"revenue\"")[-1]  # every deleted row, if it was shown
    assert not sub("SUBSCRIBE revenue").membership and sub("SUBSCRIBE revenue").delete_sql.startswith('SELECT "customer"')


def test_key_predicates_become_the_feeds_key_filter() -> None:
    s = sub("SELECT * FROM revenue WHERE customer IN ('a', 'b') EMIT CHANGES")
    assert set(s.keys.keys) == {"a", "b"} and s.keys.ranges is None and not s.full_scan
    s = sub("SUBSCRIBE (SELECT * FROM revenue WHERE customer BETWEEN 'a' AND 'c' AND n > 2)")
    assert s.keys.keys is None and s.keys.ranges == (("a", "c"),)
    s = sub("SUBSCRIBE (SELECT * FROM revenue WHERE _partition = 2)")
    assert s.keys.partitions == frozenset({2}) and s.keys.keys is None and s.keys.ranges is None
    s = sub("SUBSCRIBE (SELECT * FROM revenue WHERE customer = 'a' AND customer = 'b')")
    assert s.keys is not None and s.keys.keys == () and s.keys.ranges is None  # nothing can ever match
    assert sub("SELECT * FROM visits EMIT CHANGES").keys is None  # a session store, no key: the whole store
    assert sub("SELECT * FROM visits WHERE customer = 'x' EMIT CHANGES").keys.keys == ("x",)


def test_parameters_bind_in_every_sql_the_engine_runs() -> None:
    s = sub("SUBSCRIBE (SELECT total * ? AS scaled FROM revenue WHERE n > ? AND customer <> ?)",
            params=[2, 5, "z"])
    assert "total * 2 AS scaled" in s.sql and "n > 5" in s.sql and "<> 'z'" in s.sql
    assert "n > 5" in s.failing_sql and "<> 'z'" in s.failing_sql and "* 2" not in s.failing_sql
    s = sub("SELECT * FROM revenue WHERE customer = :who EMIT CHANGES", params={"who": "c7"})
    assert s.keys.keys == ("c7",) and "'c7'" in s.delete_sql
    with pytest.raises(ParameterError):
        plan("SUBSCRIBE (SELECT * FROM revenue WHERE n > ?)", CAT)


def test_a_snapshot_of_a_whole_store_is_a_table_scan() -> None:
    with pytest.raises(TableScanDisabledError, match="WITH \\(SNAPSHOT = false\\)"):
        plan("SUBSCRIBE revenue", CAT, session={"table_scans": False})
    assert not sub("SUBSCRIBE revenue WITH (SNAPSHOT = false)", session={"table_scans": False}).snapshot
    assert sub("SELECT * FROM revenue WHERE customer = 'a' EMIT CHANGES", session={"table_scans": False})


def test_explain_shape_and_no_point_lane() -> None:
    text = "EXPLAIN SUBSCRIBE (SELECT customer, total FROM revenue WHERE customer = 'a' AND total > 1)"
    e = plan(text, CAT)
    assert e.kind is StatementKind.EXPLAIN and e.inner.kind is StatementKind.SUBSCRIBE
    assert "subscribe store revenue (timestamped_key_value)" in e.explain and "keys: ['a']" in e.explain
    assert "rows leaving the answer (if shown)" in e.explain
    shape = plan_shape("SUBSCRIBE (SELECT total FROM revenue WHERE n > ?)", CAT)
    assert shape.kind is StatementKind.SUBSCRIBE and "n > NULL" in shape.subscription.sql
    plan("SUBSCRIBE revenue", CAT)
    cached = Planner()
    cached.plan("SUBSCRIBE revenue", CAT)
    assert cached.point_lane("SUBSCRIBE revenue", CAT) is None


def _refused(sql: str, error: type = UnsupportedSqlError) -> PlanningError:
    with pytest.raises(error) as err:
        plan(sql, CAT)
    return err.value


@pytest.mark.parametrize("sql,what,at", [
    ("SUBSCRIBE (SELECT count(*) FROM revenue)", "over an aggregation (COUNT(*))", (1, 19)),
    ("SUBSCRIBE (SELECT customer, sum(n) FROM revenue\n GROUP BY customer)", "an aggregation (GROUP BY)", (2, 11)),
    ("SELECT customer FROM revenue GROUP BY customer HAVING count(*) > 1 EMIT CHANGES", "EMIT CHANGES over an agg",
     (1, 39)),
    ("SUBSCRIBE (SELECT * FROM revenue r\n  JOIN per_min p ON r.customer = p.customer)", "over a join", (2, 8)),
    ("SUBSCRIBE (SELECT * FROM revenue, per_min)", "over a join", (1, 35)),
    ("SUBSCRIBE (SELECT * FROM revenue\nORDER BY total)", "ORDER BY is not supported: the order", (2, 10)),
    ("SELECT * FROM revenue LIMIT 5 EMIT CHANGES", "over LIMIT", (1, 29)),
    ("SUBSCRIBE (SELECT * FROM revenue OFFSET 3)", "over OFFSET", (1, 41)),
    ("SUBSCRIBE (SELECT DISTINCT n FROM revenue)", "over DISTINCT", None),
    ("SUBSCRIBE (SELECT customer, row_number() OVER (ORDER BY total) FROM revenue)", "window function", None),
    ("SUBSCRIBE (SELECT * FROM revenue WHERE customer IN (SELECT customer FROM per_min))", "a subquery", None),
    ("SUBSCRIBE (SELECT * FROM (SELECT * FROM revenue))", "subquery or table function in FROM", None),
    ("SUBSCRIBE (WITH x AS (SELECT * FROM revenue) SELECT * FROM x)", "WITH (a common table expression)", None),
    ("SUBSCRIBE (SELECT customer FROM revenue UNION SELECT customer FROM per_min)", "over UNION", None),
    ("SUBSCRIBE (SELECT unnest([1, 2]) AS u, customer FROM revenue)", "set-returning function", None),
    ("SUBSCRIBE (SELECT customer, now() AS t FROM revenue)", "changes without the store changing", (1, 29)),
    ("SUBSCRIBE (SELECT * FROM revenue WHERE random() < 0.5)", "changes without the store", None),
    ("SELECT * FROM revenue WHERE rowtime > current_timestamp EMIT CHANGES", "changes without the store", None),
    ("SUBSCRIBE (SELECT customer, _failure_reason FROM revenue)", "no failed partitions", (1, 29)),
    ("SUBSCRIBE (SELECT * FROM prices FOR SYSTEM_TIME ALL)", "FOR SYSTEM_TIME", None),
    ("SUBSCRIBE revenue WITH (FOO = 1)", "unknown SUBSCRIBE option FOO", (1, 25)),
    ("SUBSCRIBE revenue WITH (snapshot = false, SNAPSHOT = true)", "given twice", (1, 43)),
    ("SUBSCRIBE revenue WITH (SNAPSHOT = maybe)", "true or false", (1, 25)),
    ("SUBSCRIBE (SUBSCRIBE revenue)", "another subscription", None),
    ("SUBSCRIBE (SELECT * FROM revenue EMIT CHANGES)", "another subscription", None),
    (f"SUBSCRIBE (SELECT * FROM revenue AS OF POSITION '{POS}')", "AS OF POSITION belongs after", (1, 49)),
    ("SELECT 1 EMIT CHANGES", "without a store", None),
    ("SUBSCRIBE (SELECT total AS customer FROM revenue)", "rename that column", (1, 19)),
])
def test_what_a_subscription_cannot_follow_is_refused_where_it_is(sql, what, at) -> None:
    err = _refused(sql)
    assert what in str(err), str(err)
    assert err.line is not None and err.col is not None
    if at is not None:
        assert (err.line, err.col) == at, str(err)


@pytest.mark.parametrize("sql,error,what", [
    ("SUBSCRIBE", SqlSyntaxError, "needs a store name"),
    ("SUBSCRIBE TO", SqlSyntaxError, "needs a store name"),
    ("SUBSCRIBE ()", SqlSyntaxError, "needs a SELECT"),
    ("SUBSCRIBE revenue ENVELOPE UPSERT (KEY (customer))", SqlSyntaxError, "ENVELOPE is not supported"),
    ("SUBSCRIBE revenue UP TO 5", SqlSyntaxError, "UP TO is not supported"),
    ("SUBSCRIBE revenue WITH (SNAPSHOT =)", SqlSyntaxError, "expected a value"),
    ("SUBSCRIBE revenue AS OF POSITION 5", SqlSyntaxError, "string literal"),
    ("SUBSCRIBE revenue AS OF POSITION '{\"orders\": 5}'", InvalidPositionError, "invalid AS OF POSITION"),
    ("SUBSCRIBE nope", UnknownStoreError, "unknown store 'nope'"),
    ("SUBSCRIBE information_schema.tables", UnknownStoreError, "system table"),
    ("SUBSCRIBE (SELECT bogus FROM revenue)", UnknownColumnError, "bogus"),
])
def test_malformed_subscriptions_say_what_is_wrong(sql, error, what) -> None:
    err = _refused(sql, error)
    assert what in str(err) and err.line is not None, str(err)


def test_select_and_subscribe_words_elsewhere_still_mean_what_they_did() -> None:
    cat = {**CAT, "emit": StoreSpec("emit", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR),
                                    (Column("changes", SqlType.BIGINT),), 1, ("orders",))}
    assert plan("SELECT changes FROM emit", cat).kind is StatementKind.SELECT
    assert plan('SELECT k AS subscribe FROM emit', cat).kind is StatementKind.SELECT
    assert plan("SELECT * FROM emit EMIT CHANGES", cat).subscription.store == "emit"
