"""A changelogged batch written in parallel (issue 22): the stores and the records a replica applies agree.

With several writer threads each partition's share is sorted by key in its
own thread, and the changelog record keeps the share in arrival order. The
store must hold what the row-at-a-time reference holds, and a copy that
applies the records (as ``replica/copy.py`` does) the very same rows, for
every store kind, with deletes and several changes to one key in a batch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.catalog.schema import SqlType, StoreKind
from stores.changelog import ChangelogWriter, EventLogChangelog
from stores.engine import open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog
from tests.stores.engine.row_path import RowPathStore, dump
from tests.stores.engine.test_columnar_writes import KEYS, _spec, as_table, batches


@pytest.mark.parametrize("kind", list(StoreKind), ids=lambda k: k.value)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), key_type=st.sampled_from([SqlType.BIGINT, SqlType.VARCHAR, SqlType.DOUBLE]),
       partitions=st.integers(1, 4))
def test_a_parallel_changelogged_batch_is_the_row_path_s_and_its_records_replay_to_it(
        kind: StoreKind, data: Any, key_type: SqlType, partitions: int) -> None:
    assert key_type in KEYS
    spec = _spec(kind, key_type, partitions)
    written = data.draw(batches(kind, key_type))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ref = RowPathStore(spec, root)
        stores = {p: open_partition(spec, p, root / f"logged-{p}.db", synchronous="OFF", adbc_min_rows=0)
                  for p in range(partitions)}
        changelog = EventLogChangelog(EventLog(root / "log"), fsync=False)
        logged = ChangelogWriter(PartitionedWriter(spec, stores, threads=2, parallel_min_rows=0), changelog, "app")
        copies = {p: open_partition(spec, p, root / f"copy-{p}.db", synchronous="OFF") for p in range(partitions)}
        try:
            for b, changes in enumerate(written):
                pos = Position.from_map({"t": {0: b, 1: 2 * b}})
                ref.write_batch(b, changes, pos)
                logged.write_table(b, as_table(changes, key_type), pos)
            tail = changelog.tail(logged.topic, {p: 0 for p in range(partitions)})
            for _ in range(100):
                items = tail.poll(0.05)
                if not items:
                    break
                for item in items:  # a replica's copy applies each record as it was logged
                    rec = item.record
                    copies[item.partition].apply_rows(rec.batch_id, rec.rows, rec.position, rec.observed)
            for p in range(partitions):
                want = ref.contents(p)
                assert dump(stores[p]._wconn, kind) == want, f"partition {p} of the store"
                assert dump(copies[p]._wconn, kind) == want, f"partition {p} of the copy"
        finally:
            ref.close()
            for s in (*stores.values(), *copies.values()):
                s.close()
