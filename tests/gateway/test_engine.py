"""The engine through the Python API: rows, types, positions, partitions, strictness, limits, statements."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import gateway.engine.errors as ge
from gateway import Gateway, GatewayConfig
from planner.plan import StatementKind
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import MINUTE, REVENUE, Shop, make_app, make_shop

ROOT = Path(__file__).resolve().parents[2]


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


# -- SELECT ----------------------------------------------------------------------------------
def test_point_lookup_rows_types_position_and_partition(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[5]
    out = gw.sql("SELECT revenue, orders FROM revenue WHERE customer = ?", params=[c])
    assert out.statement is StatementKind.SELECT
    assert out.rows() == [shop.revenue[c]]
    assert out.columns == [("revenue", "DOUBLE"), ("orders", "BIGINT")]
    assert out.position == shop.position
    home = partition_for_key(c, REVENUE.partitions, SqlType.VARCHAR)
    assert [(p.store, p.partition, p.failure_reason) for p in out.partitions] == [("revenue", home, None)]
    assert out.partitions[0].position == shop.position


def test_missing_key_is_an_empty_result_not_an_error(gw: Gateway) -> None:
    out = gw.sql("SELECT * FROM revenue WHERE customer = 'nobody'")
    assert out.rows() == [] and [c for c, _ in out.columns] == ["customer", "revenue", "orders"]


def test_relation_is_duckdb_and_joinable_further(gw: Gateway, shop: Shop) -> None:
    keys = sorted(shop.revenue)[:3]
    out = gw.sql("SELECT customer, revenue FROM revenue WHERE customer IN (?, ?, ?)", params=keys)
    rel = out.relation
    doubled = sorted(rel.project("customer, revenue * 2 AS r2").fetchall())
    assert doubled == sorted((k, shop.revenue[k][0] * 2) for k in keys)
    other = out.cursor.sql("SELECT unnest(?::VARCHAR[]) AS customer", params=[keys[:2]])
    joined = rel.join(other, "customer").aggregate("count(*)").fetchall()
    assert joined == [(2,)]


def test_residual_filter_and_aggregate_over_a_scan(gw: Gateway, shop: Shop) -> None:
    out = gw.sql("SELECT count(*) AS n, sum(orders) AS o FROM revenue WHERE revenue > 200")
    big = [v for v in shop.revenue.values() if v[0] > 200]
    assert out.rows() == [(len(big), sum(o for _, o in big))]


def test_bool_and_or_of_distinct_values(gw: Gateway, shop: Shop) -> None:
    """DISTINCT does not change an AND or an OR; sqlglot's DuckDB text for it was refused by DuckDB before."""
    rows = gw.sql("SELECT bool_and(DISTINCT active), bool_or(DISTINCT active), bool_and(DISTINCT balance > 0) "
                  "FROM accounts").rows()
    actives = [v[2] for v in shop.accounts.values()]
    assert rows == [(all(actives), any(actives), all(v[1] > 0 for v in shop.accounts.values()))]


def test_order_by_key_and_limit(gw: Gateway, shop: Shop) -> None:
    out = gw.sql("SELECT customer FROM revenue ORDER BY customer DESC LIMIT 4")
    assert [r[0] for r in out.rows()] == sorted(shop.revenue, reverse=True)[:4]


def test_key_range_with_value_filter(gw: Gateway, shop: Shop) -> None:
    keys = sorted(shop.revenue)
    lo, hi = keys[2], keys[9]
    out = gw.sql("SELECT customer, orders FROM revenue WHERE customer BETWEEN ? AND ? AND orders >= 10 "
                 "ORDER BY customer", params=[lo, hi])
    assert out.rows() == [(k, shop.revenue[k][1]) for k in keys if lo <= k <= hi and shop.revenue[k][1] >= 10]


