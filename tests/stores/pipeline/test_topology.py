"""Topology declarations: store kinds, SQL types, window sizes, and clear errors for what cannot work.

Needs the shared SparkSession (plans are analyzed) but starts no streaming query.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from stores.catalog.schema import SqlType, StoreKind
from stores.log.eventlog import EventLog

pytestmark = pytest.mark.spark


@pytest.fixture()
def topo(spark, tmp_path):
    from stores.pipeline.topology import Topology

    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=3)
    log.create_topic("users", partitions=2)
    return Topology(spark, log)


def test_store_kinds_columns_and_partitions(topo):
    orders = topo.stream("orders", value_schema="amount DOUBLE, item STRING")
    rev = topo.table("revenue", orders.groupBy("key").agg(F.sum("amount").alias("revenue"),
                                                          F.max("timestamp").alias("ts")),
                     key="key", timestamp="ts")
    assert rev.kind is StoreKind.TIMESTAMPED_KEY_VALUE
    assert (rev.key.name, rev.key.type) == ("key", SqlType.VARCHAR)
    assert [(c.name, c.type) for c in rev.values] == [("revenue", SqlType.DOUBLE)]
    assert rev.partitions == 3 and rev.source_topics == ("orders",)

    win = topo.table("per_min", orders.withWatermark("timestamp", "1 minute")
                     .groupBy(F.window("timestamp", "1 minute", "30 seconds"), "key").count(),
                     key="key", window="window", partitions=2)
    assert win.kind is StoreKind.WINDOW
    assert (win.window_size_ms, win.window_advance_ms, win.partitions) == (60_000, 30_000, 2)
    assert [(c.name, c.type) for c in win.values] == [("count", SqlType.BIGINT)]

    ses = topo.table("sessions", orders.withWatermark("timestamp", "1 minute")
                     .groupBy(F.session_window("timestamp", "5 minutes"), "key").count(),
                     key="key", window="session_window")
    assert (ses.kind, ses.gap_ms) == (StoreKind.SESSION, 300_000)

    users = topo.stream("users", value_schema="name STRING, age INT", key_type="bigint")
    latest = topo.table("users_latest", users, key="key")
    assert latest.kind is StoreKind.TIMESTAMPED_KEY_VALUE
    assert latest.key.type is SqlType.BIGINT
    assert [c.name for c in latest.values] == ["name", "age"]  # metadata columns are not values
    assert latest.source_topics == ("users",) and latest.partitions == 2

    ver = topo.versioned_table("user_history", users, key="key", timestamp="timestamp")
    assert ver.kind is StoreKind.VERSIONED
    assert [s.name for s in topo.store_specs()] == ["revenue", "per_min", "sessions", "users_latest",
                                                     "user_history"]


def test_declaration_errors_name_the_store_and_the_problem(topo, spark):
    from stores.pipeline.topology import TopologyError

    orders = topo.stream("orders", value_schema="amount DOUBLE")
    agg = orders.groupBy("key").agg(F.sum("amount").alias("s"))
    with pytest.raises(TopologyError, match="store 'a': no key column 'customer'; the DataFrame's columns are"):
        topo.table("a", agg, key="customer")
    topo.table("a", agg, key="key")
    with pytest.raises(TopologyError, match="store name 'a' is used twice"):
        topo.table("a", agg, key="key")
    with pytest.raises(TopologyError, match="output mode 'complete' is not supported .* use update"):
        topo.table("b", agg, key="key", output_mode="complete")
    with pytest.raises(TopologyError, match="output mode 'update' is not supported for a table of records"):
        topo.table("b", orders, key="key", output_mode="update")
    sess = orders.withWatermark("timestamp", "1 minute").groupBy(F.session_window("timestamp", "1 minute"),
                                                                 "key").count()
    with pytest.raises(TopologyError, match="session-window aggregation; use append"):
        topo.table("b", sess, key="key", window="session_window", output_mode="update")
    with pytest.raises(TopologyError, match="not streaming"):
        topo.table("b", spark.range(3).withColumnRenamed("id", "key"), key="key")
    with pytest.raises(TopologyError, match="expected a pyspark DataFrame"):
        topo.table("b", [1, 2], key="key")
    with pytest.raises(TopologyError, match="window column 'key' is string"):
        topo.table("b", agg, key="key", window="key")
    with pytest.raises(TopologyError, match="a window column needs a windowed aggregation"):
        topo.table("b", orders.withColumn("w", F.window("timestamp", "1 minute")), key="key", window="w")
    with pytest.raises(TopologyError, match="versioned table takes the records themselves"):
        topo.versioned_table("b", agg, key="key")
    with pytest.raises(TopologyError, match="timestamp column 'amount' is double"):
        topo.versioned_table("b", orders, key="key", timestamp="amount")
    with pytest.raises(TopologyError, match="column 'at' has type interval"):  # ARRAY, DECIMAL are fine (issue 16)
        topo.table("b", orders.withColumn("at", F.expr("INTERVAL 1 DAY")), key="key")
    with pytest.raises(TopologyError, match="store name 'bad name'"):
        topo.table("bad name", agg, key="key")
    with pytest.raises(TopologyError, match="reserved"):
        topo.table("b", orders.withColumnRenamed("amount", "rowtime"), key="key")
    assert [s.name for s in topo.store_specs()] == ["a"]  # nothing half-declared


@pytest.mark.parametrize("cap", [0, -5, 2.5, True, "1000"])
def test_a_topology_refuses_a_batch_cap_that_is_not_a_positive_integer(spark, tmp_path, cap):
    from stores.pipeline.topology import Topology, TopologyError

    with pytest.raises(TopologyError, match=f"max_records_per_batch must be a positive integer or None .*{cap!r}"):
        Topology(spark, EventLog(tmp_path / "log"), max_records_per_batch=cap)


def test_the_topology_batch_cap_applies_to_every_stream_that_sets_none(spark, tmp_path):
    from stores.pipeline.topology import Topology

    t = Topology(spark, EventLog(tmp_path / "log"), max_records_per_batch=1000)
    # the same effective arguments give the same DataFrame (one source, one shared query)
    assert t.stream("orders") is t.stream("orders", max_records_per_batch=1000)
    assert t.stream("orders") is not t.stream("orders", max_records_per_batch=7)
    assert t.max_records_per_batch == 1000 and Topology(spark, EventLog(tmp_path / "log")).max_records_per_batch is None


def test_topology_needs_a_log(spark):
    from stores.pipeline.topology import Topology

    with pytest.raises(TypeError, match="EventLog or a KafkaSource"):
        Topology(spark, 42)


def test_a_kafka_stream_has_the_event_logs_columns_without_the_connector_jar(spark):
    """No spark-sql-kafka jar here: the iqkafka Python source reads Kafka, with exactly the iqlog columns."""
    from stores import KafkaSource, Topology
    from stores.pipeline.topology import _native_kafka_available

    assert not _native_kafka_available(spark)
    t = Topology(spark, KafkaSource("127.0.0.1:9", partitions_override={"orders": 4}))
    df = t.stream("orders", value_schema="amount DOUBLE", key_type="bigint")
    assert df.isStreaming
    assert df.columns == ["key", "amount", "timestamp", "topic", "partition", "offset", "tombstone"]
    assert dict(df.dtypes)["key"] == "bigint"


def test_streams_are_queryable_under_their_topic_or_their_name(topo, caplog):
    """Issue 51: which streams SQL can read and how they are named (stores/pipeline/stream_specs.py)."""
    from stores.catalog.schema import Column
    from stores.catalog.streams import StreamSpec
    from stores.pipeline.declarations import TopologyError

    orders = topo.stream("orders", value_schema="amount DOUBLE, item STRING, tags ARRAY<STRING>", include_headers=True)
    topo.stream("orders", value_schema="amount DOUBLE, item STRING, tags ARRAY<STRING>", include_headers=True,
                max_records_per_batch=10)  # the same columns: the same stream
    users = topo.stream("users", value_schema="name STRING, age INT", key_type="bigint", name="people",
                        key_column="user_id")  # ksqlDB's `USER_ID BIGINT KEY`
    specs = {s.name: s for s in topo.stream_specs()}
    assert set(specs) == {"orders", "people"}
    o = specs["orders"]
    assert (o.topic, o.partitions, o.headers, o.key.type) == ("orders", 3, True, SqlType.VARCHAR)
    assert [(c.name, c.type.value) for c in o.values] == [("amount", "DOUBLE"), ("item", "VARCHAR"),
                                                         ("tags", "VARCHAR[]")]
    assert (specs["people"].topic, specs["people"].key, specs["people"].partitions) == \
        ("users", Column("user_id", SqlType.BIGINT), 2)
    assert "key" in users.columns  # the DataFrame's key column keeps its name
    assert StreamSpec.from_json(o.to_json()) == o

    # a default name yields to a store's, with a warning saying how to name the stream
    topo.table("orders", orders.groupBy("key").count(), key="key")
    assert {s.name for s in topo.stream_specs()} == {"people"}
    assert any("not queryable as 'orders'" in r.getMessage() for r in caplog.records)
    # a name given is the stream's: a store of that name, or a stream of other columns, is refused
    with pytest.raises(TopologyError, match="store name 'people' is a stream's"):
        topo.table("people", users, key="key")
    with pytest.raises(TopologyError, match="a store has that name"):
        topo.stream("orders", value_schema="amount DOUBLE", name="orders")
    with pytest.raises(TopologyError, match="used twice, with other columns"):
        topo.stream("orders", value_schema="amount DOUBLE", name="people")
    with pytest.raises(TopologyError, match="reads one topic, not 2"):
        topo.stream(["orders", "users"], value_schema="amount DOUBLE", name="both")
    with pytest.raises(TopologyError, match="stream 'bad': .*reserved"):
        topo.stream("users", value_schema="rowtime BIGINT", name="bad")
    with pytest.raises(TopologyError, match="key_column must be a name"):
        topo.stream("users", value_schema="age INT", name="bad", key_column="user id")
    with pytest.raises(TopologyError, match="duplicate column names"):
        topo.stream("users", value_schema="age INT", name="bad", key_column="AGE")
    topo.stream(["orders", "users"], value_schema="amount DOUBLE")  # several topics without a name: not queryable
    topo.stream("users", value_schema="rowtime BIGINT")  # a reserved column under the default name: not queryable
    assert {s.name for s in topo.stream_specs()} == {"people"}
