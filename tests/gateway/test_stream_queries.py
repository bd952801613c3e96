"""Pull queries on streams (issue 51 item 2): a stream's records answer SQL as DuckDB answers over the raw log.

The oracle is DuckDB SQL over the records as the log holds them (``EventLog.read``: offsets, keys, the value's
JSON text, timestamps), typed with DuckDB's own JSON functions, never with the reader under test. Random
statements (filters on partition, offset, rowtime, key and values, joins with a store and with another stream,
aggregates) are compared whole; the pushdown is proved by a damaged partition a narrowed read never touches;
bounds, waiting, failures, budgets and the catalogs are checked one by one.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gateway.engine import errors as ge
from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.catalog.streams import StreamSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog
from tests.gateway.gwfixtures import Http, serve_gateway

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
STATEMENTS = 220
UTC = dt.timezone.utc

ORDERS = StreamSpec("orders", "orders", Column("key", SqlType.VARCHAR),
                    (Column("amount", SqlType.DOUBLE), Column("item", SqlType.VARCHAR), Column("qty", SqlType.BIGINT)),
                    partitions=4, headers=True)
CLICKS = StreamSpec("clicks", "clicks", Column("key", SqlType.VARCHAR), (Column("page", SqlType.VARCHAR),),
                    partitions=2)
CUSTOMERS = StoreSpec("customers", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
                      (Column("tier", SqlType.VARCHAR), Column("credit", SqlType.DOUBLE)), partitions=2,
                      source_topics=("orders",))


def orders(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        key = f"c{rng.randrange(20):02d}"
        r = rng.random()
        if r < 0.05:
            value = None  # a tombstone
        elif r < 0.10:
            value = {"amount": "bad", "item": "pen", "qty": 1}  # the wrong type: null
        elif r < 0.14:
            value = {"amount": round(rng.uniform(1, 99), 2), "qty": rng.randrange(5)}  # no item
        elif r < 0.17:
            value = {"amount": rng.randrange(50), "item": rng.randrange(9), "qty": 2}  # a number in a text field
        else:
            value = {"amount": round(rng.uniform(1, 99), 2), "item": rng.choice(["pen", "pad", "ink", "bag"]),
                     "qty": rng.randrange(1, 9)}
        ts = T0 + rng.randrange(7_200_000)  # timestamps in no order
        headers = [("src", rng.choice([b"web", b"app"]))] if rng.random() < 0.3 else None
        out.append({"key": key, "value": value, "timestamp": ts, **({"headers": headers} if headers else {})})
    return out


#: The orders stream as DuckDB's own JSON functions read the raw records (the value's JSON text): the oracle.
ORDERS_VIEW = """CREATE OR REPLACE VIEW "{view}" AS SELECT k AS key,
    CASE WHEN json_type(v, '$.amount') IN ('BIGINT', 'UBIGINT', 'DOUBLE')
         THEN CAST(json_extract(v, '$.amount') AS DOUBLE) END AS amount,
    CASE json_type(v, '$.item') WHEN 'VARCHAR' THEN json_extract_string(v, '$.item') WHEN 'NULL' THEN NULL
         ELSE CAST(json_extract(v, '$.item') AS VARCHAR) END AS item,
    CASE WHEN json_type(v, '$.qty') IN ('BIGINT', 'UBIGINT') THEN CAST(json_extract(v, '$.qty') AS BIGINT) END AS qty,
    CAST(epoch_ms(ts) AS TIMESTAMPTZ) AS rowtime, p AS "partition", o AS "offset", p AS _partition
    FROM "{raw}"
