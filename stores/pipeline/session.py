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

__all__ = ["get_or_create", "DEFAULT_CONF", "register_sources"]

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.python.worker.reuse": "true",
}

_lock = threading.Lock()


def get_or_create(master: str = "local[2]", conf: Mapping[str, str] | None = None,
                  app_name: str = "iqgate") -> SparkSession:
    """The process's SparkSession, created on first call with DEFAULT_CONF overlaid by ``conf``.

    Later calls return the same session (Spark allows one active context per
    JVM); ``conf`` then only applies runtime-settable SQL options.
    """
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            spark = active
            _apply_runtime(spark, conf)
        else:
            # Workers must run the same interpreter as the driver (the venv's).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            builder = SparkSession.builder.master(master).appName(app_name)
            for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
                builder = builder.config(k, v)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
        register_sources(spark)
        return spark


def register_sources(spark: SparkSession) -> None:
    """Register the ``iqlog`` Python data source (idempotent, cheap)."""
    from .iqlog_source import IqLogDataSource

    spark.dataSource.register(IqLogDataSource)


def _apply_runtime(spark: SparkSession, conf: Mapping[str, Any] | None) -> None:
    for k, v in (conf or {}).items():
        if k.startswith("spark.sql."):
            spark.conf.set(k, str(v))
