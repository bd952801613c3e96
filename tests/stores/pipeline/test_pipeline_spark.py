"""The Spark pipeline end to end on a real local Spark (one shared session).

Scenarios are grouped so each streaming query start (~7 s) checks many
things: the shop app is started, checked against the DuckDB oracle, written
to and read back, closed, restarted with a lost store file, and finally
refused on a truncated log.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores import (  # noqa: E402
    FailureReason,
    KeyQuery,
    Position,
    PositionBound,
    State,
    StateQueryRequest,
    StreamsApp,
    StreamThreadExceptionResponse,
    WindowRangeQuery,
)
from stores.iqv2.errors import MissingSourceTopicException, StreamsStoppedException  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.stores.pipeline.oracle import (  # noqa: E402
    caught_up,
    check_all,
    wait_for_state,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[3]
STORES = ("revenue", "revenue_per_min", "last_order", "profiles")


def load_shop():
    spec = importlib.util.spec_from_file_location("shop_pipeline", ROOT / "examples" / "shop_pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


shop = load_shop()


def profile_events(n: int, seed: int) -> list[tuple]:
    """Profiles with updates and deletes (value None) of a small key set."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = f"u{rng.randrange(12)}"
        value = None if rng.random() < 0.25 else {"name": f"n{i}", "age": rng.randrange(18, 90)}
        out.append((key, value, 1_700_000_000_000 + i))
    return out


def build_app(spark, log, state_dir, listener=None, handler=None):
    t = shop.build(spark, log)
    t.table("profiles", t.stream("profiles", value_schema="name STRING, age BIGINT"), key="key")
    app = StreamsApp(t, application_id=f"shop-{state_dir.name}", state_dir=state_dir)
    if listener is not None:
        app.set_state_listener(listener)
    if handler is not None:
        app.set_uncaught_exception_handler(handler)
    return app


def check_published_streams(state_dir: Path, log: EventLog) -> None:
    """The pipeline host publishes its queryable streams (issue 51): another process reads the orders' records."""
    from gateway import Gateway
    from stores.catalog.streams import StreamSpec

    published = StreamSpec.from_json((state_dir / "streams" / "orders" / "stream.json").read_text())
    assert (published.name, published.topic, [c.name for c in published.values]) == ("orders", "orders",
                                                                                        ["amount", "item"])
    assert not (state_dir / "streams" / "profiles").exists()  # the store "profiles" took the topic's name
    gw = Gateway.open(state_dir)
    try:
        got = gw.sql("SELECT partition, count(*), round(sum(amount), 2), max(offset) FROM orders GROUP BY partition "
                     "ORDER BY partition")
        want = [(p, len(recs), round(sum(r.value["amount"] for r in recs), 2), len(recs) - 1)
                for p in range(log.partitions("orders")) if (recs := log.read("orders", p))]
        assert got.rows() == want
        assert got.position == Position.from_map({"orders": log.last_offsets("orders")})
    finally:
        gw.close()


