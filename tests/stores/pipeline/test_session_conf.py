"""The session's settings: local masters return task results directly (the sink's toArrow of each batch), a
cluster keeps Spark's default, a caller's conf wins; and a local batch bigger than Spark's 1 MB default
result size still arrives whole through toArrow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores.pipeline.session import DAEMON_CONF, DEFAULT_CONF, LOCAL_CONF, session_conf  # noqa: E402


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


def test_spark_starts_our_quiet_daemon_only_where_its_workers_run_this_interpreter(monkeypatch: Any) -> None:
    """Elsewhere (a cluster, another interpreter) the workers may not import iqgate, and check_workers_import_
    project's instruction must not be hidden behind a daemon that cannot start."""
    import sys

    key = "spark.python.daemon.module"
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert session_conf("local[2]")[key] == DAEMON_CONF[key] == "stores.pipeline.spark_daemon"
    assert session_conf("local[2]", {"spark.pyspark.python": sys.executable})[key] == DAEMON_CONF[key]
    assert key not in session_conf("spark://10.0.0.5:7077")
    assert key not in session_conf("local[2]", {"spark.pyspark.python": "/usr/bin/python3"})
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python")
    assert key not in session_conf("local[2]")
    assert session_conf("local[2]", {key: "pyspark.daemon"})[key] == "pyspark.daemon"  # the caller's wins


def test_the_test_sessions_workers_are_forked_by_our_daemon(spark: Any) -> None:
    def main_module(_: int) -> str:
        import sys

        spec = getattr(sys.modules["__main__"], "__spec__", None)
        return spec.name if spec is not None else repr(sys.modules["__main__"])

    assert spark.sparkContext.parallelize([0, 1], 2).map(main_module).collect() == ["stores.pipeline.spark_daemon"] * 2


EARLY_ENDS = """
import sys
sys.path.insert(0, {root!r})
import pyarrow as pa
from stores.pipeline.session import get_or_create

def batches(it):
    for _ in it:
        for _ in range(50):
            yield pa.RecordBatch.from_pydict({{"id": pa.array(range(20_000))}})

spark = get_or_create("local[2]")
df = spark.range(0, 100, numPartitions=2).mapInArrow(batches, "id long")
print("rows", [len(df.limit(1).collect()) for _ in range(5)], flush=True)
spark.stop()
"""


def test_reads_that_end_early_leave_no_worker_traceback_on_the_console(tmp_path: Path) -> None:
    """A LIMIT met by the first of many Arrow batches: the JVM closes each worker's socket before its last flush.

    With PySpark's own daemon (``spark.python.daemon.module=pyspark.daemon``) this script printed a
    ``BrokenPipeError`` traceback from ``pyspark/daemon.py`` for each of its reads (5 of 5; 20 of 20 with 20
    reads; 2026-12-06); the same traceback showed on ``iqgate demo``'s console. It runs a Spark of its own:
    the JVM copies the workers' stderr to the console it was started with, which a test cannot capture in
    this process.
    """
    import subprocess
    import sys

    code = EARLY_ENDS.format(root=str(Path(__file__).resolve().parents[3]))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                           cwd=str(tmp_path))
    assert child.returncode == 0, child.stderr[-3000:]
    assert "rows [1, 1, 1, 1, 1]" in child.stdout
    assert "Traceback" not in child.stderr and "BrokenPipeError" not in child.stderr, child.stderr[-3000:]
