"""Shared fixtures. ``spark`` is session-scoped and created lazily: runs without Spark tests never start a JVM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole run (start-up costs ~6 s; see spark-notes.md)."""
    pytest.importorskip("pyspark")
    from stores.spark_session import get_or_create

    session = get_or_create(conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    for q in session.streams.active:  # never leave a query running past the run
        try:
            q.stop()
        except Exception:  # noqa: BLE001
            pass
    session.stop()
