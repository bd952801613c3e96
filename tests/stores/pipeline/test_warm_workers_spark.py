"""Spark's Python workers are warmed before a pipeline's first batch, and not again while they are still there."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores.pipeline import runtime  # noqa: E402


def test_python_workers_are_warmed_once_while_they_are_there(spark) -> None:  # noqa: ANN001 - the session fixture
    sc = spark.sparkContext
    runtime._warmed_at.pop(str(sc.applicationId), None)  # as after a start of Spark
    tracker = sc.statusTracker()

    def warm_jobs() -> int:
        return len(tracker.getJobIdsForGroup(runtime.WARM_JOB_GROUP))

    before = warm_jobs()
    assert runtime.warm_python_workers(spark) is True
    assert warm_jobs() == before + 1
    assert runtime.warm_python_workers(spark) is False  # just warmed: the workers are there, no job
    assert warm_jobs() == before + 1
    assert runtime.warm_python_workers(spark, now=time.monotonic() + runtime.WARM_FOR_S + 1) is True  # long ago
    assert warm_jobs() == before + 2
    assert sc.parallelize([1, 2]).count() == 2  # the thread's later jobs are not in the warm-up's group
    assert warm_jobs() == before + 2
