"""Issue 51 end to end on a real Spark, one app started once (Spark starts are slow) that every test here reads:

- Kafka's tombstones (item 1): ``mat`` keeps a key whose value has every field null as a row of nulls, only a
  null value deletes; ``mat_old`` keeps the rule before (``tombstones="all_null"``);
- materialized joins (item 3), the shapes of ksqlDB's ``CREATE TABLE … AS SELECT … JOIN``: on the key (full
  outer; inner with a WHERE), on a foreign key (a chain orders → users → regions, inner then left, KIP-213: a
  user who moves region moves the order's row), and a stream-table join (each order with its user as of the order's
  time, users updated out of order);
- a table aggregate (item 4) grouped by two columns with collect_list, collect_set, topk, WHERE and HAVING;
  ARRAY and STRUCT keys.

Every store is checked at its own Position against DuckDB over the raw records of the event log up to that
Position, after a first load and again after updates, deletes and late records; through SQL (key pushdown where
it is correct, residual SQL for ARRAY/STRUCT keys) and through a standby replica restored from the changelogs.
"""

from __future__ import annotations

import json
import random
from typing import Any

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from gateway.engine import Gateway  # noqa: E402
from stores import (  # noqa: E402
    Position,
    PositionBound,
    RangeQuery,
    State,
    StateQueryRequest,
    StreamsApp,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    Topology,
)
from stores.catalog.schema import StoreKind  # noqa: E402
from stores.changelog import EventLogChangelog  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.replica import Replica, ReplicaSource  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, wait_for_state, wait_until  # noqa: E402

TOPICS = {"test": 2, "test_table": 2, "regions": 1, "orders": 2, "mapping": 1, "akeys": 1}
STORES = ("pk_full", "pk_where", "fk_chain", "enriched", "by_region", "mat", "mat_old", "akey_counts", "skey_counts")
REGIONS = ("eu", "us", "asia")


def build(spark, log: EventLog) -> Topology:  # noqa: ANN001
    t = Topology(spark, log)
    test = t.stream("test", value_schema="name STRING, value BIGINT, region STRING", key_type="bigint")
    test_table = t.stream("test_table", value_schema="f1 STRING, f2 BIGINT", key_type="bigint")
    regions = t.stream("regions", value_schema="rname STRING, zone STRING")
    orders = t.stream("orders", value_schema="user BIGINT, amount BIGINT")
    t.join_table("pk_full", test, test_table, how="full")
    t.join_table("pk_where", test, test_table, columns={"name": "name", "f1": "f1", "f2": "f2"},
                 where="value > 10 AND f2 > 5")
    t.join_table("fk_chain", orders, [test, regions], on=["user", "region"], how=["inner", "left"],
                 columns=["user", "amount", "name", "zone"])
    t.stream_table_join("enriched", orders, test, on="user", how="left", columns=["user", "amount", "name", "region"])
    banded = test.withColumn("band", F.pmod(F.col("value"), F.lit(3)))
    t.table_aggregate("by_region", banded, group_by=["region", "band"], count="n", sums={"total": "value"},
                      collect_lists={"names": "name"}, collect_sets={"name_set": "name"}, topks={"top2": ("value", 2)},
                      where="value >= 0", having="n > 1")
    mapping = t.stream("mapping", value_schema="mapping MAP<STRING, ARRAY<INT>>")
    t.table("mat", mapping, key="key")
    t.table("mat_old", mapping, key="key", tombstones="all_null")
    akeys = t.stream("akeys", value_schema="n BIGINT, tag STRING", key_type="array<string>")
    t.table("akey_counts", akeys.groupBy("key").agg(F.count("*").alias("count"), F.max("timestamp").alias("ts")),
            key="key", timestamp="ts")
    skey = F.struct(F.col("tag").alias("f1"), F.pmod(F.col("n"), F.lit(2)).alias("f2"))
    t.table("skey_counts", akeys.withColumn("sk", skey).groupBy("sk").agg(F.sum("n").alias("total")), key="sk")
    return t