"""


def load_raw(con: duckdb.DuckDBPyConnection, topic: str, records: list[Any]) -> None:
    """``raw_<topic>`` (k, v JSON text, ts, p, o) from the records as the log returns them."""
    con.execute(f'CREATE OR REPLACE TABLE "raw_{topic}" (k VARCHAR, v JSON, ts BIGINT, p INTEGER, o BIGINT)')
    con.executemany(f'INSERT INTO "raw_{topic}" VALUES (?, ?, ?, ?, ?)',
                    [(r.key, None if r.value is None else json.dumps(r.value), r.timestamp, r.partition, r.offset)
                     for r in records])


class World:
    """The log, the app over it, the gateway, and the oracle over the same records."""

    def __init__(self, root: Path) -> None:
        rng = random.Random(51)
        self.log = EventLog(root / "log")
        self.log.create_topic("orders", partitions=4)
        self.log.create_topic("clicks", partitions=2)
        self.log.append_batch("orders", orders(rng, 700))
        self.log.append_batch("clicks", [(f"c{rng.randrange(20):02d}", {"page": rng.choice(["/", "/buy", "/x"])},
                                          T0 + rng.randrange(7_200_000)) for _ in range(150)])
        self.customers = {f"c{i:02d}": (rng.choice(["gold", "basic"]), round(rng.uniform(0, 500), 2))
                          for i in range(15)}
        self.state = root / "state"
        self.app = StreamsApp(StoreTopology([CUSTOMERS], streams=[ORDERS, CLICKS], log=self.log),
                              application_id="streams51", state_dir=self.state)
        self.app.start()
        self.app.writer("customers").write_batch(0, [Change(k, v) for k, v in self.customers.items()],
                                                 Position.from_map({"orders": self.log.last_offsets("orders")}))
        self.gw = Gateway(self.app)
        self.oracle = duckdb.connect()
        self.oracle.execute("SET TimeZone = 'UTC'")
        self.load_oracle()

    def load_oracle(self) -> None:
        for topic in ("orders", "clicks"):
            load_raw(self.oracle, topic, [r for p in range(self.log.partitions(topic)) for r in self.log.read(topic, p)])
        self.oracle.execute(ORDERS_VIEW.format(view="orders", raw="raw_orders"))
        self.oracle.execute("""CREATE OR REPLACE VIEW clicks AS SELECT k AS key, json_extract_string(v, '$.page') AS page,
            CAST(epoch_ms(ts) AS TIMESTAMPTZ) AS rowtime, p AS "partition", o AS "offset" FROM raw_clicks""")
        self.oracle.execute("CREATE OR REPLACE TABLE customers (customer VARCHAR, tier VARCHAR, credit DOUBLE)")
        self.oracle.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(k, *v) for k, v in self.customers.items()])

    def close(self) -> None:
        self.gw.close()
        self.app.close(30)
        self.oracle.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("streams"))
    try:
        yield w
    finally:
        w.close()


def _ts(ms: int) -> str:
    return "TIMESTAMPTZ '" + dt.datetime.fromtimestamp(ms / 1000, UTC).isoformat(sep=" ", timespec="milliseconds") + "'"


class Statements:
    """Random (gateway SQL, oracle SQL) pairs over the orders stream, alone or joined."""

    def __init__(self, rng: random.Random, ends: dict[int, int]) -> None:
        self.rng = rng
        self.ends = ends

    def offset(self) -> int:
        return self.rng.choice([0, 1, 5, 40, 90, max(self.ends.values()), -3, 10_000]) + self.rng.choice([0, 0, 1, -1])

    def predicate(self) -> str:
        rng = self.rng
        kind = rng.choice(["partition", "partition", "offset", "offset", "rowtime", "rowtime", "key", "amount",
                           "item", "or", "_partition"])
        if kind == "partition":
            return rng.choice([f"partition = {rng.randrange(4)}", f"partition IN ({rng.randrange(4)}, {rng.randrange(4)})",
                               f"partition < {rng.randrange(5)}", f"partition >= {rng.randrange(4)}",
                               f"partition BETWEEN 1 AND {rng.randrange(4)}"])
        if kind == "_partition":
            return f"_partition = {rng.randrange(4)}"
        if kind == "offset":
            a, b = sorted((self.offset(), self.offset()))
            return rng.choice([f"offset >= {a}", f"offset < {b}", f"offset BETWEEN {a} AND {b}", f"offset = {a}",
                               f"offset > {a}", f"offset IN ({a}, {b})", f'"offset" <= {b}'])
        if kind == "rowtime":
            a, b = sorted(T0 + rng.randrange(-60_000, 7_300_000) for _ in range(2))
            return rng.choice([f"rowtime >= {_ts(a)}", f"rowtime < {_ts(b)}", f"rowtime BETWEEN {_ts(a)} AND {_ts(b)}",
                               f"rowtime > {_ts(a)} AND rowtime <= {_ts(b)}"])
        if kind == "key":
            return rng.choice([f"key = 'c{rng.randrange(22):02d}'", f"key IN ('c{rng.randrange(20):02d}', 'c01')"])
        if kind == "amount":
            return rng.choice([f"amount > {rng.randrange(99)}", "amount IS NULL", "qty >= 3"])
        if kind == "item":
            return rng.choice(["item LIKE 'p%'", "item IS NULL", "item = '3'"])
        return f"(partition = {rng.randrange(4)} OR amount > {rng.randrange(99)})"

    def where(self) -> str:
        terms = [self.predicate() for _ in range(self.rng.randrange(0, 4))]
        return (" WHERE " + " AND ".join(terms)) if terms else ""

    def statement(self) -> tuple[str, str]:
        """(the gateway's SQL, the oracle's): plain DuckDB needs ``offset`` quoted, iqgate's planner does not."""
        sql, oracle = self._statement()
        return sql, re.sub(r'(?<!["\w])offset(?!["\w])', '"offset"', oracle)

    def _statement(self) -> tuple[str, str]:
        rng = self.rng
        where = self.where()
        shape = rng.randrange(7)
        if shape == 0:
            return f"SELECT * FROM orders{where}", f"SELECT key, amount, item, qty FROM orders{where}"
        if shape == 1:
            sql = f"SELECT key, amount, offset, partition, rowtime FROM orders{where}"
            return sql, sql
        if shape == 2:
            sql = f"SELECT count(*), sum(amount), min(rowtime), max(offset) FROM orders{where}"
            return sql, sql
        if shape == 3:
            sql = f"SELECT partition, count(*) AS n, count(item) FROM orders{where} GROUP BY partition"
            return sql, sql
        if shape == 4:
            on = where.replace(" WHERE ", " AND ").replace('"offset"', "offset") if where else ""
            sql = ("SELECT o.key, o.amount, c.tier, c.credit FROM orders o JOIN customers c ON o.key = c.customer"
                   + on.replace("partition", "o.partition").replace("offset", "o.offset")
                   .replace("rowtime", "o.rowtime").replace("key", "o.key").replace("amount", "o.amount")
                   .replace("_o.partition", "o._partition"))
            return sql, sql
        if shape == 5:
            sql = (f"SELECT o.key, count(*) AS n FROM orders o LEFT JOIN customers c ON o.key = c.customer "
                   f"WHERE c.customer IS NULL AND o.offset < {self.offset()} GROUP BY o.key")
            return sql, sql
        sql = (f"SELECT o.key, count(*) AS n FROM (SELECT * FROM orders{where}) o JOIN clicks k ON o.key = k.key "
               f"WHERE k.partition = {rng.randrange(2)} GROUP BY o.key")
        return sql, sql.replace("SELECT * FROM orders", "SELECT key, amount, item, qty, partition, rowtime, "
                                "\"offset\", _partition FROM orders")


