"""Changelogs in Kafka (a real broker: Tansu): the writer's records, a replay after a crash, a replica restoring."""

from __future__ import annotations

import time
import uuid

import pytest

from stores.changelog import ChangelogRecord, KafkaChangelog, changelog_topic
from stores.iqv2.position import Position
from stores.replica import Replica

from .helpers import batch, contents, kv_spec, position

pytest.importorskip("confluent_kafka")


def wait_for(cond, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_kafka_changelog_replica_and_replay(kafka_broker, tmp_path) -> None:
    app_id = f"shop{uuid.uuid4().hex[:8]}"
    cl = KafkaChangelog(kafka_broker.bootstrap_servers)
    from stores.app.streams import StoreTopology, StreamsApp

    app = StreamsApp(StoreTopology([kv_spec()]), application_id=app_id, state_dir=str(tmp_path / "active"))
    app.start()
    try:
        from stores.changelog import ChangelogWriter

        w = ChangelogWriter(app.writer("revenue"), cl, app_id)
        for i in range(3):
            w.write_batch(i, batch(i), position(i))
        topic = changelog_topic(app_id, "revenue")
        assert cl.list_topics()[topic] == 3
        last = cl.last(topic, 1)
        assert last is not None and last.record.batch_id == 2
        assert last.record.position == Position.from_map(position(2))
        # a restarted writer reads the changelog's tail: the replay of batch 2 logs nothing new
        w2 = ChangelogWriter(app.writer("revenue"), KafkaChangelog(kafka_broker.bootstrap_servers), app_id)
        w2.write_batch(2, batch(2), position(2))
        assert cl.last(topic, 1).offset == last.offset
        with Replica(KafkaChangelog(kafka_broker.bootstrap_servers), app_id, tmp_path / "replica") as rep:
            wait_for(rep.caught_up)
            for i in range(3, 6):
                w2.write_batch(i, batch(i), position(i))
            wait_for(lambda: all(contents(tmp_path / "active", kv_spec(), p) == contents(tmp_path / "replica",
                                                                                          kv_spec(), p)
                                 for p in range(3)))
            assert {lag.current_offset for lag in rep.lags()} == {5}
    finally:
        app.close()
        cl.close()


def test_records_round_trip_through_kafka_headers() -> None:
    rec = ChangelogRecord(kv_spec(), 7, Position.from_map(position(7)), 123, _rows())
    value, headers = rec.to_kafka()
    back = ChangelogRecord.from_kafka(value, headers, "t/0@0")
    assert (back.spec, back.batch_id, back.position, back.observed) == (rec.spec, 7, rec.position, 123)
    assert back.rows.equals(rec.rows)


def _rows():
    import pyarrow as pa

    return pa.table({"k": ["a", "b"], "v0": [1.0, 2.0], "v1": [1, 2]})


