"""Range scans as Arrow streams (issue 14 item 1): same rows as the Python-row path, one snapshot per partition,
the Positions kept, snapshots ended however a statement stops, and the SQLite locks of the process intact."""

from __future__ import annotations

import http.client
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from stores.app.streams import StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.arrow_reads import ArrowQuery, ArrowRows
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest
from tests.gateway.gwfixtures import make_app

QUERIES = [
    "SELECT * FROM revenue",
    "SELECT * FROM latest",
    "SELECT * FROM per_min",
    "SELECT * FROM last_order FOR SYSTEM_TIME ALL",
    "SELECT customer, _partition, _position FROM revenue",
    "SELECT count(*), min(revenue), max(orders) FROM revenue",
    "SELECT * FROM revenue WHERE customer BETWEEN 'c03' AND 'c11'",
    "SELECT * FROM revenue ORDER BY customer DESC LIMIT 3",
    "SELECT * FROM per_min ORDER BY customer, window_start LIMIT 4",
    "SELECT * FROM revenue LIMIT 2",
    "SELECT a.customer, b.revenue FROM revenue a JOIN revenue b ON a.customer = b.customer",
    "WITH r AS (SELECT * FROM revenue) SELECT x.customer FROM r x JOIN r y ON x.customer = y.customer",
]


@pytest.fixture(scope="module")
def plain(shop_app: StreamsApp) -> Iterator[Gateway]:
    g = Gateway(shop_app, config=GatewayConfig(arrow_scans=False))
    yield g
    g.close()


@pytest.fixture(scope="module")
def tiny_batches(shop_app: StreamsApp) -> Iterator[Gateway]:
    g = Gateway(shop_app, config=GatewayConfig(scan_batch_rows=2))
    yield g
    g.close()


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize("sql", QUERIES)
def test_arrow_scans_answer_as_the_row_path(gw: Gateway, plain: Gateway, tiny_batches: Gateway, sql: str) -> None:
    ordered = "ORDER BY" in sql and "LIMIT" in sql
    want = plain.sql(sql)
    for g in (gw, tiny_batches):
        got = g.sql(sql)
        assert got.columns == want.columns
        assert got.position == want.position
        assert got.partitions == want.partitions
        if ordered:
            assert got.rows() == want.rows()
        elif "LIMIT" in sql:
            assert len(got.rows()) == len(want.rows())
        else:
            assert _sorted(got.rows()) == _sorted(want.rows())
        # every form a face asks for
        assert _sorted(g.sql(sql, arrow=True).to_arrow().to_pylist()) == _sorted(want.to_arrow().to_pylist()) \
            or "LIMIT" in sql
        streamed = g.sql(sql, stream=True)
        assert sum(len(c) for c in streamed.iter_batches()) == len(want.rows())
        streamed.close()


def test_the_python_api_forms_of_a_streamed_result(gw: Gateway, plain: Gateway) -> None:
    got, want = gw.sql("SELECT customer, revenue FROM revenue"), plain.sql("SELECT customer, revenue FROM revenue")
    assert _sorted(got.rows()) == _sorted(want.rows())
    assert _sorted(got.to_arrow().to_pylist()) == _sorted(want.to_arrow().to_pylist())
    assert _sorted(got.relation.fetchall()) == _sorted(want.rows())
    got.close()


def _store(tmp: Path, name: str = "t") -> StoreSpec:
    return StoreSpec(name, StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT, nullable=False),
                     (Column("note", SqlType.VARCHAR), Column("flag", SqlType.BOOLEAN), Column("day", SqlType.DATE),
                      Column("n", SqlType.INTEGER)), partitions=2, source_topics=("s",))


@pytest.fixture()
def small(tmp_path: Path) -> Iterator[tuple[StreamsApp, Gateway]]:
    app = make_app(tmp_path, (_store(tmp_path),), app_id="arrow-scans")
    app.start()
    g = Gateway(app, config=GatewayConfig(scan_batch_rows=3))
    yield app, g
    g.close()
    app.close()


