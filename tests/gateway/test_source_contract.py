"""One contract suite that every kind of source runs (issue 44), as ibis runs one suite against every backend.

A source is what the engine runs IQv2 requests against (``gateway/engine/sources.py``). Each kind here serves
the same shop stores: the StreamsApp that wrote them, a StateDirReader over its files, a serving process's
Follower (hosted and read-only, over a state board its publisher keeps), and a RoutedSource over a reader with
no peers. Every kind must declare capabilities the engine can use, answer the same statements with the same
rows and Positions through one Gateway, refuse an unknown store alike, and answer the system tables. The app
also declares a stream over the orders' log (issue 51): every kind reads it alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.engine import Gateway
from gateway.engine import errors as ge
from gateway.engine.sources import Capabilities
from gateway.routing import RoutedSource
from gateway.routing.membership import Membership
from gateway.serving.follower import Follower
from gateway.serving.hosts import AppHost, ReadOnlyHost
from gateway.serving.publisher import Crashes, Publisher
from gateway.serving.state_board import StateBoard
from stores.app.reader import StateDirReader
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType
from stores.catalog.streams import StreamSpec
from stores.iqv2.errors import UnknownStateStoreException
from stores.iqv2.query import KeyQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.state import State
from stores.log.eventlog import EventLog
from tests.gateway.gwfixtures import SPECS, Shop, write_shop

KINDS = ["streams-app", "state-dir-reader", "follower-hosted", "follower-read-only", "routed"]
# every capability each kind must declare (what the engine's features stand on)
EXPECTED = {
    "streams-app": {"point_read", "status", "source_end_offsets", "upcoming_columns", "history", "partition_roles",
                    "stream_reader"},
    "state-dir-reader": {"point_read", "status", "source_end_offsets", "upcoming_columns", "history",
                         "partition_roles", "stream_reader"},
    "follower-hosted": {"point_read", "status", "source_end_offsets", "upcoming_columns", "history",
                        "partition_roles", "stream_reader"},
    "follower-read-only": {"point_read", "status", "source_end_offsets", "upcoming_columns", "history",
                           "partition_roles", "stream_reader"},
    "routed": {"status", "source_end_offsets", "upcoming_columns", "history", "partition_rows",
               "stream_reader"},  # no point lane
}
ORDER_EVENTS = StreamSpec("order_events", "orders", Column("key", SqlType.VARCHAR), (Column("amount", SqlType.DOUBLE),),
                          partitions=2)
STATEMENTS = [
    "SELECT * FROM revenue ORDER BY customer",
    "SELECT customer, orders FROM revenue WHERE customer = 'c03'",
    "SELECT count(*), sum(orders) FROM revenue WHERE revenue > 100",
    "SELECT * FROM per_min WHERE customer = 'c01' ORDER BY window_start",
    "SELECT * FROM last_order FOR SYSTEM_TIME ALL ORDER BY customer, valid_from",
    "SELECT * FROM latest ORDER BY customer",
    "SELECT r.customer, r.orders, l.amount FROM revenue r JOIN latest l USING (customer) ORDER BY 1",
    "SELECT customer, _partition, _position FROM revenue WHERE customer IN ('c01', 'c02') ORDER BY 1",
    "SELECT key, count(*), round(sum(amount), 2) FROM order_events GROUP BY key ORDER BY key",
    "SELECT e.key, e.offset, r.orders FROM order_events e JOIN revenue r ON e.key = r.customer WHERE e.partition = 1 "
    "ORDER BY 2",
]


class _Kind:
    def __init__(self, source: Any, closers: list[Any]) -> None:
        self.source, self.closers = source, closers


def _make(kind: str, app: StreamsApp) -> _Kind:
    if kind == "streams-app":
        return _Kind(app, [])
    reader = StateDirReader(app.state_dir)
    if kind == "state-dir-reader":
        return _Kind(reader, [reader])
    if kind == "routed":
        membership = Membership([], interval_s=60)
        return _Kind(RoutedSource(reader, membership, "http://127.0.0.1:1"), [reader])
    board = StateBoard.create()
    host: Any = AppHost(app.state_dir, lambda listener: app, "the shop") if kind == "follower-hosted" \
        else ReadOnlyHost(app.state_dir)
    host.start()
    publisher = Publisher(board, host, Crashes(), "contract").start()
    mode = "hosted" if kind == "follower-hosted" else "read-only"
    follower = Follower(StateDirReader(app.state_dir), board, mode)

    class _Stop:
        def close(self) -> None:
            publisher._stop.set()  # noqa: SLF001 - without the final publish: the app stays the fixture's
            follower.close()
            if isinstance(host, ReadOnlyHost):
                host.close()
            board.close()

    return _Kind(follower, [_Stop(), reader])


@pytest.fixture(scope="module")
def shop_app(tmp_path_factory: pytest.TempPathFactory, shop: Shop) -> Iterator[StreamsApp]:
    """The shop stores, and the orders they were made of as a log and a stream over it."""
    root = tmp_path_factory.mktemp("shop")
    log = EventLog(root / "log")
    log.create_topic("orders", partitions=2)
    log.append_batch("orders", [(c, {"amount": a}, ts) for c, ts, a in shop.orders])
    app = StreamsApp(StoreTopology(SPECS, streams=[ORDER_EVENTS], log=log), application_id="gw-tests",
                     state_dir=str(root / "state"), coordination_base=str(root / "coord"))
    app.start()
    write_shop(app, shop)
    yield app
    app.close()


@pytest.fixture(scope="module")
def reference(shop_app: StreamsApp) -> Iterator[Gateway]:
    g = Gateway(shop_app)
    yield g
    g.close()


@pytest.fixture(scope="module", params=KINDS)
def kind(request: pytest.FixtureRequest, shop_app: StreamsApp) -> Iterator[tuple[str, Any, Gateway]]:
    made = _make(request.param, shop_app)
    gw = Gateway(made.source)
    try:
        yield request.param, made.source, gw
    finally:
        gw.close()
        for c in made.closers:
            c.close()


def test_the_capabilities_are_declared(kind: tuple[str, Any, Gateway]) -> None:
    name, source, gw = kind
    caps = Capabilities.of(source)
    assert set(caps.names()) >= EXPECTED[name] and caps == gw.capabilities
    if name == "routed":
        assert caps.point_read is None  # its answers name the host: never the point lane


def test_the_catalog_and_the_state(kind: tuple[str, Any, Gateway], shop_app: StreamsApp) -> None:
    _, source, _ = kind
    assert dict(source.catalog()) == dict(shop_app.catalog())
    assert dict(source.catalog().streams) == {"order_events": ORDER_EVENTS}
    deadline = time.monotonic() + 5
    while source.state is not State.RUNNING and time.monotonic() < deadline:  # a follower's board, a moment
        time.sleep(0.05)
    assert source.state is State.RUNNING


@pytest.mark.parametrize("sql", STATEMENTS)
def test_every_source_answers_as_the_app_does(kind: tuple[str, Any, Gateway], reference: Gateway, sql: str) -> None:
    _, _, gw = kind
    want = reference.sql(sql)
    for _ in range(2):  # the second time a point lookup takes the point lane where the source has one
        got = gw.sql(sql)
        assert got.columns == want.columns
        assert got.rows() == want.rows()
        assert got.position == want.position
        assert [(p.store, p.partition, p.failure_reason, p.position) for p in got.partitions] == \
            [(p.store, p.partition, p.failure_reason, p.position) for p in want.partitions]


def test_a_point_lookup_takes_the_lane_where_there_is_one(kind: tuple[str, Any, Gateway]) -> None:
    name, _, gw = kind
    sql = "SELECT orders FROM revenue WHERE customer = ?"
    gw.sql(sql, ["c05"])
    route = gw.sql(sql, ["c05"]).route
    assert route == ("point lane" if gw.capabilities.point_read is not None else "fast path"), (name, route)


def test_an_unknown_store_is_refused_alike(kind: tuple[str, Any, Gateway]) -> None:
    _, source, gw = kind
    with pytest.raises(UnknownStateStoreException):
        source.query(StateQueryRequest.in_store("nope").with_query(KeyQuery.with_key("x")))
    with pytest.raises(ge.UnknownStoreError):
        gw.sql("SELECT * FROM nope")


def test_the_system_tables_answer(kind: tuple[str, Any, Gateway], shop: Shop) -> None:
    _, _, gw = kind
    parts = gw.sql("SELECT store, partition, role FROM system.partitions ORDER BY 1, 2").rows()
    assert {(s, p) for s, p, _ in parts} == {(name, p) for name, spec in gw.catalog().items()
                                            for p in range(spec.partitions)}
    stores = dict(gw.sql("SELECT store, kind FROM system.stores").rows())
    assert set(stores) == set(gw.catalog())


def test_status_has_the_health_shape(kind: tuple[str, Any, Gateway]) -> None:
    _, _, gw = kind
    status = gw.status()
    assert status is not None and State(status["state"]) and {"status", "reason"} <= set(status["health"])
    assert isinstance(status["stores"], dict)


def test_a_source_that_is_none_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="lacks state, catalog, query"):
        Gateway(object())  # type: ignore[arg-type]
