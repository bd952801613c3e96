"""What ksqlDB users expect, on a real Spark (issue 16), end to end; one app started once (Spark starts are slow):

- ``sales``: ``groupBy("region", "product")`` with ``collect_list``, a STRUCT and a MAP (items 1, 2);
- ``big_sales``: the same aggregate ``.filter(units > 30)`` with returns (negative units): a key whose sum
  drops back to 30 or below disappears (item 5, HAVING);
- ``per_category``: counts and sums per category of each user's CURRENT row (item 6, a table aggregated,
  with retraction when a user moves category or is deleted);
- ``sessions``: update-mode session windows (item 4): open sessions are in the store as soon as the batch
  holding their records is, so a read bounded at a record's offset sees the session that contains it;
  with max and avg per session (item 3);
- ``per_category`` also keeps min, max and avg of each category's current amounts, exact under retraction;
- ``sales`` sums a DECIMAL(10,2) price exactly (decimal(20,2)), ``by_price`` is keyed by it, and
  ``by_channel`` groups by a record header (item 7); all three share the sales stream's one query.

Each store's content is checked at its own Position against DuckDB over the
raw records of the event log, and through SQL against the same oracle.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from gateway.engine.gateway import Gateway  # noqa: E402
from stores import (  # noqa: E402
    Position,
    PositionBound,
    RangeQuery,
    State,
    StateQueryRequest,
    StreamsApp,
    Topology,
    WindowRangeQuery,
)
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.topology import TopologyError  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, wait_for_state, wait_until  # noqa: E402

REGIONS = ("eu", "us", "asia", "e")


def sale_events(n: int, seed: int, start_ts: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        region = rnd.choice(REGIONS)
        value = {"region": region, "product": rnd.randrange(6), "units": rnd.randrange(-10, 20),
                 "item": rnd.choice("abcdef"), "price": rnd.choice([0.1, 0.2, 9.99, -3.5, 12.5, 100.05])}
        headers = [("channel", rnd.choice([b"web", b"app"]))] if rnd.random() < 0.8 else []
        out.append((f"{region}-{i}", value, start_ts + i * 1000, [("trace", b"x"), *headers]))
    return out


def build(spark, log: EventLog) -> Topology:  # noqa: ANN001
    t = Topology(spark, log)
    sales = t.stream("sales", value_schema="region STRING, product BIGINT, units BIGINT, item STRING, "
                     "price DECIMAL(10,2)", include_headers=True)
    agg = (sales.groupBy("region", "product")
           .agg(F.sum("units").alias("units"), F.count("*").alias("orders"), F.collect_list("item").alias("items"),
                F.max("timestamp").alias("last_ts"), F.sum("price").alias("revenue"))
           .withColumn("summary", F.struct(F.col("units").alias("units"), F.col("orders").alias("orders")))
           .withColumn("stats", F.create_map(F.lit("units"), F.col("units"), F.lit("orders"), F.col("orders"))))
    t.table("sales", agg, key=["region", "product"], timestamp="last_ts")
    t.table("big_sales", sales.groupBy("region", "product").agg(F.sum("units").alias("units"))
            .filter(F.col("units") > 30), key=["region", "product"])
    t.table("by_price", sales.groupBy("price").agg(F.count("*").alias("n"), F.sum("price").alias("total")),
            key="price")
    channel = F.expr("CAST(get(filter(headers, h -> h.key = 'channel'), 0).value AS STRING)")
    t.table("by_channel", sales.withColumn("channel", F.coalesce(channel, F.lit("none")))
            .groupBy("channel").agg(F.count("*").alias("n")), key="channel")
    users = t.stream("users", value_schema="category STRING, amount BIGINT, price DECIMAL(6,2)", include_headers=True)
    t.table_aggregate("per_category", users, group_by="category", count="users",
                      sums={"total": "amount", "spend": "price"}, mins={"lo": "amount"}, maxs={"hi": "amount"},
                      avgs={"mean": "amount", "avg_price": "price"})
    clicks = t.stream("clicks", value_schema="n BIGINT")
    t.session_table("sessions", clicks, gap="30 seconds", count="clicks", sums={"total": "n"}, maxs={"top": "n"},
                    avgs={"mean": "n"})
    return t


GAP = 30_000


def click_events(n: int, seed: int, start_ts: int) -> list[tuple]:
    rnd = random.Random(seed)
    return [(f"v{rnd.randrange(5)}", {"n": rnd.randrange(10)}, start_ts + rnd.randrange(0, 600_000)) for _ in range(n)]


def _sessions_oracle(log: EventLog, position) -> dict:  # noqa: ANN001
    con = duckdb.connect()
    con.execute("CREATE TABLE ev (k VARCHAR, n BIGINT, ts BIGINT)")
    rows = []
    for p in range(log.partitions("clicks")):
        last = position.offset("clicks", p)
        if last is not None:
            rows += [(r.key, r.value["n"], r.timestamp) for r in log.read("clicks", p, 0, last + 1)]
    if rows:
        con.executemany("INSERT INTO ev VALUES (?, ?, ?)", rows)
    got = con.execute(f"""
        SELECT k, min(ts), max(ts), count(*), sum(n), max(n), avg(n) FROM (
          SELECT *, sum(new) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid FROM (
            SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts) <= {GAP} THEN 0 ELSE 1 END AS new
            FROM ev))
        GROUP BY k, sid""").fetchall()
    return {(k, ws, we): (c, t, top, mean) for k, ws, we, c, t, top, mean in got}


def _sessions(app: StreamsApp, bound=None):  # noqa: ANN001, ANN202
    out, position = {}, None
    for k in (f"v{i}" for i in range(5)):
        req = StateQueryRequest.in_store("sessions").with_query(WindowRangeQuery.with_key(k))
        if bound is not None:
            req = req.with_position_bound(bound)
        res = app.query(req)
        for qr in res.partition_results.values():
            if not qr.is_success:
                return None, None
            for kv in qr.result:
                out[(kv.key.key, kv.key.window.start, kv.key.window.end)] = tuple(kv.value)
        position = res.position if position is None else position.merge(res.position)
    return position, out


def user_events(n: int, seed: int, start_ts: int) -> list[tuple]:
    """Users moving between categories, some deleted (tombstones) and some without a category."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        r = rnd.random()
        value = None if r < 0.15 else {"category": None if r < 0.2 else rnd.choice("abc"), "amount": rnd.randrange(100),
                                       "price": rnd.choice([0.1, 0.2, 1.05, -3.3])}
        # headers on some records, tombstones included: a tombstone with headers still deletes
        out.append((f"u{rnd.randrange(15)}", value, start_ts + i, [("by", b"admin")] if i % 3 == 0 else []))
    return out