def records(seed: int, start: int, *, users: int, orders: int) -> dict[str, list[tuple]]:
    """Users (``test``) that change name, value and region or are deleted, with timestamps out of order; the
    right table and regions updated and deleted too; orders (some re-sent, some deleted) for users that exist or
    not; mapping values with null fields and tombstones; ARRAY keys."""
    rnd = random.Random(seed)
    out: dict[str, list[tuple]] = {t: [] for t in TOPICS}
    for i in range(users):
        ts = start + rnd.randrange(-50_000, 50_000)  # out of order
        k = rnd.randrange(20)
        value = None if rnd.random() < 0.12 else {"name": rnd.choice(["ann", "bob", "cy", None]),
                                                   "value": rnd.randrange(-5, 40),
                                                   "region": rnd.choice([*REGIONS, None])}
        out["test"].append((k, value, ts))
        if rnd.random() < 0.6:
            out["test_table"].append((rnd.randrange(20), None if rnd.random() < 0.15 else
                                      {"f1": rnd.choice("abc"), "f2": rnd.randrange(12)}, ts + rnd.randrange(100)))
    for r in REGIONS:
        if rnd.random() < 0.8:
            out["regions"].append((r, None if rnd.random() < 0.2 else {"rname": r.upper(), "zone": rnd.choice("NS")},
                                   start + rnd.randrange(1000)))
    for i in range(orders):
        out["orders"].append((f"o{rnd.randrange(orders)}", None if rnd.random() < 0.08 else
                              {"user": rnd.randrange(22), "amount": rnd.randrange(100)},
                              start + rnd.randrange(-60_000, 60_000)))
    kinds = [None, {"mapping": None}, {"mapping": {"a": [1, seed]}}, {}]  # each kind of value in every load
    for k in ("one", "two", "three", "four"):
        out["mapping"].append((k, kinds[(len(k) + seed) % 4], start + 1))
    for _ in range(12):
        key = [rnd.choice("12"), rnd.choice("01")]
        out["akeys"].append((key, {"n": rnd.randrange(10), "tag": rnd.choice("xy")}, start + rnd.randrange(1000)))
    return out


@pytest.fixture(scope="module")
def shared(spark, tmp_path_factory):  # noqa: ANN001, ANN201
    """The app after two loads: a first one, then — after a restart on the same state dir, which must go on from
    the checkpoints and side states without rebuilding anything — updates, deletes and late records."""
    tmp = tmp_path_factory.mktemp("ksql-joins")
    log = EventLog(tmp / "log")
    for topic, parts in TOPICS.items():
        log.create_topic(topic, partitions=parts)
    for topic, recs in records(1, 1_700_000_000_000, users=60, orders=40).items():
        log.append_batch(topic, recs)
    app = StreamsApp(build(spark, log), application_id="ksql-joins", state_dir=tmp / "state")
    try:
        app.start()
        wait_for_state(app, State.RUNNING, timeout_s=300)
        first = {s: read(app, s) for s in STORES}  # checked against the oracle by the first test
    finally:
        assert app.close(60)
    for topic, recs in records(2, 1_700_000_030_000, users=50, orders=30).items():
        log.append_batch(topic, recs)
    app = StreamsApp(build(spark, log), application_id="ksql-joins", state_dir=tmp / "state")
    try:
        app.start()
        wait_for_state(app, State.RUNNING, timeout_s=300)
        wait_until(lambda: caught_up(app, log, STORES), "the stores to catch up", 240)
        rebuilt = {s: app.health.get(s).status for s in STORES
                   if app.current_generation(s) != 0 or app.health.get(s).status == "rebuilding"}
        assert not rebuilt, f"a restart must go on from the side states, not rebuild: {rebuilt}"
        yield app, log, first, tmp
    finally:
        app.close(60)


def read(app: StreamsApp, store: str) -> tuple[Any, dict[Any, tuple[Any, ...]]]:
    """The store's rows (value tuple, then the record time on timestamped stores) and the Position read at."""
    spec = app.catalog()[store]
    timestamped = spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE
    q = TimestampedRangeQuery.with_no_bounds() if timestamped else RangeQuery.with_no_bounds()
    res = app.query(StateQueryRequest.in_store(store).with_query(q))
    rows = {}
    for qr in res.partition_results.values():
        assert qr.is_success, qr.failure_message
        for kv in qr.result:  # ARRAY keys as tuples, STRUCT keys as tuples of (field, value): hashable
            key = tuple(kv.key) if isinstance(kv.key, list) else tuple(kv.key.items()) if isinstance(kv.key, dict) \
                else kv.key
            rows[key] = (*kv.value.value, kv.value.timestamp) if timestamped else tuple(kv.value)
    return res.position, rows


