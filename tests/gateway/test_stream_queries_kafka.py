"""Pull queries on a stream whose log is Kafka (a real broker: Tansu), checked against DuckDB over what the broker
holds (``KafkaClient.read``): filters pushed into the read, the Position of what was read, a bound the topic has
not reached, and a process that finds the stream and its brokers in the state dir."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gateway.engine import errors as ge
from gateway.engine.gateway import Gateway
from stores import KafkaSource
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.streams import StreamQuery, StreamSpec
from stores.iqv2.position import Position
from stores.log.stream_reader import StreamReader
from tests.gateway.test_stream_queries import ORDERS, ORDERS_VIEW, T0, _same, _ts, load_raw, orders


class KafkaWorld:
    def __init__(self, broker: Any, root: Path) -> None:
        self.src = KafkaSource(broker.bootstrap_servers)
        self.topic = f"orders-{uuid.uuid4().hex[:6]}"  # a name SQL must quote
        self.src.create_topic(self.topic, 3)
        self.src.append_batch(self.topic, orders(random.Random(5), 300))
        self.spec = StreamSpec(self.topic, self.topic, ORDERS.key, ORDERS.values, partitions=3, headers=True)
        self.state = root / "state"
        self.app = StreamsApp(StoreTopology([], streams=[self.spec], log=self.src), application_id="kafka-streams",
                              state_dir=self.state)
        self.app.start()
        self.gw = Gateway(self.app)
        self.oracle = duckdb.connect()
        self.oracle.execute("SET TimeZone = 'UTC'")
        self.load_oracle()

    def load_oracle(self) -> None:
        ends = self.src.end_offsets(self.topic)
        load_raw(self.oracle, "orders", [r for p, e in ends.items() for r in self.src.read(self.topic, p, 0, e)])
        self.oracle.execute(ORDERS_VIEW.format(view="orders", raw="raw_orders"))

    def close(self) -> None:
        self.gw.close()
        self.app.close(30)
        self.oracle.close()
        self.src.delete_topic(self.topic)
        self.src.close()


@pytest.fixture(scope="module")
def kw(kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaWorld]:
    w = KafkaWorld(kafka_broker, tmp_path_factory.mktemp("kafka-streams"))
    try:
        yield w
    finally:
        w.close()


WHERES = ["", "WHERE partition = 1", "WHERE offset BETWEEN 10 AND 40", "WHERE partition IN (0, 2) AND offset >= 50",
          f"WHERE rowtime >= {_ts(T0 + 3_600_000)}", f"WHERE rowtime < {_ts(T0 + 600_000)} AND partition <> 1",
          "WHERE amount > 50 AND offset < 70", "WHERE key IN ('c01', 'c02') OR item IS NULL",
          f"WHERE rowtime BETWEEN {_ts(T0 + 1_000_000)} AND {_ts(T0 + 2_000_000)} AND offset > 5"]


@pytest.mark.parametrize("where", WHERES)
def test_filters_answer_what_duckdb_answers_over_the_broker(kw: KafkaWorld, where: str) -> None:
    name = f'"{kw.topic}"'
    for select, oracle_select in (("SELECT *", "SELECT key, amount, item, qty"),
                                  ("SELECT partition, count(*), sum(amount), max(offset)", None)):
        group = " GROUP BY partition" if "count" in select else ""
        got = kw.gw.sql(f"{select} FROM {name} {where}{group}").rows()
        oracle_sql = f"{oracle_select or select} FROM orders {where}{group}".replace("offset", '"offset"')
        assert _same(got, kw.oracle.execute(oracle_sql).fetchall()), where


def test_the_position_is_the_brokers_offsets_and_records_carry_headers(kw: KafkaWorld) -> None:
    last = kw.src.last_offsets(kw.topic)
    out = kw.gw.sql(f'SELECT count(*) FROM "{kw.topic}"')
    assert out.position == Position.from_map({kw.topic: last})
    rec = next(r for p, e in kw.src.end_offsets(kw.topic).items() for r in kw.src.read(kw.topic, p, 0, e)
               if r.headers)
    got = kw.gw.sql(f'SELECT headers, rowtime FROM "{kw.topic}" WHERE partition = {rec.partition} '
                    f"AND offset = {rec.offset}").rows()
    assert got[0][0] == [{"key": n, "value": v} for n, v in rec.headers]
    assert got[0][1].timestamp() * 1000 == rec.timestamp


def test_a_time_bound_seeks_no_later_than_the_first_record_at_that_time(kw: KafkaWorld) -> None:
    """offsetsForTimes moves each partition's start; whatever the broker answers, no record in time is skipped."""
    reader = StreamReader(kw.spec, kw.src)
    since = T0 + 3_000_000
    for s in reader.slices(StreamQuery(rowtime=(since, None))):
        first = next((r.offset for r in kw.src.read(kw.topic, s.partition, 0, s.stop) if r.timestamp >= since), s.stop)
        assert s.start <= first
    beyond = reader.slices(StreamQuery(rowtime=(T0 + 10**9, None)))
    assert sum(b.num_rows for s in beyond for b in reader.batches(s, StreamQuery(rowtime=(T0 + 10**9, None)))) == 0


def test_a_producer_reads_its_own_write_and_a_bound_past_the_end_is_answered_at_once(kw: KafkaWorld) -> None:
    (p, off), = kw.src.append_batch(kw.topic, [("c01", {"amount": 2.5, "item": "ink", "qty": 1}, T0)])
    kw.load_oracle()
    got = kw.gw.sql(f'SELECT amount, item FROM "{kw.topic}" WHERE partition = {p} AND offset >= {off}',
                    position={kw.topic: {p: off}}).rows()
    assert got == [(2.5, "ink")]
    started = time.monotonic()
    with pytest.raises(ge.NotUpToBoundError, match="NOT_UP_TO_BOUND.*ends at offset"):
        kw.gw.sql(f'SELECT count(*) FROM "{kw.topic}" WHERE partition = {p}', position={kw.topic: {p: off + 1}},
                  wait_ms=15_000)
    assert time.monotonic() - started < 10


def test_a_reading_process_finds_the_brokers_in_the_state_dir(kw: KafkaWorld) -> None:
    reader = Gateway.open(kw.state)
    try:
        sql = f'SELECT partition, count(*) FROM "{kw.topic}" WHERE offset >= 3 GROUP BY partition'
        assert _same(reader.sql(sql).rows(), kw.oracle.execute(
            'SELECT partition, count(*) FROM orders WHERE "offset" >= 3 GROUP BY partition').fetchall())
    finally:
        reader.close()
