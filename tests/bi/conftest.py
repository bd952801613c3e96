"""The shop pipeline on real Spark, served over HTTP (and the PG port), for the BI tools' tests.

One pipeline per module that asks for it: ``iqgate serve``'s own path
(load the pipeline file, run it on the shared local Spark, serve its stores).
The data is fixed once loaded, so answers through a BI tool can be compared
with the same statement over HTTP.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway
from gateway.cli.demo import PIPELINE
from gateway.http import create_app
from gateway.serving.hosting import load_pipeline, start_pipeline, wait_caught_up
from gateway.serving.http_server import ServerThread
from stores.log.eventlog import EventLog
from tests.gateway.conftest import gw, shop, shop_app  # noqa: F401 - the no-Spark shop (every store kind)


@dataclass
class ShopServer:
    gateway: Gateway
    http_url: str
    orders: list[tuple[str, dict[str, Any], int]]
    pg_port: int | None = None

    def sql(self, sql: str, **body: Any) -> dict[str, Any]:
        """One statement over HTTP: the reference answer BI tools are compared with."""
        req = urllib.request.Request(self.http_url + "/v1/sql", data=json.dumps({"sql": sql, **body}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raise AssertionError(f"HTTP {err.code} for {sql}: {err.read()[:2000]!r}") from None


@pytest.fixture(scope="module")
def shop_pipeline(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[Any]]]:
    tmp = tmp_path_factory.mktemp("bi-shop")
    module = load_pipeline(PIPELINE)
    log = EventLog(Path(tmp) / "log")
    for topic, n in module.TOPICS.items():
        log.create_topic(topic, partitions=n)
    orders = module.generate_orders(600, customers=30, seed=11, start_ts=1_714_564_800_000)
    log.append_batch("orders", orders)
    app = start_pipeline(module, log, Path(tmp) / "state", spark=spark)
    try:
        wait_caught_up(app, log, timeout_s=600)
        yield app, orders
    finally:
        app.close()


@pytest.fixture(scope="module")
def shop_server(shop_pipeline: tuple[Any, list[Any]]) -> Iterator[ShopServer]:
    app, orders = shop_pipeline
    gateway = Gateway(app)
    with ServerThread(create_app(gateway), threads=4) as http:
        yield ShopServer(gateway, http.url, orders)
    gateway.close()
