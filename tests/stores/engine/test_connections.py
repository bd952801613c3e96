"""Open files stay O(stores × partitions) however many threads read (issue 23 item 1).

Every thread used to open its own connection to every partition it touched;
now read connections are borrowed from a per-partition pool and the process
keeps a bounded number idle.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import connections
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest

STORES, PARTITIONS, THREADS = 24, 4, 16


def _spec(i: int) -> StoreSpec:
    return StoreSpec(f"s{i:02d}", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("v", SqlType.BIGINT),), partitions=PARTITIONS, source_topics=("t",))


def test_many_threads_reading_many_partitions_keep_open_files_bounded(tmp_path: Path) -> None:
    before = connections.open_files()
    partitions_before = connections.stats()["partitions"]  # stores another test left open count too
    assert before is not None
    app = StreamsApp(StoreTopology([_spec(i) for i in range(STORES)]), "fds", tmp_path / "state",
                     coordination_base=tmp_path / "coord", synchronous="NORMAL")
    app.start()
    try:
        pos = Position.from_map({"t": {0: 99}})
        for i in range(STORES):
            app.writer(f"s{i:02d}").write_batch(0, [Change(k, (k * i,)) for k in range(100)], pos)
        errors: list[str] = []
        peak = [0]

        def read(t: int) -> None:
            for rnd in range(3):
                for i in range(STORES):
                    name = f"s{i:02d}"
                    q = RangeQuery.with_no_bounds() if (t + rnd) % 2 else KeyQuery.with_key(t)
                    res = app.query(StateQueryRequest.in_store(name).with_query(q))
                    if any(not qr.is_success for qr in res.partition_results.values()):
                        errors.append(f"{name}: {res}")
                peak[0] = max(peak[0], connections.open_files() or 0)

        threads = [threading.Thread(target=read, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + 300
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        assert not any(th.is_alive() for th in threads), "the readers did not finish in 300 s"
        assert errors == []
        n = STORES * PARTITIONS
        opened = (connections.open_files() or 0) - before
        # the goal of issue 23: at most 4 files per store partition (+100); one connection per thread and
        # partition was 2 files x 16 threads x 96 partitions
        assert opened <= 4 * n + 100, (opened, connections.stats())
        assert peak[0] - before <= 4 * n + 100 + 2 * THREADS, (peak[0] - before, connections.stats())
        st = connections.stats()
        assert st["partitions"] - partitions_before == n
        assert st["idle_read_connections"] <= st["idle_budget"] == max(connections.MIN_BUDGET, st["partitions"] // 2)
    finally:
        app.close(10)
    assert (connections.open_files() or 0) - before <= 5  # closing the app closes every connection
