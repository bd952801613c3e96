"""Property: history, window and record-time queries answer what DuckDB answers over the rows written.

The oracle is DuckDB SQL over tables built from the shop's own rows (the
versions, windows and latest records written to the stores, never read back
from them): the version history as ``valid_from``/``valid_to`` intervals,
``FOR SYSTEM_TIME`` as the README's definition (versions overlapping the
period; an empty period has none), and every WHERE predicate as written.
The statements are random: periods and bounds near real version and window
edges (the same instant, one millisecond either side), comparisons, BETWEEN,
IS NULL, key equalities and IN lists, joined by AND (and an OR).

Found by this (s16): ``FOR SYSTEM_TIME FROM a TO b WHERE valid_from < x``
with x before a returned no rows (the narrowed period [a, x] was taken as
empty, though a version starting before x and ending after a overlaps), and
``valid_to >= t`` missed the version ending exactly at t.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator

import duckdb
import pytest

from gateway.engine.gateway import Gateway
from tests.gateway.gwfixtures import MINUTE, Shop

STATEMENTS_PER_SEED = 250
UTC = dt.timezone.utc


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)


@pytest.fixture(scope="module")
def oracle(shop: Shop) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE last_order (customer VARCHAR, amount DOUBLE, valid_from TIMESTAMPTZ, valid_to TIMESTAMPTZ)")
    history = [(c, a, _ts(ts), _ts(vs[i + 1][0]) if i + 1 < len(vs) else None)
               for c, vs in shop.versions.items() for i, (ts, a) in enumerate(vs)]
    con.executemany("INSERT INTO last_order VALUES (?, ?, ?, ?)", history)
    con.execute("CREATE TABLE per_min (customer VARCHAR, window_start TIMESTAMPTZ, window_end TIMESTAMPTZ, "
                "orders BIGINT)")
    con.executemany("INSERT INTO per_min VALUES (?, ?, ?, ?)",
                    [(c, _ts(ws), _ts(ws + MINUTE), n) for (c, ws), (n, _r) in shop.per_min.items()])
    con.execute("CREATE TABLE latest (customer VARCHAR, amount DOUBLE, rowtime TIMESTAMPTZ)")
    con.executemany("INSERT INTO latest VALUES (?, ?, ?)", [(c, a, _ts(ts)) for c, (a, ts) in shop.latest.items()])
    yield con
    con.close()


class _Statements:
    """Random statements over the three time-keyed stores, each with the oracle's SQL for the same rows."""

    CMP = ("=", "<", "<=", ">", ">=", "<>")

    def __init__(self, rng: random.Random, shop: Shop) -> None:
        self.rng = rng
        self.customers = sorted(shop.versions)
        self.version_times = sorted({ts for vs in shop.versions.values() for ts, _ in vs})
        self.window_times = sorted({ws for _, ws in shop.per_min} | {ws + MINUTE for _, ws in shop.per_min})
        self.row_times = sorted(ts for _, ts in shop.latest.values())

    def instant(self, pool: list[int]) -> str:
        ms = self.rng.choice(pool) + self.rng.choice([0, 0, 0, 1, -1, 1000, -1000, MINUTE, -MINUTE, 3_600_000])
        return f"TIMESTAMPTZ '{_ts(ms).isoformat(sep=' ', timespec='milliseconds')}'"

    def predicate(self, column: str, pool: list[int]) -> str:
        rng = self.rng
        if column == "customer":
            r = rng.random()
            if r < 0.5:
                return f"customer = '{rng.choice(self.customers)}'"
            if r < 0.7:
                return f"customer IN ('{rng.choice(self.customers)}', '{rng.choice(self.customers)}')"
            return f"customer {rng.choice(self.CMP)} '{rng.choice(self.customers)}'"
        r = rng.random()
        if r < 0.7:
            return f"{column} {rng.choice(self.CMP)} {self.instant(pool)}"
        if r < 0.9:
            return f"{column} BETWEEN {self.instant(pool)} AND {self.instant(pool)}"
        return f"{column} IS {'NOT ' if rng.random() < 0.5 else ''}NULL"

    def where(self, columns: tuple[str, ...], pool: list[int]) -> list[str]:
        parts = [self.predicate(self.rng.choice(columns), pool) for _ in range(self.rng.randint(1, 4))]
        if len(parts) > 1 and self.rng.random() < 0.2:
            parts[:2] = [f"({parts[0]} OR {parts[1]})"]
        return parts

    def one(self) -> tuple[str, str]:
        """(ours, the oracle's) for one random statement."""
        rng = self.rng
        k = rng.random()
        if k < 0.3:
            w = " AND ".join(self.where(("customer", "window_start", "window_end"), self.window_times))
            sql = f"SELECT customer, window_start, window_end, orders FROM per_min WHERE {w}"
            return sql, sql
        if k < 0.45:
            w = " AND ".join(self.where(("customer", "rowtime"), self.row_times))
            sql = f"SELECT customer, amount, rowtime FROM latest WHERE {w}"
            return sql, sql
        a, b = self.instant(self.version_times), self.instant(self.version_times)
        clause, period = rng.choice([
            ("", "valid_to IS NULL"),
            (f" FOR SYSTEM_TIME AS OF {a}", f"valid_from <= {a} AND (valid_to IS NULL OR valid_to > {a})"),
            (f" FOR SYSTEM_TIME FROM {a} TO {b}",
             f"valid_from < {b} AND (valid_to IS NULL OR valid_to > {a}) AND {a} < {b}"),
            (f" FOR SYSTEM_TIME BETWEEN {a} AND {b}",
             f"valid_from <= {b} AND (valid_to IS NULL OR valid_to > {a}) AND {a} <= {b}"),
            (" FOR SYSTEM_TIME ALL", "TRUE"),
        ])
        parts = self.where(("customer", "valid_from", "valid_to", "customer"), self.version_times)
        cols = "customer, amount, valid_from, valid_to"
        return (f"SELECT {cols} FROM last_order{clause} WHERE {' AND '.join(parts)}",
                f"SELECT {cols} FROM last_order WHERE ({period}) AND {' AND '.join(parts)}")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_time_queries_answer_what_duckdb_answers_over_the_rows_written(
        gw: Gateway, shop: Shop, oracle: duckdb.DuckDBPyConnection, seed: int) -> None:
    statements = _Statements(random.Random(seed), shop)
    wrong = []
    answered = 0
    for _ in range(STATEMENTS_PER_SEED):
        ours, theirs = statements.one()
        got = sorted(gw.sql(ours).rows(), key=repr)
        want = sorted(oracle.execute(theirs).fetchall(), key=repr)
        answered += bool(want)
        if got != want:
            wrong.append(f"{ours}: {len(got)} rows, the oracle {len(want)}")
    assert wrong == [], wrong[:5]
    assert answered >= STATEMENTS_PER_SEED // 5, "too few statements had rows to compare"