def oracle(log: EventLog, position: Any) -> duckdb.DuckDBPyConnection:
    """DuckDB tables of every topic's records up to ``position``: ``raw_<topic>`` and ``<topic>`` (each key's
    latest row, tombstones gone), as the log holds them."""
    con = duckdb.connect()
    fields = {"test": "name VARCHAR, value BIGINT, region VARCHAR", "test_table": "f1 VARCHAR, f2 BIGINT",
              "regions": "rname VARCHAR, zone VARCHAR", "orders": "user BIGINT, amount BIGINT",
              "mapping": "mapping MAP(VARCHAR, INTEGER[]), has_field BOOLEAN"}
    keys = {"test": "BIGINT", "test_table": "BIGINT"}
    for topic, cols in fields.items():
        names = [c.split()[0] for c in cols.split(", ") if not c[0].isupper()]  # not a MAP type's second half
        con.execute(f"CREATE TABLE raw_{topic} (k {keys.get(topic, 'VARCHAR')}, {cols}, dead BOOLEAN, ts BIGINT, "
                    "p INT, o BIGINT)")
        rows = []
        for p in range(log.partitions(topic)):
            last = position.offset(topic, p)
            if last is None:
                continue
            for r in log.read(topic, p, 0, last + 1):
                v = r.value or {}
                vals = [v.get(n) for n in names if n != "has_field"]
                if topic == "mapping":
                    vals.append("mapping" in v)
                rows.append((r.key, *vals, r.value is None, r.timestamp, p, r.offset))
        if rows:
            con.executemany(f"INSERT INTO raw_{topic} VALUES ({', '.join('?' * (len(names) + 5))})", rows)
        con.execute(f"CREATE VIEW {topic} AS SELECT * EXCLUDE (dead) FROM raw_{topic} "
                    "QUALIFY row_number() OVER (PARTITION BY k ORDER BY o DESC) = 1 AND NOT dead")
    return con


def want(store: str, con: duckdb.DuckDBPyConnection) -> dict[Any, tuple[Any, ...]]:
    sql = {
        "pk_full": "SELECT coalesce(a.k, b.k), a.name, a.value, a.region, b.f1, b.f2, greatest(a.ts, b.ts) "
                   "FROM test a FULL JOIN test_table b ON a.k = b.k",
        "pk_where": "SELECT a.k, a.name, b.f1, b.f2, greatest(a.ts, b.ts) FROM test a JOIN test_table b "
                    "ON a.k = b.k WHERE a.value > 10 AND b.f2 > 5",
        "fk_chain": "SELECT o.k, o.user, o.amount, u.name, r.zone, greatest(o.ts, u.ts, r.ts) FROM orders o "
                    "JOIN test u ON o.user = u.k LEFT JOIN regions r ON u.region = r.k",
        "enriched": """WITH o AS (SELECT * FROM raw_orders QUALIFY row_number() OVER (PARTITION BY k ORDER BY o DESC) = 1),
                            v AS (SELECT * FROM raw_test QUALIFY row_number() OVER (PARTITION BY k, ts ORDER BY o DESC) = 1)
                       SELECT o.k, o.user, o.amount, CASE WHEN v.dead THEN NULL ELSE v.name END,
                              CASE WHEN v.dead THEN NULL ELSE v.region END, o.ts
                       FROM o ASOF LEFT JOIN v ON o.user = v.k AND o.ts >= v.ts WHERE NOT o.dead""",
        "mat": "SELECT k, mapping, ts FROM mapping",
        "mat_old": "SELECT k, mapping, ts FROM raw_mapping QUALIFY row_number() OVER (PARTITION BY k ORDER BY o DESC) "
                   "= 1 AND mapping IS NOT NULL",
    }[store]
    out = {}
    for r in con.execute(sql).fetchall():
        vals = tuple({k: v for k, v in x.items()} if isinstance(x, dict) else x for x in r[1:])
        out[r[0]] = vals
    return out


