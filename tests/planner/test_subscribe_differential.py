"""SUBSCRIBE / EMIT CHANGES end to end below the gateway: the plan's SQL, run per batch over a live feed's events
as ``Subscription`` documents it, holds at every progress Position exactly what the same SELECT answers as a
pull query at that Position (projections, computed columns, filters on keys, windows, times and values, rows
leaving and re-entering a value filter, deletes, every store kind)."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway import Gateway
from planner import plan
from stores.live import LiveFeeds
from stores.log.eventlog import EventLog
from tests.stores.live.workload import SPECS, Writer, batch_of, open_app, workload

from .live_apply import Applier

CASES = [
    ("kv", "SUBSCRIBE kv", "SELECT * FROM kv"),
    ("kv", "SUBSCRIBE (SELECT k, total * 2 AS double_total FROM kv WHERE n > 4)",
     "SELECT k, total * 2 AS double_total FROM kv WHERE n > 4"),
    ("kv", "SELECT k, vip FROM kv WHERE k IN ('c01', 'c05', 'c09', 'c13') EMIT CHANGES",
     "SELECT k, vip FROM kv WHERE k IN ('c01', 'c05', 'c09', 'c13')"),
    ("kv", "SUBSCRIBE TO (SELECT upper(k) AS name, n FROM kv WHERE k BETWEEN 'c03' AND 'c12' AND vip)",
     "SELECT upper(k) AS name, n FROM kv WHERE k BETWEEN 'c03' AND 'c12' AND vip"),
    ("kv", "SUBSCRIBE (SELECT n FROM kv WHERE total > 50 AND _partition = 1)",
     "SELECT n FROM kv WHERE total > 50 AND _partition = 1"),
    ("tkv", "SUBSCRIBE (SELECT k, amount, len(tags) AS t, rowtime FROM tkv WHERE rowtime > "
            "TIMESTAMP '2023-11-14 22:13:26')",
     "SELECT k, amount, len(tags) AS t, rowtime FROM tkv WHERE rowtime > TIMESTAMP '2023-11-14 22:13:26'"),
    ("win", "SUBSCRIBE (SELECT k, window_start, n FROM win WHERE n >= 10)",
     "SELECT k, window_start, n FROM win WHERE n >= 10"),
    ("win", "SELECT * FROM win WHERE window_start >= TIMESTAMP '1970-01-01 00:05:00' EMIT CHANGES",
     "SELECT * FROM win WHERE window_start >= TIMESTAMP '1970-01-01 00:05:00'"),
    ("ver", "SUBSCRIBE ver", "SELECT * FROM ver"),
    ("ver", "SUBSCRIBE (SELECT k, price, valid_from FROM ver WHERE price < 5)",
     "SELECT k, price, valid_from FROM ver WHERE price < 5"),
    ("ck", "SUBSCRIBE (SELECT region, day, qty FROM ck WHERE region = 'eu')",
     "SELECT region, day, qty FROM ck WHERE region = 'eu'"),
    ("ses", "SELECT * FROM ses WHERE k = 'c03' EMIT CHANGES", "SELECT * FROM ses WHERE k = 'c03'"),
]


@pytest.mark.parametrize("kind,statement,pull", CASES, ids=[c[1][:60] for c in CASES])
def test_the_subscription_answer_is_the_pull_answer_at_every_progress(tmp_path, kind, statement, pull) -> None:
    log = EventLog(tmp_path / "log")
    spec = SPECS[kind]
    app, writers = open_app(tmp_path / "state", log, spec)
    try:
        writer = Writer(app, writers, spec, workload(kind, 24, seed=13))
        writer.write(4)
        gw = Gateway(app)
        p = plan(statement, app.catalog()).subscription
        assert p is not None and p.store == kind
        keys = p.keys
        with LiveFeeds(app) as feeds:
            feed = feeds.open_feed(kind, p.resume, p.snapshot, progress=p.progress,
                                   keys=None if keys is None else keys.keys,
                                   key_ranges=None if keys is None else keys.ranges,
                                   partitions=None if keys is None else keys.partitions, heartbeat_s=0.05)
            client = Applier(p)
            checked = 0
            for upto in range(4, 25, 2):
                writer.write(upto)
                while client.position is None or batch_of(client.position, writer.topic()) < upto - 1:
                    ev = feed.poll(10)
                    assert ev is not None, "the feed stalled"
                    client.apply(ev)
                # a whole answer at batch upto - 1, and nothing else writes: the store is at exactly that batch
                assert batch_of(client.position, writer.topic()) == upto - 1
                expected = Counter(tuple(r) for r in gw.sql(pull).rows())
                assert client.answer() == expected, f"batch {upto - 1}"
                checked += 1
            assert checked >= 8
            if p.membership:
                assert client.deletes_sent > 0 or kind == "ses"
    finally:
        app.close()
