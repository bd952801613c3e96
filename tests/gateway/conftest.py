"""Fixtures of the gateway tests (the data and helpers are in gwfixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StoreTopology, StreamsApp
from stores.engine.change import Change
from tests.gateway.gwfixtures import REVENUE, Http, Shop, make_app, make_shop, write_shop


@pytest.fixture(scope="session")
def shop() -> Shop:
    return make_shop()


@pytest.fixture(scope="module")
def shop_app(tmp_path_factory: pytest.TempPathFactory, shop: Shop) -> Iterator[StreamsApp]:
    app = make_app(tmp_path_factory.mktemp("shop"))
    app.start()
    write_shop(app, shop)
    yield app
    app.close()


@pytest.fixture(scope="module")
def gw(shop_app: StreamsApp) -> Iterator[Gateway]:
    g = Gateway(shop_app)
    yield g
    g.close()


@pytest.fixture(scope="module")
def server(gw: Gateway) -> Iterator[Http]:
    with ServerThread(create_app(gw), threads=4) as srv:
        yield Http(srv.url)


@pytest.fixture(scope="module")
def half_app(tmp_path_factory: pytest.TempPathFactory, shop: Shop) -> Iterator[StreamsApp]:
    """An instance hosting only partitions 0 and 1 of revenue: 2 and 3 are NOT_PRESENT here."""
    app = StreamsApp(StoreTopology((REVENUE,)),
                     application_id="half", state_dir=str(tmp_path_factory.mktemp("half")),
                     hosted_partitions={"revenue": {0, 1}})
    app.start()
    app.writer("revenue").write_batch(0, [Change(c, v) for c, v in shop.revenue.items()], shop.position)
    yield app
    app.close()


@pytest.fixture(scope="module")
def half_gw(half_app: StreamsApp) -> Iterator[Gateway]:
    """A gateway on ``half_app``, closed with the module."""
    g = Gateway(half_app)
    yield g
    g.close()