def test_window_store_by_key_and_window_start(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[1]
    starts = sorted(ws for (k, ws) in shop.per_min if k == c)
    since = starts[len(starts) // 2]
    out = gw.sql("SELECT window_start, window_end, orders FROM per_min WHERE customer = ? AND window_start >= ? "
                 "ORDER BY window_start", params=[c, utc(since)])
    assert out.rows() == [(utc(ws), utc(ws + MINUTE), shop.per_min[(c, ws)][0]) for ws in starts if ws >= since]
    assert out.columns[0] == ("window_start", "TIMESTAMP WITH TIME ZONE")


def test_versioned_store_as_of(gw: Gateway, shop: Shop) -> None:
    c = max(shop.versions, key=lambda k: len(shop.versions[k]))
    vs = shop.versions[c]
    ts, amount = vs[1]
    when = utc(ts + 1).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    out = gw.sql(f"SELECT amount FROM last_order FOR SYSTEM_TIME AS OF TIMESTAMP '{when}' WHERE customer = ?",
                 params=[c])
    assert out.rows() == [(amount,)]


def test_join_of_two_stores(gw: Gateway, shop: Shop) -> None:
    out = gw.sql("SELECT r.customer, r.orders, l.amount FROM revenue r JOIN latest l ON r.customer = l.customer "
                 "WHERE r.orders > 12 ORDER BY r.customer")
    assert out.rows() == [(k, shop.revenue[k][1], shop.latest[k][0]) for k in sorted(shop.revenue)
                          if shop.revenue[k][1] > 12]
    assert {p.store for p in out.partitions} == {"revenue", "latest"}


def test_pseudo_columns(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[0]
    out = gw.sql("SELECT _partition, _position FROM revenue WHERE customer = ?", params=[c])
    [(part, pos)] = out.rows()
    assert part == partition_for_key(c, REVENUE.partitions, SqlType.VARCHAR)
    assert Position.from_json(pos) == shop.position
    star = gw.sql("SELECT * FROM revenue WHERE customer = ?", params=[c])
    assert not any(n.startswith("_") for n, _ in star.columns)


def test_fast_path_and_duckdb_path_agree_on_values_and_types(gw: Gateway, shop: Shop) -> None:
    k = sorted(shop.accounts)[7]
    fast = gw.sql("SELECT opened, name, active, balance FROM accounts WHERE id = ?", params=[k])
    slow = gw.sql("SELECT max(opened) AS opened, max(name) AS name, bool_or(active) AS active, "
                  "max(balance) AS balance FROM accounts WHERE id = ?", params=[k])
    assert fast.rows() == slow.rows()
    assert fast.columns == slow.columns
    assert fast.rows()[0][0] == utc(shop.accounts[k][3])
    assert fast.to_arrow().equals(slow.to_arrow().cast(fast.to_arrow().schema))


def test_streamed_result_gives_the_same_rows_in_chunks(gw: Gateway, shop: Shop) -> None:
    out = gw.sql("SELECT customer, orders FROM revenue ORDER BY customer", stream=True)
    chunks = list(out.iter_batches(max_rows=7))
    assert [r for ch in chunks for r in ch] == [(k, shop.revenue[k][1]) for k in sorted(shop.revenue)]
    assert all(len(ch) <= 7 for ch in chunks)


# -- statements without stores -------------------------------------------------------------
def test_show_tables_and_describe(gw: Gateway, shop_app: StreamsApp) -> None:
    tables = gw.sql("SHOW TABLES")
    assert tables.statement is StatementKind.SHOW_TABLES
    assert [r[0] for r in tables.rows()] == sorted(shop_app.catalog())
    desc = gw.sql("DESCRIBE accounts")
    spec = shop_app.catalog()["accounts"]
    assert [r[0] for r in desc.rows()] == [c.name for c in spec.columns()]
    assert desc.rows()[0][3] == "PRI"


def test_show_a_setting_and_show_all_as_postgresql_answers_them(gw: Gateway) -> None:
    """``SHOW max_rows`` was refused with "only SELECT, …, SHOW, … are allowed; got SHOW", and ``SHOW ALL`` was an
    INTERNAL error (sqlglot's parser raised IndexError on it)."""
    from planner.settings import SESSION_SETTINGS

    s = gw.session()
    s.sql("SET max_rows = 5")
    one = s.sql("SHOW max_rows")
    assert one.columns == [("max_rows", "VARCHAR")] and one.rows() == [("5",)]
    assert gw.sql("SHOW MAX_ROWS").rows() == [(str(SESSION_SETTINGS["max_rows"].default),)]  # other sessions
    everything = gw.sql("show all;")
    assert [c for c, _ in everything.columns] == ["name", "setting", "description"]
    assert [r[0] for r in everything.rows()] == sorted(SESSION_SETTINGS)
    assert all(r[2] == SESSION_SETTINGS[r[0]].doc for r in everything.rows())
    assert "pg_settings" in "\n".join(r[0] for r in gw.sql("EXPLAIN SHOW max_rows").rows())
    with pytest.raises(ge.SqlError, match="unknown setting 'nope'"):
        gw.sql("SHOW nope")
    with pytest.raises(ge.SqlError, match="could not be parsed") as info:  # sqlglot's IndexError
        gw.sql("DESCRIBE SHOW ALL")
    assert info.value.code == "SQL_SYNTAX_ERROR"


def test_explain_shows_the_iqv2_requests(gw: Gateway) -> None:
    out = gw.sql("EXPLAIN SELECT revenue FROM revenue WHERE customer = 'c01'")
    assert out.statement is StatementKind.EXPLAIN
    text = "\n".join(r[0] for r in out.rows())
    assert "KeyQuery" in text
    assert "KeyQuery" in gw.explain("SELECT revenue FROM revenue WHERE customer = 'c01'")


def test_session_set_changes_later_statements(gw: Gateway, shop: Shop) -> None:
    s = gw.session()
    res = s.sql("SET max_rows = 2")
    assert res.statement is StatementKind.SET and res.settings["max_rows"] == 2
    assert s.settings["max_rows"] == 2
    with pytest.raises(ge.RowLimitExceeded):  # an answer's own limits apply when it is read (the Result is lazy)
        s.sql("SELECT * FROM revenue").rows()
    assert len(gw.sql("SELECT * FROM revenue").rows()) == len(shop.revenue)  # other sessions unaffected
    with pytest.raises(ge.SqlError) as info:
        s.sql("SET no_such_setting = 1")
    assert info.value.code == "INVALID_SETTING"


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("sql", "cls", "code"), [
    ("SELEC * FROM revenue", ge.SqlError, "SQL_SYNTAX_ERROR"),
    ("SELECT nope FROM revenue", ge.SqlError, "UNKNOWN_COLUMN"),
    ("SELECT * FROM nowhere", ge.UnknownStoreError, "UNKNOWN_STORE"),
    ("DELETE FROM revenue", ge.SqlError, "READ_ONLY"),
    ("SELECT * FROM read_csv('/etc/passwd')", ge.SqlError, "FORBIDDEN_FUNCTION"),
])
def test_planner_refusals_arrive_as_gateway_errors(gw: Gateway, sql: str, cls: type, code: str) -> None:
    with pytest.raises(cls) as info:
        gw.sql(sql)
    assert info.value.code == code and info.value.http_status in (400, 404)


def test_syntax_error_names_line_and_column(gw: Gateway) -> None:
    with pytest.raises(ge.SqlError) as info:
        gw.sql("SELECT customer\nFROM revenue\nWHERE customer = = 'x'")
    assert info.value.line == 3 and info.value.col is not None


def test_empty_sql_and_bad_position_are_bad_requests(gw: Gateway) -> None:
    with pytest.raises(ge.BadRequest, match="empty"):
        gw.sql("   ")
    with pytest.raises(ge.BadRequest, match="position"):
        gw.sql("SELECT * FROM revenue WHERE customer = 'x'", position="{not json")


def test_row_limit_is_an_error_not_a_truncation(gw: Gateway, shop: Shop) -> None:
    with pytest.raises(ge.RowLimitExceeded, match="3 rows"):  # read as rows: the lazy answer's limit applies
        gw.sql("SELECT customer FROM revenue ORDER BY customer", max_rows=3).rows()
    with pytest.raises(ge.RowLimitExceeded, match="3 rows"):  # hinted as rows (the faces): already in sql()
        gw.sql("SELECT customer FROM revenue ORDER BY customer", max_rows=3, stream=True)
    with pytest.raises(ge.RowLimitExceeded, match="3 rows"):  # as Arrow
        gw.sql("SELECT customer FROM revenue ORDER BY customer", max_rows=3).to_arrow()
    keys = sorted(shop.revenue)[:3]
    with pytest.raises(ge.RowLimitExceeded):
        gw.sql("SELECT * FROM revenue WHERE customer IN (?, ?, ?)", params=keys, max_rows=2)
    assert len(gw.sql("SELECT * FROM revenue WHERE customer IN (?, ?, ?)", params=keys, max_rows=3).rows()) == 3


def test_statement_timeout_interrupts_duckdb(gw: Gateway) -> None:
    s = gw.session()
    s.set("statement_timeout_ms", 100)
    t0 = time.monotonic()
    with pytest.raises(ge.StatementTimeout) as info:
        s.sql("SELECT count(*) FROM revenue a, revenue b, revenue c, revenue d, revenue e, revenue f, revenue g "
              "WHERE a.revenue + b.revenue + c.revenue + d.revenue + e.revenue + f.revenue + g.revenue > -1").rows()
    assert info.value.http_status == 504
    assert time.monotonic() - t0 < 60  # bounded: the watchdog did stop it


def test_statement_timeout_stops_planning(gw: Gateway) -> None:
    """Parsing and analysing 4,500 mixed terms is most of a second of Python that no DuckDB interrupt reaches: the
    timeout stops the planning too (nothing cached: it did not run to its end), counted as a timeout."""
    terms = [f"(customer = 'c{i}' AND revenue > {i})" if i % 2 else f"(orders > {i} OR revenue IS NULL)"
             for i in range(4_500)]
    s = gw.session()
    s.set("statement_timeout_ms", 50)
    gw.planner.clear()
    before = gw.statements_interrupted["timeout"]
    with pytest.raises(ge.StatementTimeout, match="planning the statement ran longer") as info:
        s.sql("SELECT customer FROM revenue WHERE " + " OR ".join(terms))
    assert info.value.http_status == 504
    assert gw.planner.cache_info()["size"] == 0
    assert gw.statements_interrupted["timeout"] == before + 1
    assert gw.sql("SELECT count(*) FROM revenue").rows()[0][0] > 0  # the gateway goes on


def test_a_client_gone_while_planning_stops_the_planning(gw: Gateway) -> None:
    """The same for a cancel (an HTTP client that disconnected, a PG CancelRequest): 499, planning stopped."""
    terms = [f"(customer = 'c{i}' AND revenue > {i})" if i % 2 else f"(orders > {i} OR revenue IS NULL)"
             for i in range(4_500)]
    gw.planner.clear()
    gone_at = time.monotonic() + 0.05
    with pytest.raises(ge.StatementCancelled, match="planning the statement was cancelled") as info:
        gw.sql("SELECT customer FROM revenue WHERE " + " OR ".join(terms), cancelled=lambda: time.monotonic() > gone_at)
    assert info.value.http_status == 499
    assert gw.planner.cache_info()["size"] == 0


def test_bound_ahead_of_the_stores_is_not_up_to_bound(gw: Gateway, shop: Shop) -> None:
    ahead = {"orders": {"0": shop.position.offset("orders", 0) + 1}}
    with pytest.raises(ge.NotUpToBoundError) as info:
        gw.sql("SELECT * FROM revenue", position=ahead)
    err = info.value
    assert err.retryable and err.http_status == 503
    assert sorted(p["partition"] for p in err.partitions) == list(range(REVENUE.partitions))
    assert all(p["failure_reason"] == "NOT_UP_TO_BOUND" and p["retryable"] for p in err.partitions)
    assert "partition 0" in err.message and "retryable" in err.message
    # the same token as the result's own position is met: monotonic reads
    out = gw.sql("SELECT count(*) FROM revenue", position=gw.sql("SELECT * FROM revenue").position)
    assert out.rows() == [(len(shop.revenue),)]


def test_a_statement_waiting_for_a_bound_is_woken_by_the_applied_batch_not_by_polling(
        tmp_path: Path, shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 50: a StreamsApp wakes a statement waiting for a Position bound when a batch is applied (the runtime
    counts each in ``health.applied``), so the statement reads again at once rather than at its next poll (a
    backoff up to 50 ms). The wait never sleeps a poll's pause then, and reads the batch's rows."""
    import gateway.engine.scans as scans

    app = make_app(tmp_path / "w", (REVENUE,), app_id="wake-waiters")
    app.start()
    try:
        app.writer("revenue").write_batch(0, [Change("a", (1.0, 1))], shop.position)
        nxt = shop.position.with_component("orders", 1, shop.position.offset("orders", 1) + 3)
        waiting = threading.Event()
        wait_applied = app.wait_applied

        def waits(seen: int, timeout_s: float) -> int:
            waiting.set()
            return wait_applied(seen, timeout_s)

        app.wait_applied = waits  # type: ignore[method-assign]

        def pipeline() -> None:  # as the runtime does: write the batch, then count it as applied
            waiting.wait(30)
            app.writer("revenue").write_batch(1, [Change("a", (2.0, 2))], nxt)
            app.health.applied("revenue")

        sleeps: list[float] = []
        monkeypatch.setattr(scans, "time", type("T", (), {"monotonic": staticmethod(time.monotonic),
                                                         "sleep": staticmethod(sleeps.append)}))
        gw = Gateway(app)
        assert gw.capabilities.wait_applied is not None and gw.capabilities.applied_batches is not None
        writer = threading.Thread(target=pipeline)
        writer.start()
        out = gw.sql("SELECT revenue FROM revenue WHERE customer = 'a'", position=nxt.to_json_map(), wait_ms=30_000)
        writer.join(30)
        assert out.rows() == [(2.0,)] and out.position.offset("orders", 1) >= nxt.offset("orders", 1)
        assert sleeps == []  # woken by the batch (or the wait's own fallback timeout), never a blind sleep
        gw.close()
    finally:
        app.close()


def test_applied_batches_wake_waiters_and_a_wait_without_one_ends_at_its_timeout(tmp_path: Path) -> None:
    """The count a waiter reads before it reads the stores, then waits on: a batch applied in between is not
    missed (the wait returns at once), and with none the wait returns the same count."""
    app = make_app(tmp_path / "c", (REVENUE,), app_id="applied-count")
    app.start()
    try:
        seen = app.applied_batches()
        assert app.wait_applied(seen, 0.0) == seen
        app.health.applied("revenue")  # between the read and the wait
        assert app.wait_applied(seen, 30.0) == seen + 1
        threading.Timer(0.05, lambda: app.health.applied("revenue")).start()
        assert app.wait_applied(seen + 1, 30.0) == seen + 2
    finally:
        app.close()


def test_as_of_position_in_sql_and_in_session(gw: Gateway, shop: Shop) -> None:
    ahead = json.dumps({"orders": {"1": shop.position.offset("orders", 1) + 5}})
    with pytest.raises(ge.NotUpToBoundError):
        gw.sql(f"SELECT * FROM revenue AS OF POSITION '{ahead}'")
    s = gw.session(position_bound=ahead)
    with pytest.raises(ge.NotUpToBoundError):
        s.sql("SELECT * FROM revenue")


# -- apps with missing partitions, not started, stopped, still being written -------------------
def test_strict_by_default_partial_on_request(half_gw: Gateway, shop: Shop) -> None:
    g = half_gw
    with pytest.raises(ge.PartitionFailureError) as info:
        g.sql("SELECT customer FROM revenue")
    assert info.value.http_status == 503 and info.value.retryable
    assert sorted(p["partition"] for p in info.value.partitions) == [2, 3]
    assert {p["failure_reason"] for p in info.value.partitions} == {"NOT_PRESENT"}
    out = g.sql("SELECT customer FROM revenue", partial=True)
    here = sorted(k for k in shop.revenue if partition_for_key(k, 4, SqlType.VARCHAR) in (0, 1))
    assert sorted(r[0] for r in out.rows()) == here
    assert [(p.partition, p.failure_reason) for p in out.failures] == [(2, "NOT_PRESENT"), (3, "NOT_PRESENT")]
    g.session(partial_results=True).sql("SELECT customer FROM revenue")  # session setting works too


def test_failure_rows_are_queryable_without_error(half_gw: Gateway) -> None:
    g = half_gw
    out = g.sql("SELECT _partition, _failure_reason FROM revenue WHERE _failure_reason IS NOT NULL "
                "ORDER BY _partition")
    assert out.rows() == [(2, "NOT_PRESENT"), (3, "NOT_PRESENT")]


def test_partition_outside_the_store_does_not_exist(half_gw: Gateway) -> None:
    with pytest.raises(ge.PartitionFailureError) as info:
        half_gw.sql("SELECT * FROM revenue WHERE _partition = 9")
    assert info.value.http_status == 404 and not info.value.retryable
    assert info.value.partitions[0]["failure_reason"] == "DOES_NOT_EXIST"


def test_app_states_map_to_kip216_errors(tmp_path: Path) -> None:
    app = make_app(tmp_path / "a", (REVENUE,), app_id="states")
    g = Gateway(app)
    with pytest.raises(ge.StreamsNotStartedError) as info:
        g.sql("SELECT * FROM revenue WHERE customer = 'x'")
    assert info.value.retryable and info.value.http_status == 503
    app.start()
    assert g.sql("SELECT * FROM revenue WHERE customer = 'x'").rows() == []
    app.close()
    with pytest.raises(ge.StreamsStoppedError) as info2:
        g.sql("SELECT * FROM revenue WHERE customer = 'x'")
    assert not info2.value.retryable


def test_wait_for_bound_reads_your_write(tmp_path: Path) -> None:
    app = make_app(tmp_path / "w", (REVENUE,), app_id="wait")
    app.start()
    try:
        shop = make_shop(seed=3)
        app.writer("revenue").write_batch(0, [Change(c, v) for c, v in shop.revenue.items()], shop.position)
        g = Gateway(app)
        nxt = shop.position.with_component("orders", 0, shop.position.offset("orders", 0) + 1)

        def late_write() -> None:
            time.sleep(0.2)
            app.writer("revenue").write_batch(1, [Change("new-customer", (1.5, 1))], nxt)

        with pytest.raises(ge.NotUpToBoundError):
            g.sql("SELECT * FROM revenue WHERE customer = 'new-customer'", position=nxt)
        t = threading.Thread(target=late_write)
        t.start()
        out = g.sql("SELECT revenue, orders FROM revenue WHERE customer = 'new-customer'", position=nxt,
                    wait_ms=20_000)
        t.join(10)
        assert out.rows() == [(1.5, 1)]
        assert out.position.offset("orders", 0) >= nxt.offset("orders", 0)
    finally:
        app.close()


def test_table_scans_can_be_refused_by_the_server(shop_app: StreamsApp, shop: Shop) -> None:
    g = Gateway(shop_app, config=GatewayConfig(table_scans=False))
    with pytest.raises(ge.SqlError) as info:
        g.sql("SELECT * FROM revenue")
    assert info.value.code == "TABLE_SCAN_DISABLED"
    with pytest.raises(ge.SqlError):
        g.sql("SELECT * FROM revenue", session={"table_scans": True})
    c = sorted(shop.revenue)[0]
    assert g.sql("SELECT orders FROM revenue WHERE customer = ?", params=[c]).rows() == [(shop.revenue[c][1],)]


# -- another process's files -------------------------------------------------------------------
def test_open_reads_the_same_rows_from_another_process(shop_app: StreamsApp, gw: Gateway, shop: Shop) -> None:
    sql = "SELECT customer, revenue, orders FROM revenue ORDER BY customer"
    ro = Gateway.open(shop_app.state_dir)
    try:
        assert ro.sql(sql).rows() == gw.sql(sql).rows()
        assert ro.sql(sql).position == shop.position
    finally:
        ro.close()
    code = ("import json, sys\nfrom gateway import Gateway\n"
            f"g = Gateway.open({str(shop_app.state_dir)!r})\n"
            f"r = g.sql({sql!r})\n"
            "print(json.dumps({'rows': [list(x) for x in r.rows()], 'position': r.position.to_json_map()}))\n")
    procs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
             for _ in range(2)]
    for p in procs:
        assert p.returncode == 0, p.stderr[-2000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert [tuple(r) for r in got["rows"]] == [(k, *shop.revenue[k]) for k in sorted(shop.revenue)]
        assert Position.from_map(got["position"]) == shop.position


def test_a_bound_naming_no_topic_any_store_reads_is_refused(tmp_path: Path) -> None:
    """A misspelt topic (``order`` for ``orders``) would bound nothing: refused, naming the known topics.

    A topic another store reads keeps its meaning (ignored here), so one token serves many stores.
    """
    from stores.catalog.schema import Column, StoreKind, StoreSpec

    specs = [StoreSpec(n, StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR), (Column("v", SqlType.BIGINT),),
                       partitions=2, source_topics=(t,)) for n, t in (("a", "orders"), ("b", "profiles"))]
    app = StreamsApp(StoreTopology(specs), application_id="bound-topics", state_dir=tmp_path)
    app.start()
    try:
        for n, t in (("a", "orders"), ("b", "profiles")):
            app.writer(n).write_batch(0, [Change("x", (1,))], Position.from_map({t: {0: 5, 1: 5}}))
        gw = Gateway(app)
        with pytest.raises(ge.UnknownTopicError) as info:
            gw.sql("SELECT * FROM a", position={"order": {"0": 1}})
        err = info.value
        assert err.http_status == 400 and err.code == "UNKNOWN_TOPIC" and not err.retryable
        assert "'order'" in err.message and "read orders" in err.message and "profiles" in err.message
        with pytest.raises(ge.UnknownTopicError):
            gw.sql("SELECT * FROM a AS OF POSITION '{\"ordres\": {\"0\": 1}}'")
        with pytest.raises(ge.UnknownTopicError):
            gw.session(position_bound='{"order": {"0": 1}}').sql("SELECT * FROM a")
        assert gw.sql("SELECT v FROM a", position={"profiles": {"0": 99}}).rows() == [(1,)]  # another store's topic
        assert gw.sql("SELECT v FROM a", position={"order": {"0": 9}, "orders": {"0": 5}}).rows() == [(1,)]
        with pytest.raises(ge.NotUpToBoundError):
            gw.sql("SELECT v FROM a JOIN b USING (k)", position={"profiles": {"0": 6}})
        gw.close()
    finally:
        app.close(10)
