"""The SQLAlchemy dialect over real HTTP on 127.0.0.1 and in-process: reflection, select(), pandas.

Reflection goes through SHOW TABLES / DESCRIBE on the DB-API connection, so
both transports are checked with the same assertions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from gateway.dbapi.sa_dialect import IqgateDialect, sa_type_for
from gateway.engine.gateway import Gateway
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.dbapi.dbfixtures import (
    LATE,
    ORDER_ROWS,
    ORDERS,
    fill_orders,
    make_app,
    serve,
)

CLICKS = StoreSpec(
    name="clicks_per_min", kind=StoreKind.WINDOW, key=Column("page", SqlType.VARCHAR, nullable=False),
    values=(Column("clicks", SqlType.BIGINT),), partitions=1, source_topics=("shop",), window_size_ms=60_000,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    app = make_app(tmp_path_factory.mktemp("sa"), [ORDERS, LATE, CLICKS])
    pos = fill_orders(app)
    # Two windows of one key: rows only a (key, window) primary key tells apart.
    app.writer("clicks_per_min").write_batch(1, [
        Change("home", (3,), window_start=0, window_end=60_000),
        Change("home", (5,), window_start=60_000, window_end=120_000),
    ], Position.from_map({"shop": {0: 10}}))
    gw = Gateway(app)
    with serve(gw) as url:
        yield {"gw": gw, "url": url, "pos": pos}
    gw.close()
    app.close()


@pytest.fixture(params=["inprocess", "remote"])
def engine(request: pytest.FixtureRequest, world: dict[str, Any]) -> Iterator[sa.Engine]:
    if request.param == "inprocess":
        eng = sa.create_engine("iqgate://", connect_args={"gateway": world["gw"]}, pool_pre_ping=True)
    else:
        eng = sa.create_engine("iqgate://" + world["url"].removeprefix("http://"), pool_pre_ping=True)
    yield eng
    eng.dispose()


def test_entry_point_registers_the_dialect() -> None:
    eps = metadata.entry_points(group="sqlalchemy.dialects")
    assert {ep.name: ep.value for ep in eps}["iqgate"] == "iqgate_client.sqlalchemy:IqgateDialect"
    assert sa.create_engine("iqgate://localhost:1").dialect.__class__ is IqgateDialect


def test_create_connect_args() -> None:
    def args(url: str) -> Any:
        return IqgateDialect().create_connect_args(sa.engine.make_url(url))

    assert args("iqgate://h:8080") == (["http://h:8080"], {})
    assert args('iqgate://:tok@h:1/main?monotonic=true&partial=off&wait_ms=50&timeout=2.5'
                '&position={"t":{"0":3}}&protocol=https') == (
        ["https://h:1"],
        {"token": "tok", "monotonic": True, "partial": False, "wait_ms": 50, "timeout": 2.5,
         "position": {"t": {"0": 3}}},
    )
    assert args("iqgate://") == ([], {})
    for bad, match in [
        ("iqgate://h:1/sales", "one schema"),
        ("iqgate://h:1?colour=red", "unknown URL option"),
        ("iqgate://h:1?monotonic=maybe", "true or false"),
        ("iqgate://h:1?wait_ms=soon", "integer"),
        ("iqgate://h:1?timeout=x", "seconds"),
        ("iqgate://h:1?protocol=ftp", "http or https"),
        ("iqgate://h:1?position={bad", "not JSON"),
    ]:
        with pytest.raises(sa_exc.ArgumentError, match=match):
            args(bad)


def test_type_mapping() -> None:
    assert isinstance(sa_type_for("BIGINT"), sa.BigInteger)
    assert isinstance(sa_type_for("VARCHAR"), sa.String)
    assert isinstance(sa_type_for("DOUBLE"), sa.Float)
    tz = sa_type_for("TIMESTAMP WITH TIME ZONE")
    assert isinstance(tz, sa.DateTime) and tz.timezone
    dec = sa_type_for("DECIMAL(10,2)")
    assert isinstance(dec, sa.Numeric) and (dec.precision, dec.scale) == (10, 2)
    assert isinstance(sa_type_for("STRUCT(a INTEGER)"), sa.types.NullType)


def test_reflection(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    assert insp.get_schema_names() == ["main"]
    assert insp.default_schema_name == "main"
    assert insp.get_table_names() == ["clicks_per_min", "late_orders", "orders"]
    assert insp.get_view_names() == []
    assert insp.has_table("orders") and not insp.has_table("nowhere")
    assert not insp.has_table("orders", schema="other")
    cols = {c["name"]: c for c in insp.get_columns("orders")}
    assert list(cols) == ["customer", "name", "amount", "vip", "first_order", "signup"]
    assert isinstance(cols["customer"]["type"], sa.BigInteger) and not cols["customer"]["nullable"]
    assert isinstance(cols["name"]["type"], sa.String) and cols["name"]["nullable"]
    assert isinstance(cols["amount"]["type"], sa.Float)
    assert isinstance(cols["vip"]["type"], sa.Boolean)
    assert isinstance(cols["first_order"]["type"], sa.DateTime)
    assert isinstance(cols["signup"]["type"], sa.Date)
    assert insp.get_pk_constraint("orders")["constrained_columns"] == ["customer"]
    assert insp.get_foreign_keys("orders") == [] and insp.get_indexes("orders") == []
    assert insp.get_unique_constraints("orders") == [] and insp.get_check_constraints("orders") == []
    assert insp.get_table_comment("orders") == {"text": "key_value"}
    with pytest.raises(sa_exc.NoSuchTableError):
        insp.get_columns("nowhere")
    with pytest.raises(sa_exc.NoSuchTableError):
        insp.get_table_comment("nowhere")


def test_metadata_reflect_and_select(engine: sa.Engine) -> None:
    md = sa.MetaData()
    orders = sa.Table("orders", md, autoload_with=engine)
    assert [c.name for c in orders.primary_key] == ["customer"]
    q = (sa.select(orders.c.customer, orders.c.name)
         .where(orders.c.amount > sa.bindparam("least"))
         .order_by(orders.c.customer.desc())
         .limit(2))
    with engine.connect() as conn:
        rows = conn.execute(q, {"least": 5.0}).all()
        assert [tuple(r) for r in rows] == [(5, "dee's"), (3, "cy")]
        key = conn.execute(sa.select(orders.c.first_order).where(orders.c.customer == 1)).scalar_one()
        assert key.astimezone(dt.timezone.utc) == ORDER_ROWS[0][4]
        page = conn.execute(sa.select(orders.c.customer).order_by(orders.c.customer).limit(2).offset(1)).all()
        assert [r[0] for r in page] == [2, 3]
        in_ = conn.execute(sa.select(sa.func.count()).select_from(orders)
                           .where(orders.c.customer.in_([1, 2, 9]))).scalar_one()
        assert in_ == 2


def test_compiled_sql_has_literal_limit_and_qmark_params(engine: sa.Engine) -> None:
    t = sa.table("orders", sa.column("customer"), sa.column("name"))
    sql = str(sa.select(t.c.name).where(t.c.customer == 5).limit(3).compile(dialect=engine.dialect))
    assert "customer = ?" in sql and "LIMIT 3" in sql


def test_pandas_read_sql_with_parameters(engine: sa.Engine) -> None:
    df = pd.read_sql("SELECT customer, name FROM orders WHERE customer >= ? ORDER BY customer", engine,
                     params=(4,))
    assert df.to_dict("records") == [{"customer": 4, "name": None}, {"customer": 5, "name": "dee's"}]
    df2 = pd.read_sql(sa.text("SELECT name FROM orders WHERE customer = :c"), engine, params={"c": 2})
    assert df2["name"].tolist() == ["bob"]


def test_pandas_read_sql_table(engine: sa.Engine) -> None:
    df = pd.read_sql_table("orders", engine)
    assert sorted(df["customer"].tolist()) == [1, 2, 3, 4, 5]
    assert list(df.columns) == ["customer", "name", "amount", "vip", "first_order", "signup"]


def test_errors_surface_as_dbapi_errors(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        with pytest.raises(sa_exc.ProgrammingError):
            conn.exec_driver_sql("SELECT * FROM nowhere")
        with pytest.raises(sa_exc.ProgrammingError):
            conn.exec_driver_sql("INSERT INTO orders VALUES (9, 'x', 1.0, true, NULL, NULL)")


def test_pool_checkin_and_ping(engine: sa.Engine) -> None:
    for _ in range(3):  # checkin calls rollback; pre-ping runs SELECT 1 on checkout
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
    info = engine.dialect.server_version_info
    assert info and all(isinstance(p, int) for p in info)


def test_in_process_without_a_gateway_is_a_clear_error() -> None:
    eng = sa.create_engine("iqgate://")
    with pytest.raises(sa_exc.InterfaceError, match="exactly one"):
        eng.connect()


def test_unreachable_server_counts_as_a_disconnect() -> None:
    import socket

    from gateway import dbapi

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    eng = sa.create_engine(f"iqgate://127.0.0.1:{port}?timeout=2")
    with pytest.raises(sa_exc.OperationalError) as info:
        eng.connect().exec_driver_sql("SELECT 1")
    assert info.value.connection_invalidated
    assert isinstance(info.value.orig, dbapi.OperationalError)
    assert not eng.dialect.is_disconnect(dbapi.ProgrammingError("bad SQL"), None, None)


def test_window_store_primary_key_includes_the_window(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    assert insp.get_pk_constraint("clicks_per_min")["constrained_columns"] == ["page", "window_start", "window_end"]
    assert insp.get_table_comment("clicks_per_min") == {"text": "window"}
    md = sa.MetaData()
    clicks = sa.Table("clicks_per_min", md, autoload_with=engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(clicks.c.clicks).where(clicks.c.page == "home")
                            .order_by(clicks.c.window_start)).all()
    assert [r[0] for r in rows] == [3, 5]


def test_other_schemas_do_not_exist(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    with pytest.raises(sa_exc.NoSuchTableError, match="one schema"):
        insp.get_columns("orders", schema="sales")
    with pytest.raises(sa_exc.NoSuchTableError, match="one schema"):
        insp.get_table_names(schema="sales")


def test_non_literal_limit_stays_a_parameter() -> None:
    t = sa.table("orders", sa.column("customer"))
    sql = str(sa.select(t.c.customer).limit(sa.bindparam("n")).compile(dialect=IqgateDialect()))
    assert sql.rstrip().endswith("LIMIT ?")


def test_url_position_bound_reaches_the_server(world: dict[str, Any]) -> None:
    host = world["url"].removeprefix("http://")
    ahead = sa.create_engine(f'iqgate://{host}?position={{"shop":{{"0":999}}}}&wait_ms=10')
    with pytest.raises(sa_exc.OperationalError, match="NOT_UP_TO_BOUND"):
        with ahead.connect() as conn:
            conn.exec_driver_sql("SELECT name FROM orders WHERE customer = 1")
    caught_up = sa.create_engine(f'iqgate://{host}?position={{"shop":{{"0":10}}}}')
    with caught_up.connect() as conn:
        assert conn.exec_driver_sql("SELECT name FROM orders WHERE customer = 1").scalar_one() == "ada"
    ahead.dispose()
    caught_up.dispose()
