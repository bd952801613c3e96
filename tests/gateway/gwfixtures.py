"""Helpers of the gateway tests: a real StreamsApp (StoreTopology, no Spark) with one store of every kind,
a real Gateway on it, and a real waitress server on 127.0.0.1.

The data is generated, and every expectation in the tests is computed from
``SHOP`` (the rows written), never typed in by hand.
"""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position

MINUTE = 60_000
T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z

REVENUE = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
                    (Column("revenue", SqlType.DOUBLE), Column("orders", SqlType.BIGINT)),
                    partitions=4, source_topics=("orders",))
ACCOUNTS = StoreSpec("accounts", StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT, nullable=False),
                     (Column("name", SqlType.VARCHAR), Column("balance", SqlType.DOUBLE),
                      Column("active", SqlType.BOOLEAN), Column("opened", SqlType.TIMESTAMP)),
                     partitions=3, source_topics=("orders",))
PER_MIN = StoreSpec("per_min", StoreKind.WINDOW, Column("customer", SqlType.VARCHAR, nullable=False),
                    (Column("orders", SqlType.BIGINT), Column("revenue", SqlType.DOUBLE)),
                    partitions=2, source_topics=("orders",), window_size_ms=MINUTE)
LAST_ORDER = StoreSpec("last_order", StoreKind.VERSIONED, Column("customer", SqlType.VARCHAR, nullable=False),
                       (Column("amount", SqlType.DOUBLE),), partitions=2, source_topics=("orders",),
                       history_retention_ms=365 * 24 * 3600 * 1000)
LATEST = StoreSpec("latest", StoreKind.TIMESTAMPED_KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
                   (Column("amount", SqlType.DOUBLE),), partitions=2, source_topics=("orders",))
SPECS = (REVENUE, ACCOUNTS, PER_MIN, LAST_ORDER, LATEST)


@dataclass
class Shop:
    """The rows written to every store, keyed like the store, and the position they were written at."""

    orders: list[tuple[str, int, float]] = field(default_factory=list)  # (customer, ts, amount)
    revenue: dict[str, tuple[float, int]] = field(default_factory=dict)
    accounts: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    per_min: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    versions: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # sorted (ts, amount)
    latest: dict[str, tuple[float, int]] = field(default_factory=dict)
    position: Position = Position.empty()


def make_shop(seed: int = 7, n_orders: int = 300, n_customers: int = 25) -> Shop:
    rnd = random.Random(seed)
    shop = Shop()
    for i in range(n_orders):
        c = f"c{rnd.randrange(n_customers):02d}"
        ts = T0 + rnd.randrange(30) * MINUTE + rnd.randrange(MINUTE)
        amount = round(rnd.uniform(1, 100), 2)
        shop.orders.append((c, ts, amount))
    for c, ts, amount in shop.orders:
        r, n = shop.revenue.get(c, (0.0, 0))
        shop.revenue[c] = (r + amount, n + 1)
        ws = ts - ts % MINUTE
        n2, r2 = shop.per_min.get((c, ws), (0, 0.0))
        shop.per_min[(c, ws)] = (n2 + 1, r2 + amount)
        shop.versions.setdefault(c, []).append((ts, amount))
    for c, vs in shop.versions.items():
        vs.sort()
        dedup: dict[int, float] = {}
        for ts, a in vs:
            dedup[ts] = a
        shop.versions[c] = sorted(dedup.items())
        shop.latest[c] = (shop.versions[c][-1][1], shop.versions[c][-1][0])
    for i in range(60):
        shop.accounts[i * 7 - 100] = (f"name{i}" if i % 5 else None, round(rnd.uniform(-50, 500), 2),
                                       i % 3 == 0, T0 + i * 3_600_000)
    shop.position = Position.from_map({"orders": {0: n_orders // 2 - 1, 1: n_orders - n_orders // 2 - 1}})
    return shop


def write_shop(app: StreamsApp, shop: Shop, batch_id: int = 0) -> None:
    pos = shop.position
    app.writer("revenue").write_batch(batch_id, [Change(c, v) for c, v in shop.revenue.items()], pos)
    app.writer("accounts").write_batch(batch_id, [Change(k, v) for k, v in shop.accounts.items()], pos)
    app.writer("per_min").write_batch(
        batch_id, [Change(c, v, window_start=ws, window_end=ws + MINUTE) for (c, ws), v in shop.per_min.items()], pos)
    app.writer("last_order").write_batch(
        batch_id, [Change(c, (a,), timestamp=ts) for c, vs in shop.versions.items() for ts, a in vs], pos)
    app.writer("latest").write_batch(batch_id, [Change(c, (a,), timestamp=ts) for c, (a, ts) in shop.latest.items()],
                                     pos)


def make_app(state_dir: Path, specs: tuple[StoreSpec, ...] = SPECS, app_id: str = "gw-tests") -> StreamsApp:
    return StreamsApp(StoreTopology(specs), application_id=app_id, state_dir=str(state_dir),
                      coordination_base=str(state_dir / "coord"))


@dataclass
class Http:
    """A tiny HTTP client for the tests: real sockets, loopback only, a timeout on every call."""

    url: str
    token: str | None = None

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                raw: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Content-Type": "application/json"}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()

    def sql(self, sql: str, accept: str | None = None, **fields: Any) -> tuple[int, dict[str, str], Any]:
        headers = {"Accept": accept} if accept else {}
        status, hdrs, body = self.request("POST", "/v1/sql", {"sql": sql, **fields}, headers)
        if hdrs.get("content-type", "").startswith("application/json"):
            return status, hdrs, json.loads(body)
        return status, hdrs, body



def serve_gateway(gw: Gateway, config: GatewayConfig | None = None) -> ServerThread:
    return ServerThread(create_app(gw, config), threads=4)


def explain(gw: Gateway, sql: str) -> str:
    """The plan text ``EXPLAIN`` gives for ``sql`` (which IQv2 request a statement becomes)."""
    return "\n".join(r[0] for r in gw.sql("EXPLAIN " + sql).rows())


def answers_and_oracle(gw: Gateway, oracle: Any, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(the gateway's rows, DuckDB's rows over the same data) for ``sql``; order-insensitive without ORDER BY."""
    got = gw.sql(sql).rows()
    want = oracle.execute(sql).fetchall()
    if "ORDER BY" not in sql:
        got, want = sorted(got, key=repr), sorted(want, key=repr)
    return got, want
