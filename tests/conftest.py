"""Shared fixtures. ``spark`` is session-scoped and created lazily: runs without Spark tests never start a JVM."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

# The client distribution (clients/python) is installed into the venv as a copy; processes the tests start
# (CLI servers, workers) must import the checkout's source as the tests themselves do (pytest's pythonpath).
_CLIENT_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "clients", "python")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_CLIENT_SRC, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole run (start-up costs ~6 s; see spark-notes.md)."""
    # No importorskip: Spark tests must run (or fail), never be skipped quietly.
    from stores.pipeline.session import get_or_create

    session = get_or_create(conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    for q in session.streams.active:  # never leave a query running past the run
        try:
            q.stop()
        except Exception:  # noqa: BLE001
            pass
    session.stop()


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process without interpreter teardown, after pytest has printed its summary.

    DuckDB 2.0's nanobind bindings print a "leaked instances" report for their
    own module objects at teardown (reproduced without our code involved once
    daemon threads are alive), burying pytest's summary line. Everything the
    tests own is closed by their fixtures; set IQGATE_TEST_TEARDOWN=1 to keep
    the normal teardown.
    """
    if _EXIT_STATUS and os.environ.get("IQGATE_TEST_TEARDOWN") != "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Kafka-protocol broker (Tansu, memory storage) on a free 127.0.0.1 port for the whole run."""
    from stores.log.broker import LocalBroker

    with LocalBroker(log_path=tmp_path_factory.mktemp("kafka") / "broker.log") as broker:
        yield broker
