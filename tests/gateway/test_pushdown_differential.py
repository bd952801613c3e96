"""Differential: random statements over every store kind, answered with pushdown, against DuckDB over full scans.

The property test (test_property_plans.py) checks predicate trees on two
key-value stores. This one covers the shop's five stores (key-value with
VARCHAR and BIGINT keys, window, versioned, timestamped) and the shapes BI
tools send: aggregates, GROUP BY, ORDER BY … LIMIT, joins, IN subqueries,
CTEs, UNION ALL, window functions, point lookups with a residual, and WHERE
chains long enough to be rebuilt balanced (all OR, all AND, or mixed). Each
store's full scan (no predicate, so nothing pushed) is loaded into a plain
DuckDB table; the same statement there must give the same rows. Literals are
drawn from the stored values, nudged across them, so bounds land on, between
and beyond keys and times. Seeded: a failure names its statement and replays.
"""

from __future__ import annotations

import datetime
import decimal
import math
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from gateway import Gateway
from planner.rewrites import BALANCE_MIN_TERMS
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import make_app, make_shop, write_shop

STATEMENTS = 150  # per seed: ~3 s each here


@pytest.fixture(scope="module")
def shop_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, duckdb.DuckDBPyConnection,
                                                                          dict[str, Any]]]:
    app: StreamsApp = make_app(tmp_path_factory.mktemp("differential"), app_id="differential")
    app.start()
    write_shop(app, make_shop(seed=11, n_orders=400, n_customers=30))
    gw = Gateway(app)
    con = duckdb.connect()
    stores: dict[str, Any] = {}
    for store in ("revenue", "accounts", "per_min", "latest", "last_order"):
        table = gw.sql(f"SELECT * FROM {store}").to_arrow()
        assert table.num_rows > 0, store
        con.register("full_scan", table)
        con.execute(f"CREATE TABLE {store} AS SELECT * FROM full_scan")
        con.unregister("full_scan")
        stores[store] = {f.name: (str(f.type), table.column(f.name).to_pylist()) for f in table.schema}
    yield gw, con, stores
    gw.close()
    app.close()