def test_shop_pipeline_oracle_read_your_writes_restart_recovery_truncation(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    for topic, n in shop.TOPICS.items():
        log.create_topic(topic, partitions=n)
    log.create_topic("profiles", partitions=2)
    log.append_batch("orders", shop.generate_orders(400, customers=30, seed=1))
    log.append_batch("profiles", profile_events(80, seed=2))
    state_dir = tmp_path / "state"
    transitions: list[tuple[State, State]] = []
    app = build_app(spark, log, state_dir, listener=lambda new, old: transitions.append((old, new)))
    try:
        app.start()
        wait_for_state(app, State.RUNNING)
        # RUNNING means every store caught up with the log as it was at start: no waiting here.
        assert caught_up(app, log, STORES)
        sizes = check_all(app, log)
        assert sizes["orders"] == 400 and sizes["revenue"] == 30 and sizes["profiles"] > 0
        check_published_streams(state_dir, log)
        wait_until(lambda: len(transitions) >= 2, "the listener to see RUNNING", 10)  # called after it is visible
        assert transitions[:2] == [(State.CREATED, State.REBALANCING), (State.REBALANCING, State.RUNNING)]

        # Read-your-writes: the bound at the returned offset fails NOT_UP_TO_BOUND until the batch lands.
        before = app.query(StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key("c0003")))
        old = next(qr.result for qr in before.partition_results.values() if qr.is_success and qr.result)
        p, off = log.append("orders", key="c0003", value={"amount": 1000.25, "item": "pen"},
                            timestamp=1_700_000_500_000)
        bound = PositionBound.at(Position.from_map({"orders": {p: off}}))
        req = (StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key("c0003"))
               .with_partitions({p}).with_position_bound(bound))
        reasons = []

        def landed() -> bool:
            qr = app.query(req).partition_results[p]
            if qr.is_success:
                return True
            reasons.append(qr.failure_reason)
            return False

        wait_until(landed, "the appended order to become visible", 30)
        assert reasons and set(reasons) == {FailureReason.NOT_UP_TO_BOUND}
        new = app.query(req).only_partition_result().result
        assert (new.revenue, new.orders) == (pytest.approx(old.revenue + 1000.25), old.orders + 1)

        # More data with late records, then the oracle again once quiescent.
        log.append_batch("orders", shop.generate_orders(300, customers=30, seed=3, start_ts=1_700_000_600_000))
        log.append_batch("profiles", profile_events(40, seed=4))
        wait_until(lambda: caught_up(app, log, STORES), "the stores to catch up", 90)
        assert check_all(app, log)["orders"] == 701
    finally:
        assert app.close(60)
    assert transitions[-2:] == [(State.RUNNING, State.PENDING_SHUTDOWN), (State.PENDING_SHUTDOWN, State.NOT_RUNNING)]
    with pytest.raises(StreamsStoppedException):
        app.query(StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key("c0003")))

    # Restart with new records and one lost store partition file: rebuilt before RUNNING, nothing doubled.
    # Few customers in the new records, so most keys are not re-emitted: only a rebuild restores them.
    log.append_batch("orders", shop.generate_orders(200, customers=3, seed=5, start_ts=1_700_001_000_000))
    lost = state_dir / "stores" / "revenue" / "partition-1.db"
    assert lost.exists()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{lost}{suffix}").unlink(missing_ok=True)
    app2 = build_app(spark, log, state_dir)
    try:
        app2.start()
        wait_for_state(app2, State.RUNNING)
        assert caught_up(app2, log, STORES)
        assert check_all(app2, log)["orders"] == 901
    finally:
        assert app2.close(60)

    # A recreated (shorter) topic: the checkpoint's records are gone, a clear failure, ERROR.
    log.delete_topic("profiles")
    log.create_topic("profiles", partitions=2)
    log.append("profiles", "u1", {"name": "x", "age": 1})
    seen: list[BaseException] = []
    app3 = build_app(spark, log, state_dir, handler=lambda exc: seen.append(exc) or
                     StreamThreadExceptionResponse.SHUTDOWN_CLIENT)
    try:
        app3.start()
        wait_for_state(app3, State.ERROR)
        assert any("SOURCE_TRUNCATED" in str(e) and "'profiles'" in str(e) for e in seen), seen
    finally:
        app3.close(30)


def _single_store_app(spark, log, tmp_path, name, handler, transitions, sessions=False):
    from pyspark.sql import functions as F

    from stores.pipeline.topology import Topology

    t = Topology(spark, log)
    events = t.stream("events", value_schema="v BIGINT")
    t.table("latest", events, key="key")
    if sessions:
        t.table("sessions", events.withWatermark("timestamp", "1 second")
                .groupBy(F.session_window("timestamp", "1 minute"), "key")
                .agg(F.sum("v").alias("total"), F.count("*").alias("n")), key="key", window="session_window")
    app = StreamsApp(t, application_id=name, state_dir=tmp_path / name)
    app.set_state_listener(lambda new, old: transitions.append((old, new)))
    app.set_uncaught_exception_handler(handler)
    return app


