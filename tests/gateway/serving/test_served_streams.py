"""Streams through a real server (``iqgate serve --state-dir``: a supervisor and two serving processes): each serving
process learns the streams from the state dir's ``stream.json`` and reads their records from the log ``app.json``
names; over HTTP and the PostgreSQL port the answers are the log's, within the server's limits."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType
from stores.catalog.streams import StreamSpec
from stores.log.eventlog import EventLog
from tests.gateway.gwfixtures import Http
from tests.gateway.serving.served_process import served_process

ROOT = Path(__file__).resolve().parents[3]
EVENTS = StreamSpec("events", "events", Column("key", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),
                                                                          Column("note", SqlType.VARCHAR)), partitions=2)
RECORDS = 5_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Http, int, EventLog]]:
    tmp = tmp_path_factory.mktemp("served-streams")
    log = EventLog(tmp / "log")
    log.create_topic("events", partitions=2)
    log.append_batch("events", [(f"k{i % 50}", {"n": i, "note": "x" * 100}, 1_000 + i) for i in range(RECORDS)])
    app = StreamsApp(StoreTopology([], streams=[EVENTS], log=log), application_id="served", state_dir=tmp / "state")
    app.start()
    app.close(10)  # the files stay: a read-only server serves them, and reads the log app.json names
    flags = ["--workers", "2", "--threads", "2", "--no-pin-cpus", "--max-rows", "1000", "--max-response-size", "64KB"]
    with served_process(tmp / "state", tmp / "serve.err", flags) as (_proc, url, pg):
        http = Http(url)
        for _ in range(600):  # until a serving process answers
            try:
                if http.request("GET", "/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        yield http, pg, log


def _want(log: EventLog, partition: int) -> tuple[int, int]:
    recs = log.read("events", partition)
    return len(recs), sum(r.value["n"] for r in recs)


def test_every_serving_process_reads_the_stream(served: tuple[Http, int, EventLog]) -> None:
    http, _, log = served
    for _ in range(6):  # the serving processes take turns accepting: each answers alike
        status, _, body = http.sql("SELECT partition, count(*), sum(n) FROM events GROUP BY partition "
                                   "ORDER BY partition")
        assert status == 200, body
        assert [tuple(r) for r in body["rows"]] == [(p, *_want(log, p)) for p in (0, 1)]
        assert body["position"] == {"events": {str(p): e for p, e in log.last_offsets("events").items()}}
        assert sorted((x["partition"], x["failure_reason"]) for x in body["partitions"]) == [(0, None), (1, None)]


def test_the_servers_limits_apply_to_a_stream(served: tuple[Http, int, EventLog]) -> None:
    http, _, log = served
    status, _, body = http.sql("SELECT key, n FROM events WHERE partition = 0")
    assert status == 422 and body["error"]["code"] == "ROW_LIMIT_EXCEEDED"
    status, _, body = http.sql("SELECT note FROM events LIMIT 900")
    assert body["error"]["code"] == "RESPONSE_TOO_LARGE"
    status, _, body = http.sql("SELECT * FROM events WHERE partition = 0 AND offset < 3",
                               accept="application/x-ndjson")
    lines = [json.loads(x) for x in body.decode().splitlines()]
    assert status == 200 and [x for x in lines if isinstance(x, list)] == \
        [[r.key, r.value["n"], r.value["note"]] for r in log.read("events", 0, 0, 3)]
    status, _, body = http.sql("SELECT count(*) FROM events", session={"table_scans": False})
    assert status == 400 and body["error"]["code"] == "TABLE_SCAN_DISABLED", body


def test_the_pg_port_lists_and_reads_streams(served: tuple[Http, int, EventLog]) -> None:
    _, port, log = served
    with psycopg.connect(host="127.0.0.1", port=port, user="bi", dbname="iqgate", connect_timeout=10) as con:
        cur = con.cursor()
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        assert ("events",) in cur.fetchall()
        cur.execute("SELECT key, n, \"offset\", rowtime FROM events WHERE partition = %s AND \"offset\" BETWEEN 5 AND 6",
                    (1,))
        rows = cur.fetchall()
        want = [(r.key, r.value["n"], r.offset, r.timestamp) for r in log.read("events", 1, 5, 7)]
        assert [(k, n, o, int(t.timestamp() * 1000)) for k, n, o, t in rows] == want

