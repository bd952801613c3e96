"""Live answers through the gateway and its faces: an app of every store kind written the way the pipeline writes
(changelogs on the embedded log, no Spark), a Gateway over it, its HTTP and PG servers, and subscribers that hold
what a client of each face holds (rows by identity, the Position), so answers can be held to pull queries."""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.pg.server import PgServer
from gateway.serving.http_server import ServerThread
from stores.app.streams import StreamsApp
from stores.log.eventlog import EventLog
from stores.pipeline.changelogs import ChangelogWriters
from tests.stores.live.workload import APP, SPECS, Writer, open_app, workload

TOKEN = "live-token"

# (store, subscription, the same SELECT as a pull query): projections, computed columns, filters on keys, windows,
# times and values (rows leaving and entering a value filter), every store kind
CASES = [
    ("kv", "SUBSCRIBE kv", "SELECT * FROM kv"),
    ("kv", "SUBSCRIBE (SELECT k, total * 2 AS double_total FROM kv WHERE n > 4)",
     "SELECT k, total * 2 AS double_total FROM kv WHERE n > 4"),
    ("kv", "SELECT k, vip FROM kv WHERE k IN ('c01', 'c05', 'c09', 'c13') EMIT CHANGES",
     "SELECT k, vip FROM kv WHERE k IN ('c01', 'c05', 'c09', 'c13')"),
    ("kv", "SUBSCRIBE (SELECT n FROM kv WHERE total > 50 AND _partition = 1)",
     "SELECT n FROM kv WHERE total > 50 AND _partition = 1"),
    ("tkv", "SUBSCRIBE (SELECT k, amount, len(tags) AS t, rowtime FROM tkv WHERE rowtime > "
            "TIMESTAMP '2023-11-14 22:13:26')",
     "SELECT k, amount, len(tags) AS t, rowtime FROM tkv WHERE rowtime > TIMESTAMP '2023-11-14 22:13:26'"),
    ("win", "SUBSCRIBE (SELECT k, window_start, n FROM win WHERE n >= 10)",
     "SELECT k, window_start, n FROM win WHERE n >= 10"),
    ("ver", "SUBSCRIBE (SELECT k, price, valid_from FROM ver WHERE price < 5)",
     "SELECT k, price, valid_from FROM ver WHERE price < 5"),
    ("ck", "SUBSCRIBE (SELECT region, day, qty FROM ck WHERE region = 'eu')",
     "SELECT region, day, qty FROM ck WHERE region = 'eu'"),
    ("ses", "SELECT * FROM ses WHERE k IN ('c01', 'c03', 'c05', 'c07') EMIT CHANGES",
     "SELECT * FROM ses WHERE k IN ('c01', 'c03', 'c05', 'c07')"),
]


@dataclass
class LiveEnv:
    root: Path
    log: EventLog
    app: StreamsApp
    writers: ChangelogWriters
    gw: Gateway
    stores: dict[str, Writer]
    http: ServerThread | None = None
    pg: PgServer | None = None
    batches: int = 0

    def write(self, upto: int) -> None:
        """Every store on to batch ``upto - 1``."""
        for w in self.stores.values():
            w.write(upto)
        self.batches = upto

    def topic(self, store: str) -> str:
        return self.stores[store].topic()

    @property
    def pg_url(self) -> str:
        assert self.pg is not None
        return f"postgresql://live:{TOKEN}@127.0.0.1:{self.pg.port}/iqgate"


@contextmanager
def live_env(root: Path, config: GatewayConfig | None = None, *, faces: bool = True, kinds: tuple[str, ...] = tuple(SPECS),
             batches: int = 60) -> Iterator[LiveEnv]:
    log = EventLog(root / "log")
    app, writers = open_app(root / "state", log, *(SPECS[k] for k in kinds))
    gw = Gateway(app, config=config or GatewayConfig())
    env = LiveEnv(root, log, app, writers, gw, {k: Writer(app, writers, SPECS[k], workload(k, batches, seed=13))
                                              for k in kinds})
    try:
        env.write(4)
        if faces:
            env.http = ServerThread(create_app(gw), threads=4).start()
            env.pg = PgServer(gw, token=TOKEN, auth_method="password").start()
        yield env
    finally:
        if env.pg is not None:
            env.pg.close()
        if env.http is not None:
            env.http.close()
        gw.close()
        app.close()


def batch_at(position: Any, topic: str) -> int:
    """The batch a Position (a stores Position or its JSON map) is at: the changelog record's offset in partition 0
    (the embedded changelog holds one record per batch from batch 0)."""
    if isinstance(position, dict):
        return int(position[topic]["0"])
    return position.partition_positions(topic)[0]


def hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, hashable(x)) for k, x in v.items()))
    return v


@dataclass
class Held:
    """What a subscriber holds: rows by identity, from messages ``(op, position, row)``; ``width``: the SELECT's own
    columns (those a pull query answers), ``identity_at``: where the identity columns are in a row."""

    width: int
    identity_at: list[int]
    rows: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    position: Any = None
    progress: list[Any] = field(default_factory=list)

    def apply(self, op: str, position: Any, row: Any) -> None:
        if op in ("insert", "upsert"):
            self.rows[tuple(hashable(row[i]) for i in self.identity_at)] = tuple(hashable(v) for v in row)
        elif op == "delete":
            self.rows.pop(tuple(hashable(row[i]) for i in self.identity_at), None)
        elif op == "reset":
            self.rows.clear()
        elif op == "progress":
            self.position = position
            self.progress.append(position)

    def answer(self) -> Counter[tuple[Any, ...]]:
        return Counter(r[:self.width] for r in self.rows.values())


def held_for(columns: list[str], identity: list[str], appended: list[str]) -> Held:
    return Held(len(columns) - len(appended), [columns.index(n) for n in identity])


# -- HTTP ---------------------------------------------------------------------------------------------------------
class Ndjson:
    """One subscription over ``POST /v1/sql`` as NDJSON (or SSE), read a line at a time with a socket timeout."""

    def __init__(self, url: str, sql: str, *, accept: str = "application/x-ndjson", last_event_id: str | None = None,
                 timeout_s: float = 15.0, **fields: Any) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
        headers = {"Content-Type": "application/json", "Accept": accept}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("POST", "/v1/sql", json.dumps({"sql": sql, **fields}), headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.head: dict[str, Any] = {}
        if self.status == 200 and accept != "text/event-stream":
            self.head = self.next()

    def next(self) -> dict[str, Any]:
        line = self.resp.readline()
        if not line:
            raise EOFError("the stream ended")
        return json.loads(line)

    def held(self) -> Held:
        names = [c["name"] for c in self.head["columns"]]
        return held_for(names, self.head["identity"], self.head["appended"])

    def close(self) -> None:
        self.resp.close()  # the response holds the socket's file: closing the connection alone keeps it open
        self.conn.close()

    def __enter__(self) -> Ndjson:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def http_pull(url: str, sql: str) -> Counter[tuple[Any, ...]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        conn.request("POST", "/v1/sql", json.dumps({"sql": sql}), {"Content-Type": "application/json",
                                                                   "Accept": "application/json"})
        body = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return Counter(tuple(hashable(v) for v in r) for r in body["rows"])


def wait_until(cond: Any, timeout_s: float = 10.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.02)


__all__ = ["APP", "CASES", "LiveEnv", "live_env", "batch_at", "Held", "held_for", "Ndjson", "http_pull", "hashable",
           "wait_until", "TOKEN"]
