"""A join of two point lookups on their keys, answered by the residual evaluator exactly as DuckDB answers it.

Property: for generated statements ``FROM t [INNER | LEFT] JOIN u USING (k) / ON t.k = u.k`` with outputs,
filters and aggregates over both stores' columns (NULLs, scalar calls, CASE), over generated scan rows (no
row, one row, a key that matches or not, two rows a side), whenever the evaluator answers, its rows are
exactly DuckDB's for the same residual SQL over the same two relations, and it answers only where each side
has at most one row (several joined rows come out in DuckDB's hash order).

Then through ``Gateway.sql`` on real stores (a key-value, a timestamped and a versioned store, as the shop's
``revenue JOIN last_order USING (key)``): the planner reads one key of each store, DuckDB answers first,
the evaluator after it, with the same rows, columns, Position, partitions and Arrow.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import pytest

import planner
from gateway import Gateway
from gateway.engine.arrow_rows import ScanRows
from gateway.engine.residual.evaluator import Fallback, Unsupported, compile_for, signature
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import make_app, make_shop, write_shop
from tests.gateway.test_residual_eval import A_VALUES, B_VALUES, C_VALUES, SPEC, _same

U = StoreSpec("u", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
              (Column("x", SqlType.VARCHAR), Column("y", SqlType.DOUBLE), Column("z", SqlType.BIGINT)),
              partitions=3, source_topics=("src",))
CATALOG = {"t": SPEC, "u": U}

JOINS = ["JOIN u USING (k)", "JOIN u ON t.k = u.k", "INNER JOIN u ON u.k = t.k", "LEFT JOIN u USING (k)",
         "LEFT OUTER JOIN u ON t.k = u.k", "LEFT JOIN u ON (u.k = t.k)"]
OUTPUTS = ["t.k", "u.k", "t.a", "t.c", "u.x", "u.y", "u.z", "coalesce(u.x, t.c)", "t.a + u.z", "u.y * 2",
           "CASE WHEN u.k IS NULL THEN 'none' ELSE u.x END", "concat(t.c, '/', u.x)", "upper(u.x)", "t.b * u.y",
           "coalesce(u.z, t.a, 0)", "u.x || t.c"]
AGGREGATES = ["count(*)", "count(u.k)", "sum(u.z)", "max(u.x)", "min(t.a)", "avg(u.y)"]
FILTERS = ["u.y > 0", "t.c IS NULL OR u.x = t.c", "coalesce(u.z, 0) >= t.a", "u.k IS NULL", "t.f", "u.x <> ?",
           "t.a < ?"]


def _statement(rnd: random.Random, key: int) -> tuple[str, list[Any]]:
    params: list[Any] = [key]
    aggregate = rnd.random() < 0.2
    if aggregate:
        select = ", ".join(rnd.sample(AGGREGATES, rnd.randint(1, 3)))
    else:
        select = ", ".join(rnd.sample(OUTPUTS, rnd.randint(1, 4)))
    join = rnd.choice(JOINS)
    if "USING" in join and not aggregate and rnd.random() < 0.3:
        select = "k, " + select  # the USING column, unqualified
    where = rnd.choice(["t.k = ?", "u.k = ?", "t.k IN (?, 99)"])
    if where.startswith("u.") and join.startswith("LEFT") and rnd.random() < 0.5:
        where = "t.k = ?"
    if rnd.random() < 0.5:
        extra = rnd.choice(FILTERS)
        if "?" in extra:
            params.append(rnd.choice(["a", "", 3, 2**62, None, 1.5]))
        where += f" AND ({extra})"
    tail = " LIMIT 1" if rnd.random() < 0.1 else ""
    return f"SELECT {select} FROM t {join} WHERE {where}{tail}", params


def _sides(rnd: random.Random, key: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    def t_row(k: int) -> tuple[Any, ...]:
        return (k, rnd.choice(A_VALUES), rnd.choice([0, 5, None]), rnd.choice(B_VALUES), rnd.choice(C_VALUES),
                rnd.choice([True, False, None]), k % 2, None)

    def u_row(k: int) -> tuple[Any, ...]:
        return (k, rnd.choice(C_VALUES), rnd.choice(B_VALUES), rnd.choice(A_VALUES), k % 3, None)

    left = [t_row(key) for _ in range(rnd.choice([0, 1, 1, 1, 1, 2]))]
    right = [u_row(key if rnd.random() < 0.8 else key + 1) for _ in range(rnd.choice([0, 1, 1, 1, 1, 2]))]
    return left, right


def test_the_evaluator_joins_as_duckdb_does() -> None:
    rnd = random.Random(20260502)
    con = duckdb.connect()
    answered = declined = joined_rows = 0
    disagreements: list[str] = []
    for _ in range(2_500):
        key = rnd.randrange(-3, 10)
        sql, params = _statement(rnd, key)
        plan = planner.plan(sql, CATALOG, params=params)
        program = plan.residual_program
        assert program is not None and program.join is not None, sql
        assert not any(scan.full_scan for scan in plan.scans), sql  # two point lookups
        left, right = _sides(rnd, key)
        try:
            ours = compile_for(program, signature(plan.residual_values)).run(left, plan.residual_values, right)
        except (Unsupported, Fallback):
            declined += 1
            continue
        assert len(left) <= 1 and len(right) <= 1
        con.register(plan.scans[0].relation, ScanRows(SPEC, rows=left).to_arrow(False))
        con.register(plan.scans[1].relation, ScanRows(U, rows=right).to_arrow(False))
        try:
            duck = con.execute(plan.residual_sql).fetchall()
        except duckdb.Error as exc:
            disagreements.append(f"{sql} {params!r} over {left!r} {right!r}: ours {ours!r}, DuckDB raised {exc}")
            continue
        answered += 1
        joined_rows += bool(duck) and "count(" not in sql
        if not _same(ours, duck):
            disagreements.append(f"{sql} {params!r} over {left!r} {right!r}: ours {ours!r}, DuckDB {duck!r}")
    assert not disagreements, "\n".join(disagreements[:10])
    assert answered > 1_000 and declined > 200 and joined_rows > 300, (answered, declined, joined_rows)


@pytest.mark.parametrize("sql", [
    "SELECT t.a FROM t RIGHT JOIN u USING (k) WHERE t.k = 1",
    "SELECT t.a FROM t FULL JOIN u USING (k) WHERE t.k = 1",
    "SELECT t.a FROM t JOIN u ON t.a = u.k WHERE t.k = 1",  # not t's key
    "SELECT t.a FROM t JOIN u ON t.k = u.k AND u.z > 0 WHERE t.k = 1",
    "SELECT * FROM t JOIN u USING (k) WHERE t.k = 1",
    "SELECT t.a, count(*) FROM t JOIN u USING (k) WHERE t.k = 1 GROUP BY t.a",
    "SELECT k FROM t JOIN u ON t.k = u.k WHERE t.k = 1",  # k is ambiguous: DuckDB's error
    "SELECT t.a FROM t, u WHERE t.k = u.k AND t.k = 1",
    "SELECT t.a FROM t NATURAL JOIN u WHERE t.k = 1",
])
def test_other_joins_are_duckdbs(sql: str) -> None:
    try:
        plan = planner.plan(sql, CATALOG, session={"table_scans": True})
    except planner.PlanningError:
        return
    assert plan.residual_program is None


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp: Path = tmp_path_factory.mktemp("residual-join")
    app = StreamsApp(StoreTopology([SPEC, U]), application_id="residual-join", state_dir=tmp / "state",
                     coordination_base=tmp / "coord")
    app.start()
    pos = Position.from_map({"src": {0: 20}})
    app.writer("t").write_batch(1, [Change(k, (k * 3, k, k / 4, f"c{k}", k % 2 == 0)) for k in range(10)], pos)
    app.writer("u").write_batch(1, [Change(k, (f"x{k}" if k != 4 else None, k * 1.5, 2**62 if k == 7 else k))
                                    for k in range(2, 12)], pos)
    g = Gateway(app)
    yield g
    g.close()
    app.close()


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT t.k, t.c, u.x FROM t JOIN u USING (k) WHERE t.k = ?", [3]),
    ("SELECT k, coalesce(u.x, 'none'), t.a + u.z FROM t LEFT JOIN u USING (k) WHERE t.k = ?", [1]),  # no u row
    ("SELECT t.c, u.y FROM t JOIN u ON u.k = t.k WHERE u.k = ? AND u.y > 0", [5]),
    ("SELECT count(*), max(u.x) FROM t JOIN u ON t.k = u.k WHERE t.k = ?", [0]),  # no u row: no joined row
    ("SELECT t.c, CASE WHEN u.x IS NULL THEN '-' ELSE upper(u.x) END FROM t LEFT JOIN u USING (k) WHERE t.k = ?",
     [4]),
])
def test_gateway_joins_the_same_with_and_without_duckdb(gw: Gateway, sql: str, params: list[Any]) -> None:
    first = gw.sql(sql, params=params)
    program = gw._plan(sql, params, {}).residual_program
    assert program is not None and gw._programs.columns(program) is not None
    second = gw.sql(sql, params=params)
    assert first.route == "duckdb" and second.route == "evaluator"
    assert second.columns == first.columns
    assert _same(second.rows(), first.rows())
    assert second.position == first.position and second.partitions == first.partitions
    assert second.to_arrow().equals(first.to_arrow())


def test_several_rows_a_side_stay_duckdbs(gw: Gateway) -> None:
    sql = "SELECT t.k, u.x FROM t JOIN u USING (k) WHERE t.k IN (?, ?)"
    assert sorted(gw.sql(sql, params=[2, 3]).rows()) == [(2, "x2"), (3, "x3")]
    again = gw.sql(sql, params=[2, 3])
    assert again.route == "duckdb" and sorted(again.rows()) == [(2, "x2"), (3, "x3")]
    assert gw.sql(sql, params=[3, 99]).route == "duckdb"  # one row a side: DuckDB's answer teaches the evaluator
    assert gw.sql(sql, params=[4, 99]).route == "evaluator"
    assert gw.sql(sql, params=[2, 3]).route == "duckdb"


def test_an_overflow_in_a_joined_row_is_duckdbs_error(gw: Gateway) -> None:
    from gateway.engine.errors import ExecutionError

    sql = "SELECT t.a * u.z FROM t JOIN u USING (k) WHERE t.k = ?"
    assert gw.sql(sql, params=[3]).rows() == [(27,)]
    assert gw.sql(sql, params=[3]).route == "evaluator"
    with pytest.raises(ExecutionError, match="Overflow"):
        gw.sql(sql, params=[7]).rows()


@pytest.fixture(scope="module")
def shop_gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    app = make_app(tmp_path_factory.mktemp("residual-join-shop") / "state", app_id="residual-join-shop")
    app.start()
    shop = make_shop()
    write_shop(app, shop)
    g = Gateway(app)
    yield g, shop
    g.close()
    app.close()


@pytest.mark.parametrize("sql", [
    "SELECT r.customer, l.amount FROM revenue r JOIN last_order l USING (customer) WHERE r.customer = ?",
    "SELECT customer, l.amount, x.amount FROM latest x LEFT JOIN last_order l USING (customer) WHERE x.customer = ?",
    "SELECT r.revenue / r.orders, l.amount FROM revenue r JOIN latest l ON l.customer = r.customer "
    "WHERE l.customer = ?",
])
def test_the_shops_stores_join_on_their_keys(shop_gw: Any, sql: str) -> None:
    """Key-value, timestamped and versioned (current version) stores: two point lookups, the evaluator's."""
    gw, shop = shop_gw
    customer = sorted(shop.versions)[3]
    plan = gw._plan(sql, [customer], {})
    assert not any(scan.full_scan for scan in plan.scans)
    first = gw.sql(sql, params=[customer])
    second = gw.sql(sql, params=[customer])
    assert first.route == "duckdb" and second.route == "evaluator"
    assert len(first.rows()) == 1 and _same(second.rows(), first.rows())
    assert second.columns == first.columns and second.to_arrow().equals(first.to_arrow())
    assert gw.sql(sql, params=["nobody"]).rows() == []
