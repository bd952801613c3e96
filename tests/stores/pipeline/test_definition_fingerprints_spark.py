"""A store's definition fingerprint depends on its declaration only (issue 20), on a real Spark session, no query
started: two builds of the same declarations agree, whatever the run gave them (expression ids, stream ids, the
JVM's object hashes, the broker's address, the order stores and streams were declared in), over the embedded log
and over Kafka; and stores that do not read the stream's tombstone column keep the fingerprint they had before
streams gained it (issue 51), so an upgrade leaves them alone.

The cluster test (``test_spark_beyond_one_machine``) once saw ``revenue_per_min`` "changed (the query's plan)"
between ``examples/shop_pipeline.py`` and ``shop_v2_pipeline.py``: a source leaf's ``PythonTable@634c8`` (an
identity hash of 5 hex digits, about one build in two thousand) was left in the normalized plan.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from stores import KafkaSource, Topology  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.declarations import _plan_text  # noqa: E402
from stores.pipeline.definitions import definition_of, normalize_plan  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

UNCHANGED = ("revenue_per_min", "last_order")  # declared alike in both files
# Object.toString of a JVM object in a plan: its class name, "@", its identity hash in hex (1 to 8 digits)
JVM_OBJECT = re.compile(r"((?:[a-z_]\w*\.)+[A-Z][\w$]*)@[0-9a-f]{1,8}\b")


def _v2() -> Any:
    spec = importlib.util.spec_from_file_location("shop_v2_fp", Path(__file__).with_name("shop_v2_pipeline.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


v2 = _v2()


@pytest.fixture(params=["iqlog", "kafka"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "iqlog":
        log = EventLog(tmp_path / "log")
        log.create_topic("orders", partitions=4)
        yield log
        return
    src = KafkaSource(request.getfixturevalue("kafka_broker").bootstrap_servers)
    src.create_topic("orders", 4, exist_ok=True)
    try:
        yield src
    finally:
        src.close()


def _reordered(spark: Any, src: Any) -> Topology:
    """The shop's unchanged stores declared after another stream and store, and in the other order."""
    t = Topology(spark, src)
    other = t.stream("orders", value_schema="item STRING")  # another stream first: the stream ids move on
    t.table("items", other.groupBy("item").agg(F.count("*").alias("n")), key="item")
    orders = t.stream("orders", value_schema=shop.VALUE_SCHEMA)
    t.versioned_table("last_order", orders, key="key", timestamp="timestamp")
    t.table("revenue_per_min",
            orders.withWatermark("timestamp", shop.WATERMARK)
                  .groupBy(F.window("timestamp", "1 minute"), "key")
                  .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders")),
            key="key", window="window")
    return t


def test_builds_of_the_same_declarations_have_the_same_fingerprints(spark: Any, source: Any) -> None:
    """examples/shop_pipeline.py and shop_v2_pipeline.py (new_store=False) in one process, as the cluster test's
    upgrade does, and the same stores declared in another order: only ``revenue`` (changed) differs."""
    builds = [shop.build(spark, source), v2.build(spark, source, new_store=False), _reordered(spark, source)]
    defs = [t.store_definitions() for t in builds]
    for store in UNCHANGED:
        assert defs[0][store] == defs[1][store] == defs[2][store], store
    assert defs[0]["revenue"]["fingerprint"] != defs[1]["revenue"]["fingerprint"]  # a real change is still seen


def test_a_fingerprint_does_not_depend_on_the_jvms_object_hashes(spark: Any, source: Any) -> None:
    """Every JVM object in each store's plan given another identity hash than the run gave it, of 1 to 8 digits."""
    for decl in shop.build(spark, source).declarations():
        plan = _plan_text(decl.df)
        assert "@" not in normalize_plan(plan), normalize_plan(plan)
        want = definition_of(decl, plan)["fingerprint"]
        for hash_ in ("0", "1f", "634c8", "d0c1a", "2f3d5d5", "7bdd7341"):
            other = JVM_OBJECT.sub(lambda m, h=hash_: f"{m.group(1)}@{h}", plan)
            assert other != plan or decl.shape == "versioned"  # a bare stream's plan text is its source's name
            assert definition_of(decl, other)["fingerprint"] == want, (decl.spec.name, hash_)


def _shapes(t: Topology) -> dict[str, Any]:
    """One store of each kind that does not read the tombstone column, declared on ``t``."""
    orders = t.stream("orders", value_schema=shop.VALUE_SCHEMA)
    headed = t.stream("orders", value_schema=shop.VALUE_SCHEMA, include_headers=True)
    t.table("agg", orders.groupBy("key").agg(F.sum("amount").alias("s")), key="key")
    t.table("having", orders.groupBy("key").agg(F.sum("amount").alias("s")).filter("s > 10"), key="key")
    t.table("win", orders.withWatermark("timestamp", "1 minute").groupBy(F.window("timestamp", "1 minute"), "key")
            .agg(F.count("*").alias("n")), key="key", window="window")
    t.table("sess", orders.withWatermark("timestamp", "1 minute")
            .groupBy(F.session_window("timestamp", "30 seconds"), "key").agg(F.count("*").alias("n")),
            key="key", window="session_window")
    t.session_table("open", orders, gap="30 seconds", sums={"total": "amount"})
    t.session_table("open_headed", headed, gap="30 seconds", maxs={"top": "amount"})
    t.table("derived", orders.withColumn("double", F.col("amount") * 2).groupBy("key")
            .agg(F.max("double").alias("m")), key="key")
    t.table("projected", orders.select("key", "amount", "timestamp"), key="key", tombstones="all_null")
    return {d.spec.name: d for d in t.declarations()}


def test_stores_that_do_not_read_the_tombstone_column_keep_their_fingerprint(spark: Any, source: Any) -> None:
    """The plan each store had before streams gained the column (issue 51) is its plan without it: the same print,
    so upgrading to issue 51 does not rebuild them (a session table's function lists every column: it did)."""
    for name, decl in _shapes(Topology(spark, source)).items():
        plan = _plan_text(decl.df)
        assert re.search(r"tombstone#\d+", plan), (name, plan)
        before = re.sub(r", tombstone#\d+", "", plan)
        assert normalize_plan(before) == normalize_plan(plan), name
        assert definition_of(decl, before)["fingerprint"] == definition_of(decl, plan)["fingerprint"], name
