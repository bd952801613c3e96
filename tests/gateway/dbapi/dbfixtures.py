"""Shared set-up for the DB-API and SQLAlchemy tests (no tests here).

A real ``StreamsApp`` over ``StoreTopology`` specs in pytest's tmp dir, rows
written the way a pipeline writes them (``writer(name).write_batch``), a real
``Gateway`` on top, and for the remote path a real HTTP server (waitress)
bound to 127.0.0.1 on an ephemeral port.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position

__all__ = ["ORDERS", "LATE", "ORDER_ROWS", "make_app", "fill_orders", "serve"]

ORDERS = StoreSpec(
    name="orders",
    kind=StoreKind.KEY_VALUE,
    key=Column("customer", SqlType.BIGINT, nullable=False),
    values=(
        Column("name", SqlType.VARCHAR),
        Column("amount", SqlType.DOUBLE),
        Column("vip", SqlType.BOOLEAN),
        Column("first_order", SqlType.TIMESTAMP),
        Column("signup", SqlType.DATE),
    ),
    partitions=2,
    source_topics=("shop",),
)

# A second store on the same topic that is written less often: it lags behind ``orders``.
LATE = StoreSpec(
    name="late_orders",
    kind=StoreKind.KEY_VALUE,
    key=Column("customer", SqlType.BIGINT, nullable=False),
    values=(Column("amount", SqlType.DOUBLE),),
    partitions=2,
    source_topics=("shop",),
)

_T0 = datetime(2024, 5, 1, 12, 30, 15, tzinfo=timezone.utc)

ORDER_ROWS: list[tuple[Any, ...]] = [
    (1, "ada", 10.5, True, _T0, 19000),
    (2, "bob", 3.25, False, _T0.replace(hour=13), 19001),
    (3, "cy", 7.0, None, _T0.replace(day=2), 19002),
    (4, None, 0.0, False, None, None),
    (5, "dee's", 99.75, True, _T0.replace(minute=0), 19003),
]


def make_app(state_dir: Path, specs: Iterable[StoreSpec]) -> StreamsApp:
    # coordination_base too: tests write only under pytest's tmp dir.
    app = StreamsApp(StoreTopology(list(specs)), application_id="dbapi-tests", state_dir=state_dir / "state",
                     coordination_base=state_dir / "coord")
    app.start()
    return app


def fill_orders(app: StreamsApp) -> Position:
    """orders at shop/0 offset 10, late_orders behind at offset 3. Returns the orders position."""
    changes = [Change(r[0], tuple(r[1:]), timestamp=1_714_566_615_000) for r in ORDER_ROWS]
    pos = Position.from_map({"shop": {0: 10}})
    app.writer("orders").write_batch(1, changes, pos)
    app.writer("late_orders").write_batch(1, [Change(1, (10.5,)), Change(2, (3.25,))],
                                          Position.from_map({"shop": {0: 3}}))
    return pos


@contextmanager
def serve(gw: Gateway, config: GatewayConfig | None = None) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (ephemeral port) over ``gw``; yields its base URL."""
    from waitress.server import create_server

    from gateway.http import create_app

    server = create_server(create_app(gw, config or gw.config), host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, name="iqgate-test-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        # server.close() alone leaves waitress's wake-up trigger in the loop's map, so the loop would
        # not end; closing channels from this thread races the loop's select(). So the loop thread
        # itself closes every channel (its map empties and loop() returns), then the workers stop.
        def close_all() -> None:
            for channel in list(server._map.values()):
                channel.handle_close()

        try:
            server.trigger.pull_trigger(close_all)
        except OSError:  # EBADF: the loop woke for another event first, ran close_all and closed the trigger
            pass
        thread.join(timeout=5)
        server.task_dispatcher.shutdown()
