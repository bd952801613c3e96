"""The pipeline over a real Kafka broker (Tansu): positions are Kafka offsets, exactly once across restarts, KIP-662.

One app start checks many things (a streaming query start costs ~7 s): the
shop stores and a latest-value table with tombstones against the DuckDB
oracle over what the broker holds, Positions equal to the broker's offsets,
read-your-writes through IQv2 and SQL, a restart while producers keep
writing, values that are not JSON, and a source topic deleted under the
running app.
"""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

import gateway.engine.errors as ge  # noqa: E402
from gateway import Gateway  # noqa: E402
from stores import (  # noqa: E402
    KafkaSource,
    KeyQuery,
    Position,
    PositionBound,
    State,
    StateQueryRequest,
    StreamsApp,
    StreamThreadExceptionResponse,
)
from stores.iqv2.errors import MissingSourceTopicException  # noqa: E402
from stores.log.broker import LocalBroker  # noqa: E402
from tests.stores.changelog.helpers import kafka_client_threads, kafka_threads_beyond  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, check_all, wait_for_state, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import profile_events, shop  # noqa: E402

STORES = ("revenue", "revenue_per_min", "last_order", "profiles", "event_counts", "events_by_source")


def build(spark, src, state_dir, handler=None):
    t = shop.build(spark, src)
    t.table("profiles", t.stream("profiles", value_schema="name STRING, age BIGINT"), key="key")
    events = t.stream("events", value_schema="n BIGINT", include_headers=True)
    t.table("event_counts", events.groupBy("key").agg(F.count("*").alias("records"), F.sum("n").alias("total")),
            key="key")
    source = F.expr("CAST(get(filter(headers, h -> h.key = 'src'), 0).value AS STRING)")  # issue 16: a Kafka header
    t.table("events_by_source", events.groupBy(F.coalesce(source, F.lit("none")).alias("src"))
            .agg(F.count("*").alias("records"), F.sum("n").alias("total")), key="src")
    app = StreamsApp(t, application_id=f"kafka-{state_dir.name}", state_dir=state_dir)
    if handler is not None:
        app.set_uncaught_exception_handler(handler)
    return app


def broker_position(src: KafkaSource, topics: tuple[str, ...]) -> Position:
    return Position.from_map({t: src.last_offsets(t) for t in topics})


