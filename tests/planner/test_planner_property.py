"""Property: for random key predicates, the planned answer equals DuckDB's answer on the raw rows.

Complements the hand-picked differential cases: hypothesis combines
comparisons, IN lists, OR-ed equalities, BETWEEN, value filters, ORDER BY key
and LIMIT on integer and string keys, with literals and with parameters,
straight on the store or through a BI-style ``virtual_table`` wrapper.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from gateway import Gateway
from tests.planner.reference_store import product_gateway, run_direct, run_sql
from tests.planner.test_planner_differential import CATALOG, STORES

INT_KEYS = [r["k"] for r in STORES["ints"].rows]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with product_gateway(STORES, tmp_path_factory.mktemp("property")) as g:
        yield g


STR_KEYS = [r["k"] for r in STORES["strs"].rows]


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


@st.composite
def predicates(draw: st.DrawFn, keys: list, extra: st.SearchStrategy) -> tuple[str, list]:
    """One key predicate as SQL, with the parameters it uses."""
    value = st.one_of(st.sampled_from(keys), extra)
    kind = draw(st.sampled_from(["cmp", "in", "or", "between", "param"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "<", "<=", ">", ">="]))
        v = draw(value)
        return (f"k {op} {_literal(v)}" if draw(st.booleans()) else f"{_literal(v)} {_FLIP[op]} k"), []
    if kind == "in":
        vs = draw(st.lists(value, min_size=1, max_size=4))
        return f"k IN ({', '.join(map(_literal, vs))})", []
    if kind == "or":
        vs = draw(st.lists(value, min_size=2, max_size=3))
        return "(" + " OR ".join(f"k = {_literal(v)}" for v in vs) + ")", []
    if kind == "between":
        a, b = draw(value), draw(value)
        return f"k BETWEEN {_literal(a)} AND {_literal(b)}", []
    op = draw(st.sampled_from(["=", "<", ">="]))
    return f"k {op} ?", [draw(value)]


_FLIP = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@st.composite
def statements(draw: st.DrawFn) -> tuple[str, list]:
    store, keys, extra = draw(st.sampled_from([
        ("ints", INT_KEYS, st.integers(-40, 70)),
        ("strs", STR_KEYS, st.text(alphabet="abmz\x00é", max_size=3)),
    ]))
    parts, params = [], []
    for _ in range(draw(st.integers(0, 3))):
        sql, ps = draw(predicates(keys, extra))
        parts.append(sql)
        params += ps
    if draw(st.booleans()):
        parts.append("v = 'x'")
    where = (" WHERE " + " AND ".join(parts)) if parts else ""
    order = draw(st.sampled_from(["", " ORDER BY k", " ORDER BY k DESC"]))
    limit = f" LIMIT {draw(st.integers(0, 5))}" if order and draw(st.booleans()) else ""
    source = draw(st.sampled_from([store, f"(SELECT k, v, n FROM {store}) AS virtual_table", f"(SELECT * FROM {store}) t"]))
    return f"SELECT k, v, n FROM {source}{where}{order}{limit}", params


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(statements())
def test_planned_answer_equals_direct_answer(gw: Gateway, statement: tuple[str, list]) -> None:
    sql, params = statement
    planner.plan(sql, CATALOG, params=params or None)  # plans without error on its own too
    got = run_sql(gw, sql, params or None)
    want = run_direct(sql, STORES, params or None)
    if "ORDER BY" in sql:
        assert got == want
    else:
        assert sorted(map(repr, got)) == sorted(map(repr, want))
