"""The session's settings: local masters return task results directly (the sink's toArrow of each batch), a
cluster keeps Spark's default, a caller's conf wins; and a local batch bigger than Spark's 1 MB default
result size still arrives whole through toArrow."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores.pipeline.session import DEFAULT_CONF, LOCAL_CONF, session_conf  # noqa: E402


def test_a_local_master_gets_direct_task_results_and_a_cluster_keeps_the_default() -> None:
    local = session_conf("local[2]")
    assert local["spark.task.maxDirectResultSize"] == LOCAL_CONF["spark.task.maxDirectResultSize"] == "128m"
    assert {k: local[k] for k in DEFAULT_CONF} == DEFAULT_CONF
    cluster = session_conf("spark://10.0.0.5:7077")
    assert "spark.task.maxDirectResultSize" not in cluster
    assert cluster == DEFAULT_CONF


def test_the_callers_conf_wins_over_both() -> None:
    conf = session_conf("local[*]", {"spark.task.maxDirectResultSize": "4m", "spark.sql.shuffle.partitions": "8"})
    assert conf["spark.task.maxDirectResultSize"] == "4m"
    assert conf["spark.sql.shuffle.partitions"] == "8"


def test_the_callers_jvm_flags_go_beside_ours() -> None:
    """The hosting's log4j flags must not drop the bigger thread stack (a stop under ingest printed a
    StackOverflowError from Spark's interruption check); the caller's flags come last, so they win."""
    key = "spark.driver.extraJavaOptions"
    assert "-Xss16m" in DEFAULT_CONF[key]
    conf = session_conf("local[2]", {key: "-Dlog4j.configurationFile=file:/x -Xss4m"})
    assert conf[key] == "-Xss16m -Dlog4j.configurationFile=file:/x -Xss4m"
    assert session_conf("local[2]", {key: DEFAULT_CONF[key]})[key] == DEFAULT_CONF[key]


def test_the_test_session_runs_with_it_and_a_multi_megabyte_result_arrives_whole(spark: Any) -> None:
    assert "-Xss16m" in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert spark.sparkContext.getConf().get("spark.task.maxDirectResultSize") == "128m"
    # two tasks of ~150k rows and ~3 MB of Arrow each: above Spark's default 1 MB, under ours
    df = spark.range(300_000, numPartitions=2).selectExpr("id", "format_string('c%07d', id) AS k")
    table = df.toArrow()
    assert table.num_rows == 300_000
    assert table.nbytes > 2 * 2**20
    assert sorted(table.column("id").to_pylist()) == list(range(300_000))
    assert table.column("k")[123_456].as_py() == "c0123456"
