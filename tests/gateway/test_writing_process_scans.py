"""Answers ended early in the process that writes the stores (issue 43's matrix, for the scans of
stores/engine/sqlite_scans.py): a Gateway over a StreamsApp in this process reads its scans through ``sqlite3``,
not ADBC, and an answer cut short by the row limit, by its reader stopping half-way, or by a client closing it
while batches keep coming, must free its read transaction and leave the process answering, while batches land."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.errors import RowLimitExceeded
from gateway.engine.gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.engine.sqlite_scans import writing_here
from stores.iqv2.position import Position

KV = StoreSpec("kv", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False), (Column("v", SqlType.VARCHAR),),
               partitions=2, source_topics=("t",))
KEYS = 20_000


def _write(app: StreamsApp, batch: int) -> None:
    app.writer("kv").write_batch(batch, [Change(k, (f"{batch:04d}" + "x" * 40,)) for k in range(KEYS)],
                                 Position.from_map({"t": {0: batch, 1: batch}}))


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[StreamsApp]:
    a = StreamsApp(StoreTopology((KV,)), application_id="wp", state_dir=str(tmp_path / "s"),
                   coordination_base=str(tmp_path / "c"))
    a.start()
    _write(a, 0)
    yield a
    a.close()


def _in_flight(app: StreamsApp) -> int:
    return sum(app.partition_store("kv", p).arrow_scans_in_flight for p in range(KV.partitions))


def _freed(app: StreamsApp) -> bool:
    """Every scan's read transaction ended. Not at once: a close that finds a DuckDB worker inside a read is
    carried out by that worker when its read returns (ArrowRows, issue 43), so wait for it, boundedly."""
    deadline = time.monotonic() + 10
    while _in_flight(app) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _in_flight(app) == 0


def test_answers_ended_early_in_the_writing_process_free_their_scans(app: StreamsApp) -> None:
    assert writing_here(app.partition_store("kv", 0).path)  # the sqlite3 scans, not ADBC
    gw = Gateway(app, config=GatewayConfig(max_rows=1_000, scan_batch_rows=512))
    stop = threading.Event()

    def batches() -> None:  # the pipeline goes on writing: checkpoints and WAL restarts under the scans
        for b in range(1, 40):
            if stop.is_set():
                return
            _write(app, b)

    writer = threading.Thread(target=batches)
    writer.start()
    try:
        for _ in range(5):
            with pytest.raises(RowLimitExceeded):  # rows, past the row limit
                gw.sql("SELECT * FROM kv").rows()
            with pytest.raises(RowLimitExceeded):  # Arrow, past the row limit
                gw.sql("SELECT * FROM kv", arrow=True).to_arrow()
            result = gw.sql("SELECT * FROM kv", max_rows=KEYS)  # a reader that stops after one batch
            _, it = result.arrow_batches()
            assert next(it).num_rows > 0
            result.close()
            assert _freed(app)
            # and the process answers whole statements meanwhile, each from one snapshot
            (n, firsts), = gw.sql("SELECT count(*), count(DISTINCT left(v, 4)) FROM kv").rows()
            assert (n, firsts) == (KEYS, 1)
    finally:
        stop.set()
        writer.join(60)
        gw.close()
    assert _freed(app)