@pytest.mark.parametrize("ours, theirs", [
    ("SELECT customer, valid_from FROM last_order FOR SYSTEM_TIME FROM {a} TO {b} WHERE valid_from < {x}",
     "SELECT customer, valid_from FROM last_order WHERE valid_from < {b} AND (valid_to IS NULL OR valid_to > {a}) "
     "AND valid_from < {x}"),
    ("SELECT customer, valid_to FROM last_order FOR SYSTEM_TIME ALL WHERE valid_to >= {end}",
     "SELECT customer, valid_to FROM last_order WHERE valid_to >= {end}"),
], ids=["period-narrowed-below-its-start", "valid-to-at-the-bound"])
def test_the_cases_the_property_found(gw: Gateway, shop: Shop, oracle: duckdb.DuckDBPyConnection, ours: str,
                                      theirs: str) -> None:
    """A version that starts before x and ends inside [a, b); a version whose valid_to is exactly the bound."""
    vs = max(shop.versions.values(), key=len)
    (t1, _), (t2, _), (t3, _) = vs[0], vs[1], vs[2]  # versions [t1, t2) and [t2, t3)
    assert t2 - t1 > 2, "the first version must start before x = t2 - 2"

    def lit(ms: int) -> str:
        return f"TIMESTAMPTZ '{_ts(ms).isoformat(sep=' ', timespec='milliseconds')}'"

    names = {"a": lit(t2 - 1), "b": lit(t3), "x": lit(t2 - 2), "end": lit(t2)}
    got = sorted(gw.sql(ours.format(**names)).rows(), key=repr)
    want = sorted(oracle.execute(theirs.format(**names)).fetchall(), key=repr)
    assert want and got == want