def want_by_region(con: duckdb.DuckDBPyConnection) -> dict[Any, tuple[Any, ...]]:
    out = {}
    for r in con.execute("""
        SELECT region, value % 3 AS band, count(*), coalesce(sum(value), 0),
               coalesce(list(name ORDER BY p, o) FILTER (WHERE name IS NOT NULL), []),
               coalesce(list(value ORDER BY value DESC) FILTER (WHERE value IS NOT NULL), [])[1:2]
        FROM test WHERE value >= 0 AND region IS NOT NULL GROUP BY ALL HAVING count(*) > 1""").fetchall():
        out[(r[0], r[1])] = (r[2], r[3], r[4], list(dict.fromkeys(r[4])), r[5])
    return out


def _check(app: StreamsApp, log: EventLog, store: str, rows: tuple[Any, dict] | None = None) -> int:
    position, got = rows if rows is not None else read(app, store)
    con = oracle(log, position)
    expected = want_by_region(con) if store == "by_region" else want(store, con)
    assert got == expected, store
    return len(got)


@pytest.mark.parametrize("store", ["pk_full", "pk_where", "fk_chain", "enriched", "by_region", "mat", "mat_old"])
def test_each_store_equals_duckdb_over_the_log_at_its_position(shared, store: str) -> None:  # noqa: ANN001
    app, log, first, _tmp = shared
    assert _check(app, log, store, first[store]) > 0  # after the first load (read before the second)
    assert _check(app, log, store) > 0  # after updates, deletes, foreign keys that moved and late records


def test_a_value_with_every_field_null_is_a_row_only_a_null_value_deletes(shared) -> None:  # noqa: ANN001
    """Issue 51 item 1, ksqlDB's 'complex lambda' case: {"mapping": null} (or {}) is a row whose column is null;
    only a record whose value is null deletes. ``mat_old`` keeps the earlier rule: such a row is deleted."""
    app, log, _first, _tmp = shared
    position, got = read(app, "mat")
    latest = oracle(log, position).execute("SELECT k, dead, mapping IS NULL FROM raw_mapping QUALIFY row_number() "
                                           "OVER (PARTITION BY k ORDER BY o DESC) = 1").fetchall()
    null_rows = [k for k, dead, null in latest if not dead and null]
    assert null_rows, "the records should leave a key whose value has every field null"
    assert set(got) == {k for k, dead, _null in latest if not dead}
    assert all(got[k][0] is None for k in null_rows)
    _p, old = read(app, "mat_old")
    assert not set(null_rows) & set(old)


def test_joins_and_aggregates_through_sql(shared) -> None:  # noqa: ANN001
    """The stores are tables like every other: key lookups are pushed down on joins and aggregates; an ARRAY or
    STRUCT key is compared by DuckDB (a scan), never by its stored text."""
    app, log, _first, _tmp = shared
    gw = Gateway(app)
    position, rows = read(app, "pk_full")
    key = next(iter(rows))
    got = gw.sql("SELECT key, name, f1, f2 FROM pk_full WHERE key = ?", params=[key], position=position).rows()
    assert got == [(key, rows[key][0], rows[key][3], rows[key][4])]
    plan = "\n".join(r[0] for r in gw.sql(f"EXPLAIN SELECT * FROM pk_full WHERE key = {key}").rows())
    assert f"KeyQuery{{key={key}" in plan or f"TimestampedKeyQuery{{key={key}" in plan
    con = oracle(log, read(app, "by_region")[0])
    want_rows = sorted((r, b, n, names) for (r, b), (n, _t, names, _s, _top) in want_by_region(con).items())
    got_rows = gw.sql("SELECT region, band, n, names FROM by_region WHERE n > 1 ORDER BY region, band").rows()
    assert [tuple(r) for r in got_rows] == want_rows
    # ARRAY and STRUCT keys (ksqlDB's 'array keys' / 'struct keys'): equal to a GROUP BY over the records
    apos, akeys = read(app, "akey_counts")
    recs = [r for p in range(log.partitions("akeys")) for r in log.read("akeys", p, 0, apos.offset("akeys", p) + 1)]
    counts: dict[tuple[str, ...], int] = {}
    for r in recs:
        k = tuple(json.loads(r.key))  # the log keeps an ARRAY key as its JSON text
        counts[k] = counts.get(k, 0) + 1
    assert {k: v[0] for k, v in akeys.items()} == counts
    k = sorted(counts)[0]
    lookup = f"SELECT key, count FROM akey_counts WHERE key = ['{k[0]}', '{k[1]}']"
    assert gw.sql(lookup, position=apos).rows() == [(list(k), counts[k])]
    explain = "\n".join(r[0] for r in gw.sql("EXPLAIN " + lookup).rows())
    assert "KeyQuery" not in explain and "RangeQuery" in explain  # a scan DuckDB filters
    assert gw.sql("SELECT key, count FROM akey_counts WHERE key = ['9', '9']").rows() == []
    spos, skeys = read(app, "skey_counts")
    assert sum(v[0] for v in skeys.values()) == sum(r.value["n"] for r in recs)
    (f1, tag), (f2, parity) = next(iter(skeys))
    got = gw.sql("SELECT sk.f1, sk.f2, total FROM skey_counts WHERE sk = {'f1': ?, 'f2': ?}",
                 params=[tag, parity], position=spos).rows()
    assert (f1, f2) == ("f1", "f2") and got == [(tag, parity, skeys[((f1, tag), (f2, parity))][0])]