class Statements:
    """Random statements over the stores' columns; literals drawn from (and beside) the stored values."""

    def __init__(self, seed: int, stores: dict[str, Any]) -> None:
        self.r = random.Random(seed)
        self.stores = stores

    def lit(self, v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if isinstance(v, datetime.datetime):
            return f"TIMESTAMPTZ '{v.isoformat(sep=' ')}'"
        return repr(v)

    def value(self, store: str, col: str, *, null: bool = False) -> Any:
        r = self.r
        typ, values = self.stores[store][col]
        v = r.choice([x for x in values if x is not None])
        roll = r.random()
        if null and roll < 0.1:
            return None
        if roll < 0.3 and isinstance(v, (int, float)) and not isinstance(v, bool):
            v += r.choice([-1, 1, 0.5])
        elif roll < 0.3 and isinstance(v, str):
            v += r.choice(["", "0", "x"])
        elif roll < 0.3 and isinstance(v, datetime.datetime):
            v += datetime.timedelta(milliseconds=r.choice([-1, 1, 30_000]))
        return v

    def leaf(self, store: str, alias: str = "") -> str:
        r = self.r
        col = r.choice(list(self.stores[store]))
        typ = self.stores[store][col][0]
        c = alias + col
        kind = r.choice(["cmp", "cmp", "flip", "in", "between", "null", "arith"])
        if all(v is None for v in self.stores[store][col][1]):
            kind = "null"  # valid_to of the current versions: nothing to compare with
        if kind == "cmp":
            return f"{c} {r.choice(['=', '=', '<>', '<', '<=', '>', '>='])} {self.lit(self.value(store, col))}"
        if kind == "flip":
            return f"{self.lit(self.value(store, col))} {r.choice(['=', '<', '>='])} {c}"
        if kind == "in":
            items = [self.lit(self.value(store, col, null=True)) for _ in range(r.randint(1, 6))]
            if items == ["NULL"]:
                items.append(self.lit(self.value(store, col)))
            return f"{c} {'NOT ' if r.random() < 0.2 else ''}IN ({', '.join(items)})"
        if kind == "between":
            return f"{c} BETWEEN {self.lit(self.value(store, col))} AND {self.lit(self.value(store, col))}"
        if kind == "null":
            return f"{c} IS {'NOT ' if r.random() < 0.5 else ''}NULL"
        if typ in ("int64", "double"):
            return f"{c} {r.choice(['+ 1 >', '* 2 <', '- 1 ='])} {self.lit(self.value(store, col))}"
        if typ.startswith("timestamp"):
            return f"{c} >= {self.lit(self.value(store, col))} - INTERVAL 1 MINUTE"
        return f"{c} = {self.lit(self.value(store, col))}"

    def tree(self, store: str, alias: str = "", depth: int = 0) -> str:
        roll = self.r.random()
        if depth > 2 or roll < 0.45:
            return self.leaf(store, alias)
        if roll < 0.72:
            return f"({self.tree(store, alias, depth + 1)} AND {self.tree(store, alias, depth + 1)})"
        if roll < 0.93:
            return f"({self.tree(store, alias, depth + 1)} OR {self.tree(store, alias, depth + 1)})"
        return f"NOT ({self.tree(store, alias, depth + 1)})"

    def chain(self, store: str, alias: str = "") -> str:
        """A chain longer than BALANCE_MIN_TERMS (the planner rebuilds it balanced): all OR, all AND, or mixed.

        Each term picks out (OR) or leaves out (AND) about one row, so a term lost
        or misplaced in the rebuilt tree changes the answer.
        """
        r = self.r
        key = next(iter(self.stores[store]))
        joins = r.choice([[" OR "], [" AND "], [" OR ", " AND ", " OR "]])
        parts: list[str] = []
        for i in range(r.randint(BALANCE_MIN_TERMS, 3 * BALANCE_MIN_TERMS)):
            join = r.choice(joins)
            one = f"{alias}{key} = {self.lit(self.value(store, key))}"
            term = (f"({one} AND {self.leaf(store, alias)})" if join == " OR " or r.random() < 0.5
                    else f"NOT ({one} AND {self.leaf(store, alias)})")
            parts += [join, term] if i else [term]
        return "".join(parts)

    def statement(self) -> tuple[str, bool]:
        """(SQL, whether its order is total)."""
        r = self.r
        store = r.choice(list(self.stores))
        cols = list(self.stores[store])
        key = cols[0]
        every = ", ".join(cols)
        where = f" WHERE {self.chain(store) if r.random() < 0.15 else self.tree(store)}" if r.random() < 0.92 else ""
        shape = r.choice(["plain", "plain", "agg", "group", "order", "join", "sub", "cte", "union", "window", "point"])
        if shape == "agg":
            return (f"SELECT count(*), min({r.choice(cols)}), max({r.choice(cols)}), count(DISTINCT {r.choice(cols)}) "
                    f"FROM {store}{where}"), False
        if shape == "group":
            g = r.choice(cols)
            return f"SELECT {g}, count(*) AS n FROM {store}{where} GROUP BY {g}", False
        if shape == "order":
            d = r.choice(["ASC", "DESC"])
            order = ", ".join(f"{c} {d}" for c in cols)
            return f"SELECT {every} FROM {store}{where} ORDER BY {order} LIMIT {r.randint(0, 12)}", True
        if shape in ("join", "sub") and key == "customer":
            other = r.choice([s for s in ("revenue", "latest", "last_order", "per_min") if s != store])
            if shape == "sub":
                return (f"SELECT {every} FROM {store} WHERE customer IN (SELECT customer FROM {other} "
                        f"WHERE {self.tree(other)})"), False
            on = f" WHERE {self.tree(store, 'a.')}" + (f" AND {self.tree(other, 'b.')}" if r.random() < 0.5 else "")
            return (f"SELECT a.customer, count(*) AS n FROM {store} a {r.choice(['JOIN', 'LEFT JOIN'])} {other} b "
                    f"ON a.customer = b.customer{on} GROUP BY a.customer"), False
        if shape == "cte":
            return f"WITH x AS (SELECT {every} FROM {store}{where}) SELECT count(*) FROM x", False
        if shape == "union":
            return f"SELECT {key} FROM {store}{where} UNION ALL SELECT {key} FROM {store} WHERE {self.tree(store)}", False
        if shape == "window":
            return f"SELECT {key}, row_number() OVER (PARTITION BY {key} ORDER BY {every}) AS rn FROM {store}{where}", False
        if shape == "point":
            extra = f" AND {self.leaf(store)}" if r.random() < 0.6 else ""
            return f"SELECT {every} FROM {store} WHERE {key} = {self.lit(self.value(store, key))}{extra}", False
        return f"SELECT {every} FROM {store}{where}", False


def _norm(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    def cell(x: Any) -> Any:
        if isinstance(x, float):
            return round(x, 6) if math.isfinite(x) else repr(x)
        if isinstance(x, decimal.Decimal):
            return round(float(x), 6)
        return x
    return [tuple(cell(x) for x in row) for row in rows]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pushdown_answers_what_duckdb_answers_over_the_full_scans(shop_pair: Any, seed: int) -> None:
    gw, con, stores = shop_pair
    gen = Statements(seed, stores)
    for _ in range(STATEMENTS):
        sql, ordered = gen.statement()
        want = _norm(con.execute(sql).fetchall())
        got = _norm(gw.sql(sql).rows())
        if not ordered:
            got, want = sorted(got, key=repr), sorted(want, key=repr)
        assert got == want, f"{sql}\n{gw.explain(sql)}"


@pytest.mark.parametrize("join", [" OR ", " AND "])
def test_a_long_chain_of_compound_terms_runs_without_duckdbs_expression_rewriter(shop_pair: Any, join: str) -> None:
    """2,000 ``(id = … AND balance >= …)`` terms: DuckDB's expression rewriter is quadratic in such a chain (~10 s
    for this one; an AND of ORs too), so the statement runs on the pool's connection without it, and still answers
    what the same predicate computed in Python over the full scan answers. A short chain keeps the rewriter."""
    gw, _, stores = shop_pair
    inner = " AND " if join == " OR " else " OR "
    pairs = [(i * 7 - 100, (i * 37) % 500 - 50) for i in range(2_000)]
    terms = [f"(id = {k}{inner}balance >= {b})" for k, b in pairs]
    ids, names, balances = (stores["accounts"][c][1] for c in ("id", "name", "balance"))

    def term(k: int, b: int, row_id: int, balance: float) -> bool:
        return row_id == k and balance >= b if join == " OR " else row_id == k or balance >= b
    combine = any if join == " OR " else all
    for n, rewriter_off in ((2_000, True), (BALANCE_MIN_TERMS - 1, False)):
        want = sorted((i, nm) for i, nm, bal in zip(ids, names, balances)
                      if combine(term(k, b, i, bal) for k, b in pairs[:n]))
        result = gw.sql(f"SELECT id, name FROM accounts WHERE {join.join(terms[:n])} ORDER BY id")
        assert result.rows() == want and want
        setting = result.cursor.execute("SELECT current_setting('disabled_optimizers')").fetchone()
        assert setting == ("expression_rewriter" if rewriter_off else "",), (n, setting)
