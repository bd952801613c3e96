"""Issue 51's declarations on a real Spark session, no query started: what is refused (with the fix), what a
definition records for upgrades, and conditions evaluated on the driver against Spark's own filter."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    BooleanType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from stores.catalog.decimals import DecimalType as CatalogDecimal  # noqa: E402
from stores.catalog.decimals import encode_decimal  # noqa: E402
from stores.catalog.schema import SqlType  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.conditions import compile_condition  # noqa: E402
from stores.pipeline.definitions import definition_of, normalize_plan  # noqa: E402
from stores.pipeline.topology import Topology, TopologyError  # noqa: E402


@pytest.fixture(scope="module")
def topo(spark, tmp_path_factory):  # noqa: ANN001, ANN201
    log = EventLog(tmp_path_factory.mktemp("decl") / "log")
    for topic in ("test", "test_table", "regions", "orders"):
        log.create_topic(topic, partitions=1)
    return Topology(spark, log)


def _streams(t: Topology):  # noqa: ANN202
    return (t.stream("test", value_schema="name STRING, value BIGINT, region STRING", key_type="bigint"),
            t.stream("test_table", value_schema="f1 STRING, f2 BIGINT", key_type="bigint"),
            t.stream("regions", value_schema="rname STRING, zone STRING"),
            t.stream("orders", value_schema="user BIGINT, amount BIGINT, m MAP<STRING, BIGINT>"))


@pytest.mark.parametrize("call, message", [
    (lambda t, a, b, r, o: t.join_table("j1", a, a.withColumnRenamed("value", "v2")),
     "column 'name' is on two joined inputs .*withColumnRenamed"),
    (lambda t, a, b, r, o: t.join_table("j2", a, r, on="nope"), "on='nope' must name a value column of an earlier"),
    (lambda t, a, b, r, o: t.join_table("j3", a, r, on="region", how="full"),
     "a foreign-key join is inner or left \\(KIP-213\\), got 'full'"),
    (lambda t, a, b, r, o: t.join_table("j4", o, r, on="user"), "foreign key 'user' is BIGINT but the right key is "
                                                                 "VARCHAR; cast one of them"),
    (lambda t, a, b, r, o: t.join_table("j5", a, r), "a join on the key needs keys of one type; the left key is "
                                                     "BIGINT and the right key VARCHAR"),
    (lambda t, a, b, r, o: t.join_table("j6", a, b.groupBy("key").count()), "the right input is an aggregation"),
    (lambda t, a, b, r, o: t.join_table("j7", a, b, how="outer"), "how must be one of inner, left, right, full"),
    (lambda t, a, b, r, o: t.join_table("j8", a, b, columns=["f9"]), "columns: 'f9' is not a value column"),
    (lambda t, a, b, r, o: t.join_table("j9", a, b, where="f9 > 1"), "where f9 > 1 cannot be read over the columns"),
    (lambda t, a, b, r, o: t.join_table("j10", a, b, where="upper(name) = 'X'"),
     "where: 'upper\\(name\\) = 'X'' \\(EqualTo\\)|is not supported on the driver"),
    (lambda t, a, b, r, o: t.join_table("j11", a.select("key", "name", "timestamp"), b),
     "dropped it .*select\\(\\.\\.\\., 'tombstone'\\)\\), or pass tombstones='all_null'"),
    (lambda t, a, b, r, o: t.stream_table_join("j12", o, a, on="user", how="full"),
     "a stream-table join is inner or left, got 'full'"),
    (lambda t, a, b, r, o: t.join_table("j13", a, [b, r], on=[None, "region"], how=["full", "left"]),
     "right and full joins are joins on the key"),
    (lambda t, a, b, r, o: t.join_table("j14", a, [b, r], on=[None]), "on lists 1 item\\(s\\) for 2 joined input"),
    (lambda t, a, b, r, o: t.table_aggregate("a1", o, group_by="user", topks={"t": ("amount", 0)}),
     "topks\\['t'\\] must be \\(column, k\\) with k a positive integer"),
    (lambda t, a, b, r, o: t.table_aggregate("a2", o, group_by="user", collect_lists={"ms": "m"}),
     "column 'm' is map<string,bigint>; collect_list keeps lists of scalar values"),
    (lambda t, a, b, r, o: t.table_aggregate("a3", o, group_by="user", having="nope > 1"),
     "having nope > 1 cannot be read over the columns"),
    (lambda t, a, b, r, o: t.table_aggregate("a4", o, group_by="user", where="nope > 1"),
     "where nope > 1 cannot be read over the columns"),
    (lambda t, a, b, r, o: t.table("t1", o.select("key", "amount"), key="key"), "has dropped it"),
    (lambda t, a, b, r, o: t.versioned_table("t2", o, key="key", tombstones="none"),
     "tombstones must be one of 'kafka', 'all_null', got 'none'"),
])
def test_bad_declarations_are_refused_naming_the_fix(topo, call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(TopologyError, match=message):
        call(topo, *_streams(topo))


def test_what_declarations_make(topo) -> None:  # noqa: ANN001
    test, test_table, regions, orders = _streams(topo)
    spec = topo.table_aggregate("agg", test.withColumn("band", F.col("value") % 3), group_by=["region", "band"],
                                count="n", collect_sets={"names": "name"}, topk_distincts={"top": ("value", 2)},
                                mins={"first": "name"}, having="n > 1 AND first IS NOT NULL")
    assert [c.name for c in spec.key_columns()] == ["region", "band"] and spec.composite
    assert {c.name: c.type.value for c in spec.values} == {"n": "BIGINT", "names": "VARCHAR[]", "top": "BIGINT[]",
                                                          "first": "VARCHAR"}
    j = topo.join_table("fk", orders.drop("m"), [test, regions], on=["user", "region"], how=["inner", "left"],
                        columns={"who": "name", "zone": "zone"})
    assert (j.kind.value, j.key.name, [c.name for c in j.values]) == ("timestamped_key_value", "key", ["who", "zone"])
    assert set(j.source_topics) == {"orders", "test", "regions"}
    old = topo.table("old_rule", test.select("key", "name", "timestamp"), key="key", tombstones="all_null")
    assert [c.name for c in old.values] == ["name"]


def test_definitions_fingerprint_what_changes_a_store(topo) -> None:  # noqa: ANN001
    """The tombstone column is taken out of the plan text (stores that do not read it keep their fingerprint);
    a table of records records Kafka's rule (rebuilt once); a join's inputs, steps and columns are in it."""
    test, test_table, _regions, _orders = _streams(topo)
    agg = test.groupBy("key").agg(F.sum("value").alias("total"))
    plan = str(agg._jdf.queryExecution().analyzed().toString())
    assert re.search(r"offset#\d+L, tombstone#\d+", plan)
    before = re.sub(r", tombstone#\d+", "", plan)  # the same plan before streams had the column
    assert normalize_plan(plan) == normalize_plan(before)
    decls = {}
    for name, kwargs in (("latest_k", {}), ("latest_a", {"tombstones": "all_null"})):
        topo.table(name, test, key="key", **kwargs)
        decls[name] = topo.declarations()[-1]
    kafka = definition_of(decls["latest_k"], plan)
    assert kafka["tombstones"] == "kafka" and "tombstones" not in definition_of(decls["latest_a"], plan)
    prints = set()
    for name, how in (("d_inner", "inner"), ("d_left", "left")):
        topo.join_table(name, test, test_table, how=how)
        d = topo.declarations()[-1]
        definition = definition_of(d, str(d.df._jdf.queryExecution().analyzed().toString()))
        assert definition["join"]["steps"] == [[how, None]]
        prints.add(definition["fingerprint"])
    assert len(prints) == 2


CONDITIONS = [
    "a > 2 AND b <= 1.5", "s IN ('x', NULL)", "s IN ('x', 'y')", "NOT (a = 1) OR s IS NULL", "a BETWEEN 1 AND 3",
    "a * 2 + 1 > b", "d > 1.5", "d = 2", "t >= TIMESTAMP '2024-01-01 00:00:00'", "flag", "NOT flag",
    "a / 2 > 1", "-a < 0", "a <=> NULL", "s <=> 'x'", "a <> 3 AND (b IS NOT NULL OR flag)", "a IS NULL",
]


def test_conditions_on_the_driver_keep_exactly_the_rows_spark_keeps(spark) -> None:  # noqa: ANN001
    """Every condition compiled to pyarrow (conditions.py) against Spark's own filter over the same rows."""
    schema = StructType([StructField("a", LongType()), StructField("b", DoubleType()), StructField("s", StringType()),
                         StructField("d", DecimalType(6, 2)), StructField("t", TimestampType()),
                         StructField("flag", BooleanType())])
    utc = timezone.utc
    rows = [(1, 0.5, "x", Decimal("1.50"), datetime(2023, 12, 31, tzinfo=utc), True),
            (3, 1.5, "y", Decimal("2.00"), datetime(2024, 1, 1, tzinfo=utc), False),
            (None, None, None, None, None, None), (5, 20.0, "x", Decimal("-1.25"), datetime(2024, 6, 1, tzinfo=utc), None),
            (2, None, "z", Decimal("1.51"), None, True), (-4, -1.0, None, Decimal("0.00"), datetime(2020, 1, 1, tzinfo=utc),
                                                            False)]
    df = spark.createDataFrame(rows, schema).withColumn("i", F.monotonically_increasing_id())
    d62 = CatalogDecimal(6, 2)
    fields = {"a": (LongType(), SqlType.BIGINT), "b": (DoubleType(), SqlType.DOUBLE), "s": (StringType(), SqlType.VARCHAR),
              "d": (DecimalType(6, 2), d62), "t": (TimestampType(), SqlType.TIMESTAMP),
              "flag": (BooleanType(), SqlType.BOOLEAN)}
    stored = pa.table({  # the stores' stored forms: epoch ms, 0/1, the 16 DECIMAL bytes
        "a": pa.array([r[0] for r in rows], pa.int64()), "b": pa.array([r[1] for r in rows], pa.float64()),
        "s": pa.array([r[2] for r in rows], pa.string()),
        "d": pa.array([None if r[3] is None else encode_decimal(d62, r[3]) for r in rows], pa.binary()),
        "t": pa.array([None if r[4] is None else int(r[4].timestamp() * 1000) for r in rows], pa.int64()),
        "flag": pa.array([None if r[5] is None else int(r[5]) for r in rows], pa.int64())})
    order = [r.i for r in df.select("i").collect()]
    for text in CONDITIONS:
        cond = compile_condition(spark, "conds", "where", text, fields)
        want = {order.index(r.i) for r in df.filter(text).select("i").collect()}
        got = {i for i, keep in enumerate(cond.keep(stored.select(list(cond.columns)) if cond.columns else
                                                    pa.table({"_": pa.nulls(len(rows))})).to_pylist()) if keep}
        assert got == want, text


def test_a_side_state_behind_its_checkpoint_is_found_out(tmp_path: Path) -> None:
    from stores.pipeline.side_state import SideState, behind

    assert behind(tmp_path / "none.db", None) is None  # nothing committed: a fresh store
    assert "is at batch None but its checkpoint committed batch 3" in behind(tmp_path / "none.db", 3)
    state = SideState(tmp_path / "s.db", [], "store 'x'")
    with state.batch(0) as (_con, fresh):
        assert fresh
    with state.batch(0) as (_con, fresh):  # a replay
        assert not fresh
    with state.batch(1):
        pass
    state.close()
    assert behind(tmp_path / "s.db", 1) is None
    assert "is at batch 1 but its checkpoint committed batch 2" in behind(tmp_path / "s.db", 2)
