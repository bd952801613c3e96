"""The SparkSession iqgate pipelines run on: one per process, configured for small local state.

Why these settings: RocksDB with changelog checkpointing writes one small
changelog per batch instead of a full snapshot (cheap batches, and it is what
the ``statestore`` reader's change feed needs); two shuffle partitions suit
two cores and tiny batches; the UI and verbose logs cost start-up time and
noise; UTC keeps Spark's timestamps equal to the epoch ms the stores keep.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

__all__ = [
    "get_or_create", "DEFAULT_CONF", "LOCAL_CONF", "DAEMON_CONF", "session_conf", "register_sources",
    "check_workers_import_project", "WorkerImportError",
]

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # one block cache and write-buffer budget for every RocksDB instance (2 per stateful store and shuffle
    # partition): without it each instance sizes its own, and 100 stores' instances add up (issue 23 item 4)
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "256",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.python.worker.reuse": "true",
    # A query stopped in the middle of a batch (app.close under ingest) fails that batch with py4j's long message
    # (a Java and a Python traceback); Spark's StreamExecution.isInterruptionException runs a regex over it, which
    # on the JVM's default 1 MB thread stack overflowed: a StackOverflowError for the stream thread, ~1,000 lines
    # on the console. A bigger default stack (reserved, not resident) lets the check finish and the stop be quiet.
    "spark.driver.extraJavaOptions": "-Xss16m",
}

# Local masters only: a task's result up to this size comes back with its status update instead of through
# the block manager. toArrow() (the sink's read of each batch) returns every row as task results; above
# Spark's default 1 MB each result was put into the block manager and fetched back over its transfer
# service, in one JVM: ~0.1 s of toArrow's ~0.25 s premium over a noop write at 1M rows (issue 22).
# Spark caps it at spark.rpc.message.maxSize (128 MB); a cluster keeps the default (results cross the network).
LOCAL_CONF: dict[str, str] = {
    "spark.task.maxDirectResultSize": "128m",
}

# Spark's Python worker daemon, quiet when the JVM hangs up on a worker first (spark_daemon.py). Set only where
# the workers certainly import iqgate: a local master whose workers run this interpreter (elsewhere a daemon
# that cannot start would hide check_workers_import_project's instruction behind a worker start-up failure).
DAEMON_CONF: dict[str, str] = {
    "spark.python.daemon.module": "stores.pipeline.spark_daemon",
}

_lock = threading.Lock()


def get_or_create(master: str = "local[2]", conf: Mapping[str, str] | None = None,
                  app_name: str = "iqgate") -> SparkSession:
    """The process's SparkSession, created on first call with DEFAULT_CONF (and LOCAL_CONF on a local master)
    overlaid by ``conf``.

    Later calls return the same session (Spark allows one active context per
    JVM); ``conf`` then only applies runtime-settable SQL options.
    """
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            spark = active
            _apply_runtime(spark, conf)
        else:
            # Workers must run the same interpreter as the driver (the venv's). A context created from Python
            # takes its workers' interpreter from PYSPARK_PYTHON only (spark.pyspark.python is applied by
            # spark-submit, not here): an explicit conf is passed on through the environment.
            explicit = (conf or {}).get("spark.pyspark.python")
            if explicit:
                os.environ["PYSPARK_PYTHON"] = str(explicit)
            else:
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            builder = SparkSession.builder.master(master).appName(app_name)
            for k, v in session_conf(master, conf).items():
                builder = builder.config(k, v)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
        register_sources(spark)
        return spark


def session_conf(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a new session gets on ``master``: DEFAULT_CONF, LOCAL_CONF on a local master (and DAEMON_CONF
    where its workers run this interpreter), then ``conf``."""
    local = LOCAL_CONF if master.startswith("local") else {}
    workers = (conf or {}).get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable
    daemon = DAEMON_CONF if local and workers == sys.executable else {}
    out = {**DEFAULT_CONF, **local, **daemon, **(conf or {})}
    key = "spark.driver.extraJavaOptions"
    if conf and key in conf and conf[key] != DEFAULT_CONF[key]:  # the caller's JVM flags beside ours, theirs last
        out[key] = f"{DEFAULT_CONF[key]} {conf[key]}"
    return out