def _same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    def norm(rows: list[tuple[Any, ...]]) -> list[str]:
        return sorted(repr(tuple(round(v, 6) if isinstance(v, float) else v for v in r)) for r in rows)
    return norm(got) == norm(want)


def test_random_statements_answer_what_duckdb_answers_over_the_raw_log(world: World) -> None:
    ends = world.log.end_offsets("orders")
    gen = Statements(random.Random(7), ends)
    checked = 0
    for _ in range(STATEMENTS):
        sql, oracle_sql = gen.statement()
        got = world.gw.sql(sql).rows()
        want = world.oracle.execute(oracle_sql).fetchall()
        assert _same(got, want), f"{sql}\n got  {sorted(got, key=repr)[:5]}\n want {sorted(want, key=repr)[:5]}"
        checked += 1
    assert checked == STATEMENTS


def test_the_answer_carries_the_position_of_what_was_read(world: World) -> None:
    last = world.log.last_offsets("orders")
    out = world.gw.sql("SELECT count(*) FROM orders")
    assert out.rows() == [(sum(e + 1 for e in last.values()),)]
    assert out.position == Position.from_map({"orders": last})
    assert sorted((p.store, p.partition, p.failure_reason) for p in out.partitions) == \
        [("orders", p, None) for p in range(4)]
    narrowed = world.gw.sql("SELECT count(*) FROM orders WHERE partition IN (1, 3) AND offset <= 20")
    assert narrowed.position == Position.from_map({"orders": {p: min(20, last[p]) for p in (1, 3)}})
    # joined with a store: the store's Position and the stream's merge (max per partition)
    joined = world.gw.sql("SELECT count(*) FROM orders o JOIN customers c ON o.key = c.customer WHERE o.partition = 0")
    assert joined.position.offset("orders", 0) == last[0]