def test_values_null_in_the_first_batch_keep_their_types(small: tuple[StreamsApp, Gateway]) -> None:
    """SQLite has no column types: a column NULL in a whole first batch still reads as its type later."""
    app, g = small
    changes = [Change(i, (None if i < 40 else f"x{i}", None if i < 40 else i % 2 == 0,
                          None if i < 40 else 19_000 + i, None if i < 40 else i)) for i in range(60)]
    app.writer("t").write_batch(1, changes, Position.from_map({"s": {0: 59}}))
    table = g.sql("SELECT * FROM t", arrow=True).to_arrow()
    assert [str(t) for t in table.schema.types] == ["int64", "string", "bool", "date32[day]", "int32"]
    rows = {r["id"]: r for r in table.to_pylist()}
    assert rows[3]["note"] is None and rows[41]["note"] == "x41" and rows[42]["flag"] is True
    assert rows[41]["flag"] is False and rows[50]["n"] == 50 and rows[50]["day"].toordinal() > 0
    plain = Gateway(app, config=GatewayConfig(arrow_scans=False))
    try:
        assert _sorted(g.sql("SELECT * FROM t").rows()) == _sorted(plain.sql("SELECT * FROM t").rows())
    finally:
        plain.close()


def test_a_stream_reads_one_snapshot_per_partition(small: tuple[StreamsApp, Gateway]) -> None:
    """A batch written while a scan streams is not seen by it, and the positions are the snapshot's."""
    app, g = small
    w = app.writer("t")
    w.write_batch(1, [Change(i, (f"a{i}", True, 1, 1)) for i in range(200)], Position.from_map({"s": {0: 199}}))
    result = g.sql("SELECT id, note, _position FROM t", stream=True)
    chunks = result.iter_batches(10)
    first = next(chunks)
    w.write_batch(2, [Change(i, (f"b{i}", True, 1, 1)) for i in range(400)], Position.from_map({"s": {0: 599}}))
    rows = first + [r for c in chunks for r in c]
    result.close()
    assert len(rows) == 200 and all(note.startswith("a") for _, note, _ in rows)
    assert {pos for _, _, pos in rows} == {'{"s":{"0":199}}'}
    assert result.position == Position.from_map({"s": {0: 199}})
    assert len(g.sql("SELECT * FROM t").rows()) == 400


def test_snapshots_end_however_a_statement_stops(small: tuple[StreamsApp, Gateway]) -> None:
    """LIMITs, errors and unread streams give their read transactions back: the writer is never blocked
    and the store closes at once."""
    app, g = small
    w = app.writer("t")
    w.write_batch(1, [Change(i, (f"a{i}", True, 1, 1)) for i in range(100)], Position.from_map({"s": {0: 99}}))
    for _ in range(50):
        assert len(g.sql("SELECT * FROM t LIMIT 1").rows()) == 1
        g.sql("SELECT * FROM t", stream=True).close()  # never read
        with pytest.raises(Exception, match="row limit|more than"):
            g.sql("SELECT * FROM t", max_rows=5).rows()
        g.sql("SELECT * FROM t")  # bound, never read, dropped: its answer ends its snapshots itself
    store = app._stores["t"][0]  # noqa: SLF001 - the partition's Arrow connections
    assert store._arrow._busy == 0  # noqa: SLF001
    # a checkpoint can run to the end: no reader holds an old snapshot
    w.write_batch(2, [Change(1, ("z", True, 1, 1))], Position.from_map({"s": {0: 100}}))
    c = sqlite3.connect(store.path)
    try:
        busy, _, _ = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        c.close()
    assert busy == 0


def _locks(path: Path) -> int:
    """How many POSIX locks this process holds on ``path``'s inode (Linux /proc/locks)."""
    ino = os.stat(path).st_ino
    pid = str(os.getpid())
    n = 0
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if pid in parts and parts[-3].split(":")[-1] == str(ino):
                n += 1
    return n


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="Linux /proc/locks")
def test_the_writers_locks_survive_arrow_scans(small: tuple[StreamsApp, Gateway]) -> None:
    """Two SQLite copies in one process (the ADBC driver's and Python's): the driver's connections stay open,
    so the writer's locks on the file and its WAL index are never dropped by a scan ending."""
    app, g = small
    app.writer("t").write_batch(1, [Change(i, ("a", True, 1, 1)) for i in range(20)], Position.from_map({"s": {0: 1}}))
    store = app._stores["t"][0]  # noqa: SLF001
    shm = Path(f"{store.path}-shm")
    before = (_locks(store.path), _locks(shm))
    assert before[0] >= 1 and before[1] >= 1
    for _ in range(5):
        g.sql("SELECT count(*) FROM t").rows()
        g.sql("SELECT * FROM t WHERE id = 3").rows()  # sqlite3 reads beside them
    assert _locks(store.path) >= before[0] and _locks(shm) >= before[1]