def register_sources(spark: SparkSession) -> None:
    """Register the ``iqlog`` and ``iqkafka`` Python data sources (idempotent, cheap)."""
    from .iqlog_source import IqLogDataSource
    from .kafka_source import IqKafkaDataSource

    for source in (IqLogDataSource, IqKafkaDataSource):
        _register_with_a_concurrent_env(spark, source)


def _register_with_a_concurrent_env(spark: SparkSession, source: type) -> None:
    """``spark.dataSource.register(source)``, but the source's environment map is a ConcurrentHashMap.

    Why: Spark (4.x) hands every function it derives from a registered Python data source the *same*
    ``envVars`` map, a plain ``java.util.HashMap``, and each streaming query's source runner puts keys into
    it when it starts (``PythonStreamingSourceRunner.init``), on that query's thread. Queries that start
    together (``iqgate serve`` restarting its stores, fault restarts) raced on it and could leave it corrupt
    (its size no longer its number of entries); from then on every task that carried it failed to
    deserialize with ``java.io.OptionalDataException`` at ``HashMap.readObject``, for the life of the
    process (CI saw it in three runs). A ConcurrentHashMap takes concurrent puts and serializes whole.
    Falls back to the public call where this PySpark lacks the pieces.
    """
    try:
        from pyspark.core.rdd import _prepare_for_python_RDD
    except ImportError:  # pragma: no cover - another PySpark layout
        spark.dataSource.register(source)  # type: ignore[arg-type]
        return
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None
    pickled, broadcast_vars, env, includes = _prepare_for_python_RDD(sc, source)
    safe_env = jvm.java.util.concurrent.ConcurrentHashMap()
    for k, v in dict(env).items():
        safe_env.put(str(k), str(v))
    function = jvm.SimplePythonFunction(bytearray(pickled), safe_env, includes, sc.pythonExec, sc.pythonVer,
                                        broadcast_vars, sc._javaAccumulator)
    udpds = getattr(jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")
    spark._jsparkSession.dataSource().registerPython(source.name(), udpds(function))  # type: ignore[attr-defined]


_checked: set[str] = set()


class WorkerImportError(RuntimeError):
    """Spark's Python workers cannot import iqgate: the message says exactly what to set."""


def check_workers_import_project(spark: SparkSession) -> None:
    """Run one tiny task that imports ``stores`` in a Python worker, once per SparkContext.

    Without it, a session whose workers run another interpreter (a user's own SparkSession, a cluster
    whose executors lack iqgate) fails seconds later inside a streaming query with a bare
    ``ModuleNotFoundError: No module named 'stores'`` from a worker.
    """
    sc = spark.sparkContext
    key = sc.applicationId
    if key in _checked:
        return
    try:
        sc.parallelize([0], 1).map(_import_stores).collect()
    except Exception as exc:  # noqa: BLE001 - the worker's error arrives as a Py4J/PySpark exception
        text = str(exc)
        if "No module named" not in text and "ModuleNotFoundError" not in text:
            raise
        python = getattr(sc, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON") or "python3"
        conf_python = sc.getConf().get("spark.pyspark.python", None)
        ignored = (f" (spark.pyspark.python={conf_python!r} is applied only by spark-submit: a session created "
                   "from Python takes its workers' interpreter from PYSPARK_PYTHON, or iqgate's get_or_create)"
                   if conf_python and conf_python != python else "")
        raise WorkerImportError(
            f"Spark's Python workers cannot import iqgate (they run {python!r}{ignored}, the driver runs "
            f"{sys.executable!r}). Set PYSPARK_PYTHON before the session starts, or create it with "
            f"stores.pipeline.session.get_or_create(conf={{'spark.pyspark.python': {sys.executable!r}}}), to an "
            f"interpreter where iqgate is installed; on a cluster install iqgate (pip install iqgate[spark]) in the "
            f"executors' Python. Worker error: "
            f"{next((ln for ln in text.splitlines() if 'No module named' in ln), text.splitlines()[0])}") from None
    _checked.add(key)


def _import_stores(_: Any) -> str:
    import stores

    return stores.__name__


def _apply_runtime(spark: SparkSession, conf: Mapping[str, Any] | None) -> None:
    for k, v in (conf or {}).items():
        if k.startswith("spark.sql."):
            spark.conf.set(k, str(v))