def test_star_shows_key_and_values_and_the_record_columns_when_named(world: World) -> None:
    out = world.gw.sql("SELECT * FROM orders WHERE partition = 2 AND offset = 0")
    assert [c for c, _ in out.columns] == ["key", "amount", "item", "qty"]
    rec = world.log.read("orders", 2, 0, 1)[0]
    named = world.gw.sql("SELECT o.*, offset, partition, rowtime, headers FROM orders o WHERE partition = 2 "
                         "AND offset = 0")
    assert [c for c, _ in named.columns] == ["key", "amount", "item", "qty", "offset", "partition", "rowtime",
                                             "headers"]
    row = named.rows()[0]
    assert row[0] == rec.key and row[4:6] == (0, 2) and row[6].timestamp() * 1000 == rec.timestamp
    assert row[7] == [{"key": n, "value": v} for n, v in rec.headers]
    types = dict(named.columns)
    assert types["rowtime"] == "TIMESTAMP WITH TIME ZONE" and types["offset"] == "BIGINT"


def test_pushdown_reads_only_the_partitions_and_offsets_asked_for(tmp_path: Path) -> None:
    """A damaged record makes any read that touches it fail: reads that are narrowed past it answer."""
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=2)
    log.append_batch("orders", [(f"k{i}", {"amount": i}, T0 + i) for i in range(10)], partition=0)
    log.append_batch("orders", [(f"k{i}", {"amount": i}, T0 + i) for i in range(10)], partition=1)
    app = StreamsApp(StoreTopology([], streams=[ORDERS], log=log), application_id="fragile", state_dir=tmp_path / "s")
    app.start()
    gw = Gateway(app)
    try:
        rec = tmp_path / "log" / "topics" / "orders" / "1.rec"
        data = bytearray(rec.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a record in the middle of partition 1
        rec.write_bytes(bytes(data))
        with pytest.raises(ge.ExecutionError, match="CORRUPT_LOG"):
            gw.sql("SELECT count(*) FROM orders").rows()
        assert gw.sql("SELECT count(*) FROM orders WHERE partition = 0").rows() == [(10,)]
        assert gw.sql("SELECT count(*) FROM orders WHERE _partition <> 1 AND partition < 1").rows() == [(10,)]
        assert gw.sql("SELECT sum(amount) FROM orders WHERE partition = 1 AND offset < 2").rows() == [(1.0,)]
        assert gw.sql("SELECT sum(amount) FROM orders WHERE partition = 1 AND offset >= 8").rows() == [(17.0,)]
        plan = "\n".join(r[0] for r in gw.sql("EXPLAIN SELECT * FROM orders WHERE partition = 1 AND offset >= 8 "
                                                "AND rowtime < TIMESTAMPTZ '2024-05-01 12:00:00.005+00'").rows())
        assert "StreamQuery(partitions=[1], offsets=[8, +inf], rowtime_ms=[-inf, 1714564800004])" in plan
    finally:
        gw.close()
        app.close(30)


def test_a_bound_the_log_has_not_reached_is_waited_for_or_refused(world: World) -> None:
    ends = world.log.end_offsets("orders")
    reached = {"orders": {0: ends[0] - 1}}
    assert world.gw.sql("SELECT count(*) FROM orders WHERE partition = 0", position=reached).rows() == [(ends[0],)]
    text = json.dumps({"orders": {"0": ends[0] - 1}})
    assert world.gw.sql(f"SELECT count(*) FROM orders WHERE partition = 0 AS OF POSITION '{text}'").rows() \
        == [(ends[0],)]
    ahead = {"orders": {0: ends[0] + 1}}
    with pytest.raises(ge.NotUpToBoundError, match="NOT_UP_TO_BOUND.*ends at offset"):
        world.gw.sql("SELECT count(*) FROM orders WHERE partition = 0", position=ahead)
    partial = world.gw.sql("SELECT count(*) FROM orders WHERE partition = 0", position=ahead, partial=True)
    assert partial.rows() == [(0,)] and partial.partitions[0].failure_reason == "NOT_UP_TO_BOUND"
    failures = world.gw.sql("SELECT partition, _failure_reason FROM orders WHERE partition = 0 "
                            "AND _failure_reason IS NOT NULL", position=ahead, partial=True).rows()
    assert failures == [(0, "NOT_UP_TO_BOUND")]
    with pytest.raises(ge.UnknownTopicError, match="no store reads"):
        world.gw.sql("SELECT count(*) FROM orders WHERE partition = 0", position={"ordres": {0: 1}})

    # a bound past the log's end is one no wait can reach (the log is the source): answered at once, as a store's
    started = time.monotonic()
    with pytest.raises(ge.NotUpToBoundError, match="waiting cannot reach it"):
        world.gw.sql("SELECT count(*) FROM orders WHERE partition = 0", position=ahead, wait_ms=20_000)
    assert time.monotonic() - started < 10
    # a producer reads its own write: the offset it was given is in the log
    p, off = world.log.append("orders", "c01", {"amount": 1.0, "item": "pen", "qty": 1}, T0)
    world.load_oracle()  # the oracle holds what the log holds
    assert world.gw.sql(f"SELECT amount FROM orders WHERE partition = {p} AND offset = {off}",
                        position={"orders": {p: off}}).rows() == [(1.0,)]


def test_partitions_that_do_not_exist_are_reported_as_store_partitions_are(world: World) -> None:
    with pytest.raises(ge.PartitionFailureError, match="partition 7: DOES_NOT_EXIST"):
        world.gw.sql("SELECT * FROM orders WHERE partition = 7")
    out = world.gw.sql("SELECT count(*) FROM orders WHERE partition IN (1, 7)", partial=True)
    assert out.rows() == world.oracle.execute("SELECT count(*) FROM orders WHERE partition = 1").fetchall()
    assert [(p.partition, p.failure_reason) for p in out.partitions] == [(1, None), (7, "DOES_NOT_EXIST")]
    assert world.gw.sql("SELECT count(*) FROM orders WHERE offset < 0 AND partition = 7").rows() == [(0,)]


def test_budgets_apply_to_stream_scans(world: World, tmp_path: Path) -> None:
    with pytest.raises(ge.SqlError, match="reads every record of its topic.*SET table_scans = true") as err:
        world.gw.sql("SELECT * FROM orders WHERE amount > 3", session={"table_scans": False})
    assert err.value.code == "TABLE_SCAN_DISABLED"
    assert world.gw.sql("SELECT count(*) FROM orders WHERE partition = 1", session={"table_scans": False}).rows() \
        == world.oracle.execute("SELECT count(*) FROM orders WHERE partition = 1").fetchall()
    with pytest.raises(ge.RowLimitExceeded):
        world.gw.sql("SELECT * FROM orders", max_rows=10).rows()

    # the time budget stops a long read between batches
    log = EventLog(tmp_path / "big")
    log.create_topic("orders", partitions=1)
    for i in range(6):
        log.append_batch("orders", [(f"k{j}", {"amount": j, "item": "x" * 40}, T0 + j) for j in range(5_000)])
    app = StreamsApp(StoreTopology([], streams=[ORDERS], log=log), application_id="big", state_dir=tmp_path / "s")
    app.start()
    gw = Gateway(app, config=GatewayConfig.of(None, scan_batch_rows=256))
    try:
        started = time.monotonic()
        with pytest.raises(ge.StatementTimeout):
            gw.sql("SELECT count(*) FROM orders WHERE md5(item || key) < 'z'",
                   session={"statement_timeout_ms": 50}).rows()
        assert time.monotonic() - started < 10
        assert gw.sql("SELECT count(*) FROM orders").rows() == [(30_000,)]
    finally:
        gw.close()
        app.close(30)


def test_catalogs_list_streams_as_tables(world: World) -> None:
    gw = world.gw
    tables = dict((r[0], r[1:]) for r in gw.sql("SHOW TABLES").rows())
    assert tables["orders"] == ("stream", 4, "key") and tables["customers"][0] == "key_value"
    described = gw.sql("DESCRIBE orders").rows()
    assert [r[0] for r in described] == ["key", "amount", "item", "qty", "rowtime", "partition", "offset", "headers"]
    assert all(r[3] is None for r in described) and described[4][5] == "record column"
    cols = gw.sql("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                  "WHERE table_name = 'clicks' ORDER BY ordinal_position").rows()
    assert cols == [("key", "VARCHAR", "YES"), ("page", "VARCHAR", "YES"), ("rowtime", "TIMESTAMP WITH TIME ZONE", "NO"),
                    ("partition", "INTEGER", "NO"), ("offset", "BIGINT", "NO")]
    assert ("orders",) in gw.sql("SELECT table_name FROM information_schema.tables").rows()
    assert gw.sql("SELECT count(*) FROM information_schema.table_constraints WHERE table_name = 'orders'").rows() \
        == [(0,)]  # a stream has no primary key: its keys repeat
    pg = gw.sql("SELECT c.relname, count(a.attname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a "
                "ON a.attrelid = c.oid WHERE c.relname IN ('orders', 'customers') GROUP BY c.relname "
                "ORDER BY c.relname").rows()
    assert pg == [("customers", 3), ("orders", 8)]
    streams = gw.sql("SELECT stream, topic, partitions, key_type, value_columns, headers FROM system.streams "
                     "ORDER BY stream").rows()
    assert streams == [("clicks", "clicks", 2, "VARCHAR", ["page VARCHAR"], False),
                       ("orders", "orders", 4, "VARCHAR", ["amount DOUBLE", "item VARCHAR", "qty BIGINT"], True)]
    assert gw.result_columns("SELECT key, offset FROM orders WHERE partition = $1") == [("key", "VARCHAR"),
                                                                                        ("offset", "BIGINT")]
    assert gw.parameter_types("SELECT key FROM orders WHERE offset > $1") == {1: "bigint"}


def test_statement_errors_name_the_stream_and_where(world: World) -> None:
    gw = world.gw
    with pytest.raises(ge.UnknownStoreError, match="did you mean 'orders'"):
        gw.sql("SELECT * FROM ordres")
    with pytest.raises(ge.SqlError, match="unknown column 'nope' in stream orders.*rowtime, partition, offset"):
        gw.sql("SELECT nope FROM orders")
    with pytest.raises(ge.NotSupported, match="'orders' is a stream, not a store.*line 1, column 11"):
        gw.sql("SUBSCRIBE orders")
    with pytest.raises(ge.NotSupported, match="is a stream, not a store"):
        gw.sql("SELECT * FROM orders EMIT CHANGES")
    with pytest.raises(ge.NotSupported, match="FOR SYSTEM_TIME applies only to versioned stores; orders is a stream"):
        gw.sql("SELECT * FROM orders FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01'")
    with pytest.raises(ge.SqlError, match=r"cannot compare column offset \(BIGINT\) with 'x'.*line 1, column 37"):
        gw.sql("SELECT * FROM orders WHERE offset = 'x'")
    with pytest.raises(ge.SqlError, match="cannot compare column rowtime"):
        gw.sql("SELECT * FROM orders WHERE rowtime > 'not a time'")


def test_another_process_reads_the_published_streams(world: World) -> None:
    spec_file = world.state / "streams" / "orders" / "stream.json"
    assert StreamSpec.from_json(spec_file.read_text()) == ORDERS
    reader_gw = Gateway.open(world.state)
    try:
        sql = "SELECT partition, count(*), sum(amount) FROM orders WHERE rowtime >= TIMESTAMPTZ '2024-05-01 12:30:00+00' " \
              "GROUP BY partition"
        assert _same(reader_gw.sql(sql).rows(), world.oracle.execute(sql).fetchall())
        joined = ("SELECT c.tier, count(*) FROM orders o JOIN customers c ON o.key = c.customer WHERE o.partition = 3 "
                  "GROUP BY c.tier")
        assert _same(reader_gw.sql(joined).rows(), world.oracle.execute(joined).fetchall())
        assert reader_gw.sql("SELECT count(*) FROM clicks").position == \
            Position.from_map({"clicks": world.log.last_offsets("clicks")})
    finally:
        reader_gw.close()


def test_a_reader_without_the_log_says_why(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=1)
    app = StreamsApp(StoreTopology([], streams=[ORDERS]), application_id="nolog", state_dir=tmp_path / "s")
    app.start()
    try:
        with pytest.raises(ge.StateStoreNotAvailableError, match="names no source log"):
            Gateway(app).sql("SELECT * FROM orders")
        with pytest.raises(ge.StateStoreNotAvailableError, match="app.json names no source log"):
            Gateway.open(tmp_path / "s").sql("SELECT * FROM orders")
    finally:
        app.close(30)
    with pytest.raises(ValueError, match="has the name of a store"):
        StreamsApp(StoreTopology([CUSTOMERS], streams=[StreamSpec("customers", "orders", ORDERS.key, ())]),
                   application_id="clash", state_dir=tmp_path / "c")


def test_http_answers_a_stream_query_with_its_position(world: World) -> None:
    with serve_gateway(world.gw) as server:
        http = Http(server.url)
        status, _, body = http.sql("SELECT key, offset FROM orders WHERE partition = 1 AND offset < 3 ORDER BY offset")
        assert status == 200
        assert [r[1] for r in body["rows"]] == [0, 1, 2]
        assert body["position"] == {"orders": {"1": 2}}
        status, _, body = http.sql("SELECT * FROM orders WHERE partition = 9")
        assert status == 404 and body["error"]["code"] == "PARTITION_FAILURE"


def test_a_relation_over_a_stream_runs_any_number_of_times(world: World) -> None:
    rel = world.gw.sql("SELECT key, amount FROM orders WHERE partition = 2").relation
    want = world.oracle.execute("SELECT count(*), sum(amount) FROM orders WHERE partition = 2").fetchone()
    for _ in range(2):
        got = rel.aggregate("count(*), sum(amount)").fetchall()[0]
        assert got[0] == want[0] and got[1] == pytest.approx(want[1])
    assert world.gw.sql("SELECT * FROM orders o1 JOIN orders o2 ON o1.key = o2.key AND o1.offset = o2.offset "
                        "WHERE o1.partition = 1 AND o2.partition = 1").rows().__len__() == world.log.end_offsets(
                            "orders")[1]  # a self-join reads the stream twice: bound as a table
    arrow = world.gw.sql("SELECT key, offset FROM orders WHERE partition = 3", arrow=True).to_arrow()
    assert arrow.num_rows == world.log.end_offsets("orders")[3] and arrow.schema.field("offset").type == "int64"


class _StoresOnly:
    """A source as the engine's contract allows one: state, catalog and IQv2 queries, and no stream reader."""

    def __init__(self, app: StreamsApp) -> None:
        self.app = app

    @property
    def state(self) -> Any:
        return self.app.state

    def catalog(self) -> Any:
        return self.app.catalog()

    def query(self, request: Any) -> Any:
        return self.app.query(request)


def test_a_source_without_a_stream_reader_says_so(world: World) -> None:
    gw = Gateway(_StoresOnly(world.app))
    try:
        assert gw.capabilities.stream_reader is None
        with pytest.raises(ge.NotSupported, match="stream 'orders' cannot be read here: this source has no reader"):
            gw.sql("SELECT count(*) FROM orders")
        assert gw.sql("SELECT count(*) FROM customers").rows() == [(len(world.customers),)]
    finally:
        gw.close()