def test_a_replica_restores_joins_and_aggregates_from_their_changelogs(shared) -> None:  # noqa: ANN001
    """Changelogs and standby replicas work for the new stores as for every store: a replica restored from the
    log answers the same rows at the same Position."""
    app, log, _first, tmp = shared
    names = ["fk_chain", "enriched", "by_region", "akey_counts"]
    rep = Replica(EventLogChangelog(log), "ksql-joins", tmp / "replica", stores=names).start()
    src = ReplicaSource(rep)
    try:
        wait_until(rep.caught_up, "the replica restored the stores", 90)
        for store in names:
            position, rows = read(app, store)
            wait_until(lambda: read(src, store)[0].covers(position), f"the replica's {store}", 60)  # noqa: B023
            assert read(src, store)[1] == rows, store
    finally:
        src.close()


def test_reading_your_own_write_through_a_join_and_a_foreign_key(shared) -> None:  # noqa: ANN001
    """Positions work for joins as for every store: a read bounded at a right-side record's offset sees the rows
    that record changed — by primary key (pk_full) and through a foreign key (fk_chain's users)."""
    app, log, _first, _tmp = shared
    p, off = log.append("test_table", key=3, value={"f1": "fresh", "f2": 99}, timestamp=1_800_000_000_000)
    bound = PositionBound.at(Position.from_map({"test_table": {p: off}}))
    res = {}

    def key_at_bound() -> bool:
        r = app.query(StateQueryRequest.in_store("pk_full").with_query(TimestampedKeyQuery.with_key(3))
                      .with_position_bound(bound))
        res["rows"] = [q.result for q in r.partition_results.values() if q.is_success and q.result is not None]
        return all(q.is_success for q in r.partition_results.values())
    wait_until(key_at_bound, "pk_full at the bound", 60)
    (row,) = res["rows"]
    assert (row.value.f1, row.value.f2, row.timestamp) == ("fresh", 99, 1_800_000_000_000)
    # a user moves to a region with a zone: every order of that user (fk_chain) shows the new zone at the bound
    _pos, chain = read(app, "fk_chain")
    user = next(v[0] for v in chain.values())
    log.append("regions", key="zz", value={"rname": "ZZ", "zone": "Z"}, timestamp=1_800_000_000_000)
    p, off = log.append("test", key=user, value={"name": "moved", "value": 1, "region": "zz"},
                        timestamp=1_800_000_000_001)
    bound = PositionBound.at(Position.from_map({"test": {p: off}}))
    got: dict[str, Any] = {}

    def at_bound() -> bool:
        r = app.query(StateQueryRequest.in_store("fk_chain").with_query(TimestampedRangeQuery.with_no_bounds())
                      .with_position_bound(bound))
        if not all(q.is_success for q in r.partition_results.values()):
            return False
        got.update({kv.key: kv.value.value for q in r.partition_results.values() for kv in q.result})
        return True
    wait_until(at_bound, "fk_chain at the bound", 60)
    mine = [v for v in got.values() if v.user == user]
    assert mine and all((v.name, v.zone) == ("moved", "Z") for v in mine)
