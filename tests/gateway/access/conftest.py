"""The team (a users file made by ``iqgate users``), the shop app that counts its reads, and the oracle: a server
whose catalog really holds only alice's stores, with the same rows (what "does not exist for alice" must equal)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.access import Users
from gateway.engine.gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.engine.change import Change
from tests.gateway.access.team import CountingApp, Team, make_team
from tests.gateway.gwfixtures import ACCOUNTS, REVENUE, Shop, write_shop


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Team:
    return make_team(tmp_path_factory.mktemp("team"))


@pytest.fixture(scope="module")
def counting(tmp_path_factory: pytest.TempPathFactory, shop: Shop) -> Iterator[CountingApp]:
    app = CountingApp(tmp_path_factory.mktemp("counting"))
    app.start()
    write_shop(app, shop)
    yield app
    app.close()


@pytest.fixture(scope="module")
def team_gw(counting: CountingApp) -> Iterator[Gateway]:
    g = Gateway(counting)
    yield g
    g.close()


@pytest.fixture(scope="module")
def oracle_gw(tmp_path_factory: pytest.TempPathFactory, shop: Shop) -> Iterator[Gateway]:
    """revenue and accounts only (alice's stores), written with the same rows at the same position."""
    d = tmp_path_factory.mktemp("oracle")
    app = StreamsApp(StoreTopology((REVENUE, ACCOUNTS)), application_id="grants", state_dir=str(d),
                     coordination_base=str(d / "coord"))
    app.start()
    app.writer("revenue").write_batch(0, [Change(c, v) for c, v in shop.revenue.items()], shop.position)
    app.writer("accounts").write_batch(0, [Change(k, v) for k, v in shop.accounts.items()], shop.position)
    g = Gateway(app)
    yield g
    g.close()
    app.close()


@pytest.fixture(scope="module")
def team_users(team: Team) -> Users:
    return Users.load(team.path)
