"""Fixtures of the gateway tests (the data and helpers are in gwfixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.engine import Gateway
from gateway.http import create_app
from gateway.server import ServerThread
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Http, Shop, make_app, make_shop, write_shop


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