def test_deleted_source_topic_goes_to_error_through_the_handler(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("events", partitions=2)
    t0 = 1_700_000_000_000
    # stamped before the sessions below: stamped "now", it moved the watermark past them whenever Spark read it in
    # a micro-batch of its own, and they were dropped as late (the test then timed out waiting for them)
    log.append("events", "a", {"v": 1}, t0 - 3_600_000)
    seen: list[BaseException] = []
    transitions: list[tuple[State, State]] = []
    app = _single_store_app(spark, log, tmp_path, "gone", lambda exc: seen.append(exc) or
                            StreamThreadExceptionResponse.SHUTDOWN_CLIENT, transitions, sessions=True)
    try:
        app.start()
        wait_for_state(app, State.RUNNING)
        # A session store (append mode): a session is written once the watermark closes it.
        log.append_batch("events", [("s", {"v": 2}, t0), ("s", {"v": 3}, t0 + 10_000)])
        log.append("events", "s2", {"v": 1}, t0 + 600_000)  # moves the watermark past the first session
        req = StateQueryRequest.in_store("sessions").with_query(WindowRangeQuery.with_key("s"))

        def sessions_of_s() -> list:
            res = app.query(req)
            return [kv for qr in res.partition_results.values() if qr.is_success for kv in qr.result]

        wait_until(lambda: bool(sessions_of_s()), "the closed session to be written", 60)
        [kv] = sessions_of_s()
        assert (kv.key.key, kv.key.window.start, kv.key.window.end) == ("s", t0, t0 + 10_000)
        assert (kv.value.total, kv.value.n) == (5, 2)

        log.delete_topic("events")
        wait_for_state(app, State.ERROR)
        # The listener is called after the new state is visible, outside the state lock (as Kafka Streams calls
        # it): the state can read ERROR before the listener has recorded PENDING_ERROR -> ERROR. Asserting at once
        # failed twice in 2026-11-28's runs, the last transition not yet in the list.
        wait_until(lambda: transitions[-1:] == [(State.PENDING_ERROR, State.ERROR)], "the listener to see ERROR", 10)
        assert transitions[-3:] == [(State.REBALANCING, State.RUNNING), (State.RUNNING, State.PENDING_ERROR),
                                    (State.PENDING_ERROR, State.ERROR)]
        assert seen and all(isinstance(e, MissingSourceTopicException) for e in seen)
        assert "'events'" in str(seen[0])
        with pytest.raises(StreamsStoppedException):
            app.query(StateQueryRequest.in_store("latest").with_query(KeyQuery.with_key("a")))
        assert not [q for q in spark.streams.active if "gone-latest" in (q.name or "")]
    finally:
        app.close(30)


def test_missing_source_topic_before_start(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("events")
    seen: list[BaseException] = []
    transitions: list[tuple[State, State]] = []
    app = _single_store_app(spark, log, tmp_path, "never", lambda exc: seen.append(exc) or
                            StreamThreadExceptionResponse.SHUTDOWN_CLIENT, transitions)
    log.delete_topic("events")
    app.start()
    wait_for_state(app, State.ERROR, 60)
    assert [type(e) for e in seen] == [MissingSourceTopicException]
    assert transitions == [(State.CREATED, State.REBALANCING), (State.REBALANCING, State.PENDING_ERROR),
                           (State.PENDING_ERROR, State.ERROR)]


def test_replace_thread_restarts_the_query_from_its_checkpoint(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("events", partitions=2)
    log.append_batch("events", [(f"k{i % 5}", {"v": i}, i) for i in range(20)])
    topic_dir = tmp_path / "log" / "topics" / "events"
    hidden = tmp_path / "log" / "topics" / ".hidden-events"
    seen: list[BaseException] = []

    def handler(exc: BaseException) -> StreamThreadExceptionResponse:
        seen.append(exc)
        hidden.rename(topic_dir)  # the operator fixes the cause; the query can resume
        return StreamThreadExceptionResponse.REPLACE_THREAD

    transitions: list[tuple[State, State]] = []
    app = _single_store_app(spark, log, tmp_path, "replace", handler, transitions)
    try:
        app.start()
        wait_for_state(app, State.RUNNING)
        topic_dir.rename(hidden)  # the topic vanishes for a moment
        wait_until(lambda: len(seen) == 1 and app.state is State.RUNNING and
                   (State.REBALANCING, State.RUNNING) in transitions[2:], "the query to be replaced", 90)
        assert isinstance(seen[0], MissingSourceTopicException)
        assert (State.RUNNING, State.REBALANCING) in transitions
        p, off = log.append("events", "k1", {"v": 999})
        req = (StateQueryRequest.in_store("latest").with_query(KeyQuery.with_key("k1"))
               .with_partitions({p}).with_position_bound(PositionBound.at(Position.from_map({"events": {p: off}}))))
        wait_until(lambda: app.query(req).partition_results[p].is_success, "a write after the replacement", 30)
        assert app.query(req).only_partition_result().result.v == 999
    finally:
        assert app.close(60)


def test_shutdown_application_takes_every_instance_of_the_application_id_to_error(spark, tmp_path):
    """A failed query answered with SHUTDOWN_APPLICATION stops its peers too (here a hand-written store app)."""
    from stores.app.streams import StoreTopology

    log = EventLog(tmp_path / "log")
    seen: list[BaseException] = []
    transitions: list[tuple[State, State]] = []
    app = _single_store_app(spark, log, tmp_path, "shop-app", lambda exc: seen.append(exc) or
                            StreamThreadExceptionResponse.SHUTDOWN_APPLICATION, transitions)
    peer = StreamsApp(StoreTopology(app.catalog().values()), application_id="shop-app",
                      state_dir=tmp_path / "peer", coordination_base=tmp_path / "coord")
    peer.start()
    assert peer.state is State.RUNNING
    app.start()  # the topic "events" was never created
    wait_for_state(app, State.ERROR, 60)
    wait_for_state(peer, State.ERROR, 30)
    assert [type(e) for e in seen] == [MissingSourceTopicException]