def test_a_first_arrow_scan_leaves_the_writers_wal_index_alone(small: tuple[StreamsApp, Gateway]) -> None:
    """SQLite's first connection in a process truncates the ``-shm`` file to reinitialize it unless another
    *process* holds it; the ADBC copy cannot see the sqlite3 copy's locks in this process, so without
    ``readonly_shm`` it truncated the index the writer has mapped (a SIGBUS in CI, 2026-11-26)."""
    import time

    app, g = small
    app.writer("t").write_batch(1, [Change(i, ("a", True, 1, 1)) for i in range(20)], Position.from_map({"s": {0: 1}}))
    shms = [Path(f"{store.path}-shm") for store in app._stores["t"].values()]  # noqa: SLF001
    time.sleep(0.05)  # past the file system's timestamp granularity
    before = [(f.stat().st_mtime_ns, f.stat().st_size) for f in shms]
    assert len(g.sql("SELECT * FROM t").rows()) == 20  # a streamed (Arrow) scan of every partition
    assert [(f.stat().st_mtime_ns, f.stat().st_size) for f in shms] == before


def test_arrow_query_failures_are_iqv2_failures(small: tuple[StreamsApp, Gateway]) -> None:
    app, _ = small
    bad = app.query(StateQueryRequest.in_store("t").with_query(ArrowQuery(KeyQuery.with_key(1))))
    assert all(r.failure_reason.name == "UNKNOWN_QUERY_TYPE" for r in bad.partition_results.values())
    ahead = (StateQueryRequest.in_store("t").with_query(ArrowQuery(RangeQuery.with_no_bounds()))
             .with_position_bound(PositionBound.at(Position.from_map({"s": {0: 10**9}}))))
    res = app.query(ahead)
    assert all(r.failure_reason.name == "NOT_UP_TO_BOUND" for r in res.partition_results.values())
    ok = app.query(StateQueryRequest.in_store("t").with_query(ArrowQuery(RangeQuery.with_range(5, 1))))
    assert all(isinstance(r.result, ArrowRows) and not list(r.result.batches()) for r in ok.partition_results.values())



def _arrow_http(url: str, sql: str, **extra: object) -> tuple[int, bytes]:
    import json
    import urllib.error
    import urllib.request

    body = json.dumps({"sql": sql, **extra}).encode()
    req = urllib.request.Request(f"{url}/v1/sql", body, {"Content-Type": "application/json",
                                                         "Accept": "application/vnd.apache.arrow.stream"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_arrow_ipc_answers_stream_batch_by_batch(tiny_batches: Gateway, plain: Gateway) -> None:
    """Arrow IPC is written as DuckDB produces batches; a limit hit before the first byte is a status, after it
    the stream ends without its end marker (readers report it incomplete), never silently short."""
    import pyarrow as pa

    from gateway.http import create_app
    from gateway.serving.http_server import ServerThread

    with ServerThread(create_app(tiny_batches), threads=2) as srv:
        status, data = _arrow_http(srv.url, "SELECT * FROM revenue")
        assert status == 200
        reader = pa.ipc.open_stream(data)
        assert b"iqgate.position" in (reader.schema.metadata or {})
        table = reader.read_all()
        assert _sorted([tuple(r.values()) for r in table.to_pylist()]) == _sorted(plain.sql("SELECT * FROM revenue").rows())
        for limit in (1, 3):
            try:
                status, data = _arrow_http(srv.url, "SELECT * FROM revenue", max_rows=limit)
            except http.client.IncompleteRead:
                continue  # the limit was hit after the headers went out: the response is cut, visibly
            assert status == 400 and b"ROW_LIMIT_EXCEEDED" in data