def _users_oracle(log: EventLog, position) -> dict:  # noqa: ANN001
    con = duckdb.connect()
    con.execute("CREATE TABLE ev (k VARCHAR, category VARCHAR, amount BIGINT, price_text VARCHAR, dead BOOLEAN, "
                "p INT, off BIGINT)")
    rows = []
    for p in range(log.partitions("users")):
        last = position.offset("users", p)
        if last is not None:
            rows += [(r.key, (r.value or {}).get("category"), (r.value or {}).get("amount"),
                      None if r.value is None else str(r.value["price"]), r.value is None, p, r.offset)
                     for r in log.read("users", p, 0, last + 1)]
    if rows:
        con.executemany("INSERT INTO ev VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    got = con.execute("""SELECT category, count(*), coalesce(sum(amount), 0), coalesce(sum(price), 0), min(amount),
                                max(amount), avg(amount), round(avg(price), 6)::DECIMAL(10,6)
                         FROM (SELECT *, CAST(price_text AS DECIMAL(6,2)) AS price FROM ev
                               QUALIFY row_number() OVER (PARTITION BY k ORDER BY p, off DESC) = 1)
                         WHERE NOT dead AND category IS NOT NULL GROUP BY category""").fetchall()
    return {c: tuple(rest) for c, *rest in got}


def _all_rows(app: StreamsApp, store: str):  # noqa: ANN202
    res = app.query(StateQueryRequest.in_store(store).with_query(RangeQuery.with_no_bounds()))
    rows = {}
    for qr in res.partition_results.values():
        assert qr.is_success, qr.failure_message
        for kv in qr.result:
            rows[kv.key] = tuple(kv.value)
    return res.position, rows


def _oracle(log: EventLog, position) -> duckdb.DuckDBPyConnection:  # noqa: ANN001
    con = duckdb.connect()
    con.execute("CREATE TABLE raw (region VARCHAR, product BIGINT, units BIGINT, item VARCHAR, ts BIGINT, "
                "price_text VARCHAR, channel BLOB)")
    rows = []
    for p in range(log.partitions("sales")):
        last = position.offset("sales", p)
        if last is not None:
            rows += [(r.value["region"], r.value["product"], r.value["units"], r.value["item"], r.timestamp,
                      str(r.value["price"]), next((v for k, v in r.headers if k == "channel"), None))
                     for r in log.read("sales", p, 0, last + 1)]
    if rows:
        con.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    # DuckDB's own DECIMAL: the JSON text of each price cast, summed in DECIMAL arithmetic (no float anywhere)
    con.execute("CREATE TABLE ev AS SELECT * EXCLUDE (price_text), CAST(price_text AS DECIMAL(10,2)) AS price FROM raw")
    con.execute("""CREATE TABLE want AS SELECT region, product, sum(units)::BIGINT AS units, count(*) AS orders,
                   list_sort(list(item)) AS items, max(ts) AS last_ts, sum(price) AS revenue FROM ev GROUP BY ALL""")
    return con


def _store_rows(app: StreamsApp):  # noqa: ANN202
    res = app.query(StateQueryRequest.in_store("sales").with_query(RangeQuery.with_no_bounds()))
    rows = {}
    for qr in res.partition_results.values():
        assert qr.is_success, qr.failure_message
        for kv in qr.result:
            rows[kv.key] = kv.value
    return res.position, rows


def gw_rows(app: StreamsApp, sql: str, position) -> list:  # noqa: ANN001
    return Gateway(app).sql(sql, position=position).rows()


def test_declarations_refused_with_the_fix(spark, tmp_path: Path) -> None:  # noqa: ANN001
    log = EventLog(tmp_path / "log")
    log.create_topic("sales", partitions=1)
    t = Topology(spark, log)
    sales = t.stream("sales", value_schema="region STRING, product BIGINT, units BIGINT, item STRING")
    agg = sales.groupBy("region").agg(F.sum("units").alias("units"))
    priced = t.stream("sales", value_schema="units BIGINT", key_type="decimal(6,2)")  # DECIMAL keys from the log
    with pytest.raises(TopologyError, match="a filter after the aggregation must be the last step"):
        t.table("x", agg.filter(F.col("units") > 1).withColumn("u2", F.col("units") * 2), key="region")
    with pytest.raises(TopologyError, match="key must be a column name or a list"):
        t.table("y", agg, key=[])
    with pytest.raises(TopologyError, match="no key column 'nope'"):
        t.table("z", agg, key=["region", "nope"])
    with pytest.raises(TopologyError, match="not a number"):
        t.table_aggregate("w", sales, group_by="region", sums={"s": "item"})
    # a min of strings orders them, as SQL's (issue 51: min/max take any scalar column)
    assert t.table_aggregate("w_lo", sales, group_by="region", mins={"lo": "item"}).values[1].type.value == "VARCHAR"
    with pytest.raises(TopologyError, match="column 'key' is decimal\\(6,2\\); this store's aggregates take integers"):
        t.session_table("w", priced, gap="1 minute", sums={"s": "key"})
    with pytest.raises(TopologyError, match="no avgs column 'nope'"):
        t.session_table("w", sales, gap="1 minute", avgs={"m": "nope"})
    with pytest.raises(TopologyError, match="not an aggregation"):
        t.table_aggregate("v", agg, group_by="region")
    assert dict(priced.dtypes)["key"] == "decimal(6,2)"
    assert t.table("by_key", priced.groupBy("key").agg(F.sum("units").alias("u")), key="key").key.type.value == (
        "DECIMAL(6,2)")
    with pytest.raises(TopologyError, match="precision 39 is not supported"):
        t.stream("sales", value_schema="units BIGINT", key_type="decimal(39,2)")
    with_headers = t.stream("sales", value_schema="region STRING, units BIGINT", include_headers=True)
    assert "headers" in with_headers.columns
    for kind in (t.table, t.versioned_table):  # record metadata, like topic/partition/offset: not stored
        assert "headers" not in kind(f"h_{kind.__name__}", with_headers, key="key").value_names()
    spec = t.table("ok", agg.filter(F.col("units") > 1).filter(F.col("region") != "x"), key="region")
    decl = t.declarations()[-1]
    assert decl.having is not None and "units" in decl.having and "region" in decl.having
    assert [c.name for c in spec.values] == ["units"]


def test_composite_keys_and_nested_values_match_the_oracle(spark, tmp_path: Path) -> None:  # noqa: ANN001
    log = EventLog(tmp_path / "log")
    log.create_topic("sales", partitions=3)
    log.create_topic("users", partitions=2)
    log.create_topic("clicks", partitions=2)
    log.append_batch("clicks", click_events(150, seed=5, start_ts=1_700_000_000_000))
    log.append_batch("sales", sale_events(300, seed=1, start_ts=1_700_000_000_000))
    log.append_batch("users", user_events(120, seed=3, start_ts=1_700_000_000_000))
    app = StreamsApp(build(spark, log), application_id="ksql-shapes", state_dir=tmp_path / "state")
    try:
        app.start()
        wait_for_state(app, State.RUNNING, timeout_s=240)  # three queries starting on a shared 2-core machine
        spec = app.catalog()["sales"]
        assert [c.name for c in spec.key_columns()] == ["region", "product"]
        assert {c.name: c.type.value for c in spec.values} == {
            "units": "BIGINT", "orders": "BIGINT", "items": "VARCHAR[]", "revenue": "DECIMAL(20,2)",
            "summary": "STRUCT(units BIGINT, orders BIGINT)", "stats": "MAP(VARCHAR, BIGINT)"}
        assert app.catalog()["by_price"].key.type.value == "DECIMAL(10,2)"
        for round_ in range(2):
            if round_:  # more records: the updated aggregates replace the old ones, nested values included
                log.append_batch("sales", sale_events(150, seed=2, start_ts=1_700_001_000_000))
                log.append_batch("users", user_events(80, seed=4, start_ts=1_700_001_000_000))
                log.append_batch("clicks", click_events(100, seed=6, start_ts=1_700_000_000_000))  # late ones merge
                wait_until(lambda: caught_up(app, log, ("sales", "big_sales", "per_category", "sessions", "by_price",
                                                         "by_channel")), "stores to catch up", 180)

            # item 4: sessions (open ones too) equal gaps-and-islands over the records up to the store's Position
            spos, sess = _sessions(app)
            assert sess == _sessions_oracle(log, spos)

            # item 6: the table aggregate equals GROUP BY over each user's latest row, at the store's Position
            upos, per_cat = _all_rows(app, "per_category")
            want_cat = _users_oracle(log, upos)
            assert {c: v[:5] + v[6:] for c, v in per_cat.items()} == {c: w[:5] + w[6:] for c, w in want_cat.items()}
            assert all(per_cat[c][5] == pytest.approx(w[5], abs=1e-9) for c, w in want_cat.items())
            assert app.catalog()["per_category"].values[2].type.value == "DECIMAL(16,2)"  # Spark's sum type
            # item 5: the HAVING store holds exactly the qualifying keys (the others were deleted)
            bpos, big = _all_rows(app, "big_sales")
            bcon = _oracle(log, bpos)
            assert big == {(r, p): (u,) for r, p, u in bcon.execute(
                "SELECT region, product, units FROM want WHERE units > 30").fetchall()}
            position, rows = _store_rows(app)
            con = _oracle(log, position)
            want = {(r, p): tuple(rest) for r, p, *rest in con.execute("SELECT * FROM want").fetchall()}
            got = {k: (v.units, v.orders, sorted(v.items), None, v.revenue) for k, v in rows.items()}
            assert {k: g[:3] for k, g in got.items()} == {k: w[:3] for k, w in want.items()}
            assert {k: g[4] for k, g in got.items()} == {k: w[4] for k, w in want.items()}  # exact decimals
            # item 7: a DECIMAL key and a header value as keys, against DuckDB over the same records
            ppos, by_price = _all_rows(app, "by_price")
            pcon = _oracle(log, ppos)
            assert by_price == {p: (n, t) for p, n, t in pcon.execute(
                "SELECT price, count(*), sum(price) FROM ev GROUP BY price").fetchall()}
            hpos, by_channel = _all_rows(app, "by_channel")
            assert by_channel == {c: (n,) for c, n in _oracle(log, hpos).execute(
                "SELECT coalesce(CAST(channel AS VARCHAR), 'none'), count(*) FROM ev GROUP BY 1").fetchall()}
            for k, v in rows.items():
                assert v.summary == {"units": v.units, "orders": v.orders}
                assert v.stats == {"units": v.units, "orders": v.orders}

            gw = Gateway(app)
            con.execute("CREATE TABLE sales AS SELECT region, product, units, orders, items FROM want")
            pcon.execute("CREATE TABLE by_price AS SELECT price, count(*) AS n, sum(price) AS total FROM ev GROUP BY 1")
            for sql in ["SELECT price, n, total FROM by_price WHERE price = 12.5",
                        "SELECT price, n FROM by_price WHERE price BETWEEN -3.5 AND 9.99 ORDER BY price",
                        "SELECT sum(total), sum(n) FROM by_price"]:
                assert gw_rows(app, sql, ppos) == pcon.execute(sql).fetchall(), sql
            for sql in ["SELECT region, product, units, orders, list_sort(items) FROM sales WHERE region = 'eu' AND product = 3",
                        "SELECT region, product, units FROM sales WHERE region = 'asia'",
                        "SELECT region, product, units FROM sales WHERE region = 'us' AND product BETWEEN 1 AND 4",
                        "SELECT region, sum(units), count(*) FROM sales GROUP BY region",
                        "SELECT region, product, unnest(items) AS item FROM sales WHERE region = 'e'"]:
                got_sql = sorted(gw.sql(sql, position=position).rows(), key=repr)
                assert got_sql == sorted(con.execute(sql).fetchall(), key=repr), sql
            nested = gw.sql("SELECT summary.units, stats['orders'], len(items) FROM sales WHERE region = 'eu' AND "
                            "product = 3", position=position).rows()
            k = ("eu", 3)
            assert nested == ([(want[k][0], want[k][1], want[k][1])] if k in want else [])
            plan = "\n".join(r[0] for r in gw.sql("EXPLAIN SELECT * FROM sales WHERE region = 'eu' AND product = 3").rows())
            assert "KeyQuery{key=('eu', 3)" in plan

        # item 4: a read bounded at a new record's offset sees the (open) session that holds it, never less
        ts = 1_700_000_000_000 + 10_000_000
        p, off = log.append("clicks", key="v1", value={"n": 7}, timestamp=ts)
        bound = PositionBound.at(Position.from_map({"clicks": {p: off}}))
        seen: list = []
        wait_until(lambda: seen.append(_sessions(app, bound)[1]) or seen[-1] is not None, "the bound", 120)
        assert seen[-1][("v1", ts, ts)] == (1, 7, 7, 7.0)
    finally:
        app.close()
