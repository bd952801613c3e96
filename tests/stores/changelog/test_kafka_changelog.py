"""Changelogs in Kafka (a real broker: Tansu): the writer's records, a replay after a crash, a replica restoring."""

from __future__ import annotations

import time
import uuid

import pytest

from stores.changelog import ChangelogRecord, KafkaChangelog, changelog_topic
from stores.iqv2.position import Position
from stores.log.kafka import KafkaError
from stores.replica import Replica

from .helpers import batch, contents, kafka_client_threads, kafka_threads_beyond, kv_spec, position

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
            wait_for(lambda: {lag.offset_lag for lag in rep.lags()} == {0})  # read past the last commit marker
            lags = rep.lags()
            assert {lag.current_offset for lag in lags} == {10}  # 6 records, each followed by its commit marker
            assert {lag.position for lag in lags} == {Position.from_map(position(5))}
    finally:
        app.close()
        cl.close()


def test_close_ends_every_producer_and_what_comes_later_fails_cleanly(kafka_broker) -> None:
    before = kafka_client_threads()
    cl = KafkaChangelog(kafka_broker.bootstrap_servers)
    topic = changelog_topic(f"shop{uuid.uuid4().hex[:8]}", "revenue")
    cl.ensure(topic, 2)
    cl.prepare(topic)  # a transactional producer: threads of its own
    assert kafka_threads_beyond(before)
    cl.close()
    wait_for(lambda: not kafka_threads_beyond(before), 10.0)
    # a task that outlived the close (a prepare, a cleanup) opens nothing again
    with pytest.raises(KafkaError, match="is closed"):
        cl.prepare(topic)
    with pytest.raises(KafkaError, match="is closed"):
        cl.list_topics()
    assert not kafka_threads_beyond(before)
    cl.close()  # twice: nothing more to do


def test_records_round_trip_through_kafka_headers() -> None:
    rec = ChangelogRecord(kv_spec(), 7, Position.from_map(position(7)), 123, _rows())
    value, headers = rec.to_kafka()
    back = ChangelogRecord.from_kafka(value, headers, "t/0@0")
    assert (back.spec, back.batch_id, back.position, back.observed) == (rec.spec, 7, rec.position, 123)
    assert back.rows.equals(rec.rows)


def _rows():
    import pyarrow as pa

    return pa.table({"k": ["a", "b"], "v0": [1.0, 2.0], "v1": [1, 2]})




def test_a_writer_killed_mid_batch_leaves_replicas_at_a_whole_batch(kafka_broker, tmp_path) -> None:
    """Half a batch in an open transaction is invisible to replicas; the restarted writer fences it and the
    store and the replica end up equal, every partition at the batch's Position."""
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.changelog import ChangelogWriter
    from stores.engine.batch import changes_to_table, encode, split_by_partition
    from stores.engine.codec import ValueCodec

    app_id = f"shop{uuid.uuid4().hex[:8]}"
    spec = kv_spec()
    app = StreamsApp(StoreTopology([spec]), application_id=app_id, state_dir=str(tmp_path / "active"))
    app.start()
    dead = KafkaChangelog(kafka_broker.bootstrap_servers)
    try:
        w = ChangelogWriter(app.writer("revenue"), dead, app_id)
        for i in range(2):
            w.write_batch(i, batch(i), position(i))
        topic = changelog_topic(app_id, "revenue")
        share = split_by_partition(spec, encode(spec, changes_to_table(spec, ValueCodec(spec), batch(2), "b2"), "b2"))[0]
        producer = dead._producer(topic)  # the writer "dies" after sending partition 0's record of batch 2
        producer.begin_transaction()
        value, headers = ChangelogRecord(spec, 2, Position.from_map(position(2)), share.observed,
                                         share.rows).to_kafka()
        producer.produce(topic, value=value, partition=0, headers=headers)
        producer.flush(5)
        with Replica(KafkaChangelog(kafka_broker.bootstrap_servers), app_id, tmp_path / "replica") as rep:
            wait_for(lambda: {lag.position for lag in rep.lags()} == {Position.from_map(position(1))})
            time.sleep(1.0)  # the open transaction stays invisible: no partition moves to batch 2
            assert {lag.position for lag in rep.lags()} == {Position.from_map(position(1))}
            w2 = ChangelogWriter(app.writer("revenue"), KafkaChangelog(kafka_broker.bootstrap_servers), app_id)
            w2.write_batch(2, batch(2), position(2))
            wait_for(lambda: all(contents(tmp_path / "active", spec, p) == contents(tmp_path / "replica", spec, p)
                                 for p in range(3)))
            assert {lag.position for lag in rep.lags()} == {Position.from_map(position(2))}
    finally:
        app.close()


def test_a_rebuilt_generation_has_its_own_topic_on_kafka_and_a_replica_follows_it(kafka_broker, tmp_path) -> None:
    """``<app>-<store>.g1-changelog`` is a legal Kafka topic; a Kafka replica restores it beside generation 0 and
    swaps to it once it reached generation 0's Position; deleting a generation's topic (a rebuild begun anew)."""
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.changelog import ChangelogWriter

    app_id = f"shop{uuid.uuid4().hex[:8]}"
    servers = kafka_broker.bootstrap_servers
    cl = KafkaChangelog(servers)
    app = StreamsApp(StoreTopology([kv_spec()]), application_id=app_id, state_dir=str(tmp_path / "active"))
    app.start()
    try:
        w0 = ChangelogWriter(app.writer("revenue"), cl, app_id)
        for i in range(2):
            w0.write_batch(i, batch(i), position(i))
        topic = changelog_topic(app_id, "revenue", 1)
        with Replica(KafkaChangelog(servers), app_id, tmp_path / "replica") as rep:
            wait_for(rep.caught_up)
            assert app.begin_rebuild("revenue", "test") == 1
            w1 = ChangelogWriter(app.writer("revenue", generation=1), cl, app_id, 1)
            assert w1.topic == topic
            for i in range(3):
                w1.write_batch(i, batch(i + 10), position(i))
            assert cl.list_topics()[topic] == 3 and cl.last(topic, 0).record.batch_id == 2
            wait_for(lambda: rep.generations()["revenue"]["serving"] == topic)
            app.finish_rebuild("revenue")
            wait_for(lambda: all(contents(tmp_path / "active", kv_spec(), p, None)
                                 == contents(tmp_path / "replica", kv_spec(), p, None) for p in range(3)))
            assert rep.generations()["revenue"]["swaps"] == 1
        first_id = cl.topic_id(topic)
        assert cl.delete(topic) and not cl.delete(topic) and topic not in cl.list_topics()
        cl.ensure(topic, 3)
        assert first_id is not None and cl.topic_id(topic) not in (None, first_id)  # KIP-516 topic ids (Tansu has them)
    finally:
        app.close()
        cl.close()
