"""Live feeds over a changelog in Kafka (a real broker: Tansu): each batch one transaction, offsets counting the
transaction markers; a feed is exact at every progress and resumes exactly from its Position."""

from __future__ import annotations

import uuid

import pytest

from stores.app.streams import StoreTopology, StreamsApp
from stores.changelog import ChangelogWriter, KafkaChangelog
from stores.iqv2.position import Position
from stores.live import LiveFeeds

from .workload import SPECS, Model, Subscriber, drain, workload

pytest.importorskip("confluent_kafka")


@pytest.mark.parametrize("kind", ["kv", "ver"])
def test_a_feed_over_kafka_is_exact_and_resumes(kafka_broker, tmp_path, kind) -> None:
    app_id = f"live{uuid.uuid4().hex[:8]}"
    spec = SPECS[kind]
    app = StreamsApp(StoreTopology([spec]), application_id=app_id, state_dir=str(tmp_path / "state"))
    app.start()
    changes = workload(kind, 16, seed=2)
    model, answers, by_source = Model(spec), {}, {}
    writer = ChangelogWriter(app.writer(kind), KafkaChangelog(kafka_broker.bootstrap_servers), app_id)

    def write(upto: int) -> None:
        for i in range(len(answers), upto):
            pos = Position.from_map({"orders": {0: 100 + i}})
            writer.write_batch(i, changes[i], pos)
            model.apply(changes[i])
            answers[i], by_source[100 + i] = model.answer(), i

    def exact(sub: Subscriber, upto: int):
        seen: list[Position] = []

        def there() -> bool:
            if sub.position is None:
                return False
            b = by_source[sub.position.offset("orders", 0)]
            if not seen or seen[-1] != sub.position:
                assert sub.answer() == answers[b], f"batch {b}"
                seen.append(sub.position)
            return b >= upto
        return there

    try:
        write(4)
        with LiveFeeds(app, changelog=KafkaChangelog(kafka_broker.bootstrap_servers)) as feeds:
            sub = Subscriber(spec)
            feed = feeds.open_feed(kind, timeout_s=60)
            drain(feed, sub, exact(sub, 3), timeout_s=60)
            write(10)
            drain(feed, sub, exact(sub, 9), timeout_s=60)
            at = sub.position
            # each batch is a transaction: its record, then its commit marker, so records sit at even offsets
            assert all(o % 2 == 0 for o in at.partition_positions(f"{app_id}-{kind}-changelog").values())
            feed.close()
            write(16)
            drain(feeds.open_feed(kind, at, snapshot=False, timeout_s=60), sub, exact(sub, 15), timeout_s=60)
    finally:
        app.close()