def test_kafka_pipeline_offsets_oracle_restart_and_a_deleted_topic(spark, tmp_path):
    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        src.create_topic("orders", 3)
        src.create_topic("profiles", 2)
        src.create_topic("events", 2)
        src.append_batch("orders", shop.generate_orders(3000, customers=40, seed=21))
        src.append_batch("profiles", profile_events(200, seed=22))
        src.append_batch("events", [(f"e{i % 5}", {"n": i}, None, [("src", "odd" if i % 2 else "even")] if i % 7 else [])
                                    for i in range(50)])
        _produce_raw(broker.bootstrap_servers, "events", [(b"e1", b"not json"), (b"e1", b"[1, 2]"),
                                                          (b"e2", b'{"n": "x"}'),
                                                          # nested past the worker's recursion limit: it failed
                                                          # every micro-batch that read it, for ever
                                                          (b"e1", b"[" * 50_000 + b"]" * 50_000)])
        state = tmp_path / "state"
        failures: list[BaseException] = []

        def handler(exc: BaseException) -> StreamThreadExceptionResponse:
            failures.append(exc)
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT

        app = build(spark, src, state)
        clients_before = kafka_client_threads()  # the test's own KafkaSource
        try:
            app.start()
            wait_for_state(app, State.RUNNING)
            assert caught_up(app, src, STORES)
            sizes = check_all(app, src)
            assert sizes["orders"] == 3000 and sizes["revenue"] == 40 and sizes["profiles"] > 0
            # Positions are the broker's offsets: the last offset applied per topic-partition.
            for store in STORES:
                topics = app.catalog()[store].source_topics
                assert app.positions()[store] == broker_position(src, topics), store
            # Values that are not JSON objects count as records with null fields; nothing crashed.
            counts = {kv.key: (kv.value.value.records, kv.value.value.total) for kv in _scan(app, "event_counts")}
            assert counts["e1"] == (13, sum(i for i in range(50) if i % 5 == 1))
            assert counts["e2"] == (11, sum(i for i in range(50) if i % 5 == 2))
            # Record headers as a column (Spark's includeHeaders shape), grouped by one: the 50 records produced
            # with (or, every 7th, without) a "src" header, and the 4 foreign records (no headers, no n).
            by_src = {kv.key: (kv.value.value.records, kv.value.value.total) for kv in _scan(app, "events_by_source")}
            want_src: dict[str, tuple[int, int]] = {"none": (4, 0)}
            for i in range(50):
                h = ("odd" if i % 2 else "even") if i % 7 else "none"
                c, tot = want_src[h] if h in want_src else (0, 0)
                want_src[h] = (c + 1, tot + i)
            assert by_src == want_src and {"odd", "even", "none"} <= set(by_src)

            # Read-your-writes with the Position of a produce: IQv2 and SQL.
            [(p, off)] = src.append_batch("orders", [("c0007", {"amount": 1000.5, "item": "tea"}, 1_700_003_000_000)])
            bound = PositionBound.at(Position.from_map({"orders": {p: off}}))
            req = StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key("c0007")).with_position_bound(bound)
            wait_until(lambda: all(r.is_success for r in app.query(req).partition_results.values()),
                       "the produced order", 30)
            assert app.query(req).only_partition_result().result.orders >= 1
            gw = Gateway(app)
            out = gw.sql("SELECT orders FROM revenue WHERE key = 'c0007'", position={"orders": {str(p): off}},
                         wait_ms=10_000)
            assert out.position.offset("orders", p) >= off
            with pytest.raises(ge.NotUpToBoundError, match="NOT_UP_TO_BOUND"):
                gw.sql("SELECT * FROM revenue", position={"orders": {str(p): off + 1_000_000}})
            gw.close()
        finally:
            assert app.close(60)
        # the app's Kafka clients (a transactional producer per store changelog) end with it, not with the process
        wait_until(lambda: not kafka_threads_beyond(clients_before), "the app's Kafka clients to close", 10)

        # Restart while a producer keeps writing: every record exactly once.
        stop = threading.Event()
        producer = threading.Thread(target=_keep_producing, args=(src, stop), daemon=True)
        producer.start()
        time.sleep(0.5)
        app2 = build(spark, src, state, handler=handler)
        try:
            app2.start()
            wait_for_state(app2, State.RUNNING)
            time.sleep(1.0)
            stop.set()
            producer.join(30)
            total = sum(src.end_offsets("orders").values())
            assert total > 3001
            wait_until(lambda: caught_up(app2, src, STORES), "the stores to catch up after the restart", 90)
            assert check_all(app2, src)["orders"] == total

            # KIP-662: a source topic deleted under the running app.
            src.delete_topic("events")
            wait_for_state(app2, State.ERROR, 90)
            assert failures and isinstance(failures[0], MissingSourceTopicException)
            assert "events" in str(failures[0])
            with pytest.raises(ge.StreamsStoppedError) as info:
                Gateway(app2).sql("SELECT * FROM revenue WHERE key = 'c0007'")
            assert "MISSING_SOURCE_TOPIC" in info.value.message and "'events'" in info.value.message
        finally:
            stop.set()
            app2.close(60)
        src.close()


def test_a_source_topic_that_was_never_created_is_kip_662(spark, tmp_path):
    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        src.create_topic("orders", 3)
        failures: list[BaseException] = []
        app = build(spark, src, tmp_path / "state",
                    handler=lambda exc: failures.append(exc) or StreamThreadExceptionResponse.SHUTDOWN_CLIENT)
        app.start()
        wait_for_state(app, State.ERROR)
        assert failures and all(isinstance(f, MissingSourceTopicException) for f in failures)
        assert "profiles" in str(failures[0]) and f"Kafka at {broker.bootstrap_servers}" in str(failures[0])
        assert not src.has_topic("profiles")  # asking about it did not create it
        src.close()


def _scan(app, store):
    from stores import TimestampedRangeQuery

    res = app.query(StateQueryRequest.in_store(store).with_query(TimestampedRangeQuery.with_no_bounds()))
    return [kv for qr in res.partition_results.values() for kv in qr.result]


def _produce_raw(servers: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Bytes no iqgate producer would write (a foreign producer's bad values)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": servers, "partitioner": "murmur2_random"})
    for key, value in records:
        p.produce(topic, key=key, value=value)
    assert p.flush(10) == 0


def _keep_producing(src: KafkaSource, stop: threading.Event) -> None:
    seed = 100
    for _ in range(400):  # bounded in count; the test stops it much earlier
        if stop.is_set():
            return
        src.append_batch("orders", shop.generate_orders(20, customers=40, seed=seed,
                                                        start_ts=1_700_000_000_000 + seed * 60_000))
        seed += 1
        time.sleep(0.05)
