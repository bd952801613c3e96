"""Property: for random data and random predicate trees, the plan (IQv2 pushdown + residual DuckDB) returns
exactly the rows DuckDB returns over the full store content.

Whatever the planner pushes into KeyQuery/RangeQuery/partition selection,
and whatever it leaves to DuckDB, must not change the answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import Gateway
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position

INTS = StoreSpec("ints", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                 (Column("a", SqlType.BIGINT), Column("b", SqlType.DOUBLE), Column("c", SqlType.VARCHAR)),
                 partitions=3, source_topics=("t",))
STRS = StoreSpec("strs", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
                 (Column("a", SqlType.BIGINT), Column("b", SqlType.DOUBLE), Column("c", SqlType.VARCHAR)),
                 partitions=2, source_topics=("t",))
SPECS = {"ints": INTS, "strs": STRS}

WORDS = ["", "a", "ab", "b", "ba", "z", "Z", "é", "a b", "it's"]
small_int = st.integers(-20, 20)
word = st.sampled_from(WORDS)


def _lit(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def _values(col: str, store: str) -> st.SearchStrategy:
    if col == "k":
        return small_int if store == "ints" else word
    return {"a": small_int, "b": st.floats(-20, 20, allow_nan=False).map(lambda x: round(x, 1)), "c": word}[col]


def _leaf(store: str) -> st.SearchStrategy[str]:
    @st.composite
    def leaf(draw: st.DrawFn) -> str:
        col = draw(st.sampled_from(["k", "k", "k", "a", "b", "c"]))
        vals = _values(col, store)
        kind = draw(st.sampled_from(["cmp", "cmp", "flip", "between", "in", "null"]))
        if kind == "cmp":
            return f"{col} {draw(st.sampled_from(['=', '<>', '<', '<=', '>', '>=']))} {_lit(draw(vals))}"
        if kind == "flip":
            return f"{_lit(draw(vals))} {draw(st.sampled_from(['=', '<', '<=', '>', '>=']))} {col}"
        if kind == "between":
            return f"{col} BETWEEN {_lit(draw(vals))} AND {_lit(draw(vals))}"
        if kind == "in":
            items = draw(st.lists(vals, min_size=1, max_size=4))
            neg = draw(st.booleans()) and col != "k"
            return f"{col} {'NOT ' if neg else ''}IN ({', '.join(_lit(v) for v in items)})"
        return f"{col} IS {'NOT ' if draw(st.booleans()) else ''}NULL"

    return leaf()


def _tree(store: str) -> st.SearchStrategy[str]:
    return st.recursive(
        _leaf(store),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda t: f"({t[0]} AND {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]} OR {t[1]})"),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=5,
    )


def _row(store: str) -> st.SearchStrategy:
    return st.tuples(
        _values("k", store),
        st.one_of(st.none(), small_int),
        st.one_of(st.none(), _values("b", store)),
        st.one_of(st.none(), word),
    )


def _rows(store: str) -> st.SearchStrategy[list]:
    return st.lists(_row(store), max_size=25, unique_by=lambda r: r[0])


class Loader:
    """Replaces a store's whole content with a new batch (deleting the old keys), one app for all examples."""

    def __init__(self, app: StreamsApp) -> None:
        self.app = app
        self.batch = itertools.count(1)
        self.keys: dict[str, set] = {"ints": set(), "strs": set()}

    def load(self, store: str, rows: list[tuple]) -> None:
        n = next(self.batch)
        new = {r[0] for r in rows}
        changes = [Change(k, None) for k in self.keys[store] - new] + [Change(r[0], tuple(r[1:])) for r in rows]
        self.app.writer(store).write_batch(n, changes, Position.from_map({"t": {0: n}}))
        self.keys[store] = new


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loader]:
    state: Path = tmp_path_factory.mktemp("prop")
    app = StreamsApp(StoreTopology(tuple(SPECS.values())), application_id="prop", state_dir=str(state))
    app.start()
    yield Loader(app)
    app.close()


def _oracle(store: str, rows: list[tuple], sql: str) -> list[tuple]:
    spec = SPECS[store]
    con = duckdb.connect()
    ktype = "BIGINT" if spec.key.type is SqlType.BIGINT else "VARCHAR"
    con.execute(f"CREATE TABLE {store} (k {ktype}, a BIGINT, b DOUBLE, c VARCHAR)")
    if rows:
        con.executemany(f"INSERT INTO {store} VALUES (?, ?, ?, ?)", [list(r) for r in rows])
    return con.execute(sql).fetchall()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data(), store=st.sampled_from(["ints", "strs"]))
def test_plan_over_stores_equals_duckdb_over_everything(loader: Loader, data: st.DataObject, store: str) -> None:
    rows = data.draw(_rows(store), label="rows")
    pred = data.draw(_tree(store), label="where")
    loader.load(store, rows)
    gw = Gateway(loader.app)
    sql = f"SELECT k, a, b, c FROM {store} WHERE {pred}"
    got = gw.sql(sql).rows()
    want = _oracle(store, rows, sql)
    assert sorted(got, key=repr) == sorted(want, key=repr), gw.explain(sql)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data(), store=st.sampled_from(["ints", "strs"]))
def test_ordered_limited_plans_equal_duckdb(loader: Loader, data: st.DataObject, store: str) -> None:
    rows = data.draw(_rows(store), label="rows")
    pred = data.draw(_tree(store), label="where")
    desc = data.draw(st.booleans(), label="desc")
    limit = data.draw(st.integers(0, 8), label="limit")
    loader.load(store, rows)
    gw = Gateway(loader.app)
    sql = f"SELECT k, a FROM {store} WHERE {pred} ORDER BY k {'DESC' if desc else 'ASC'} LIMIT {limit}"
    assert gw.sql(sql).rows() == _oracle(store, rows, sql), gw.explain(sql)
