"""A range set in the wrong order: empty, as Kafka answers it, with Kafka's warning at most once per store a minute."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from stores.iqv2.query import RangeQuery
from stores.iqv2.request import StateQueryRequest
from tests.stores.changelog.helpers import batch, kv_spec, open_app, position


def test_an_inverted_range_is_empty_and_warned_once_not_per_call(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    name = f"inv{uuid.uuid4().hex[:8]}"  # the warning is throttled per store name, process-wide
    app = open_app(tmp_path, kv_spec(name))
    try:
        app.writer(name).write_batch(0, batch(0), position(0))
        with caplog.at_level(logging.WARNING, logger="stores.engine.kv"):
            for _ in range(20):  # what a client sending `WHERE customer BETWEEN 'z' AND 'a'` in a loop causes
                res = app.query(StateQueryRequest.in_store(name).with_query(RangeQuery.with_range("z", "a")))
                assert len(res.partition_results) == 3
                assert all(r.is_success and list(r.result) == [] for r in res.partition_results.values())
            ordered = app.query(StateQueryRequest.in_store(name).with_query(RangeQuery.with_range("a", "z")))
            assert sum(len(list(r.result)) for r in ordered.partition_results.values()) > 0
    finally:
        app.close()
    warned = [r.getMessage() for r in caplog.records if "Returning empty iterator" in r.getMessage()]
    assert len(warned) == 1, warned  # 60 calls (20 statements x 3 partitions) would have logged 60 lines
    assert f"on store {name} partition" in warned[0] and "wrong order" in warned[0]
