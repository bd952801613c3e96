"""Pushdown never changes the answer: SQL through the product equals DuckDB on the raw rows.

The rows live in real stores and the SQL runs through the real Gateway
(planner → IQv2 requests → ordered merge, pushed LIMIT → residual SQL), so a
predicate pushed too far, a bound off by one, a wrong partition or a LIMIT
pushed past a filter shows up as a different result (reference_store.py).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import planner
from gateway import Gateway
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from tests.planner.reference_store import (
    ReferenceStore,
    product_gateway,
    run_direct,
    run_sql,
)

T0 = 1_704_067_200_000  # 2024-01-01 00:00:00 UTC


def _kv(name: str, key_type: SqlType, partitions: int = 4) -> StoreSpec:
    return StoreSpec(name, StoreKind.KEY_VALUE, Column("k", key_type),
                     (Column("v", SqlType.VARCHAR), Column("n", SqlType.BIGINT)), partitions=partitions)


def _stores() -> dict[str, ReferenceStore]:
    rnd = random.Random(7)
    letters = ["a", "b", "b\x00", "ba", "c", "m", "ma", "z", "é", "Z", ""]
    specs = {
        "ints": _kv("ints", SqlType.BIGINT),
        "strs": _kv("strs", SqlType.VARCHAR, 3),
        "dbls": _kv("dbls", SqlType.DOUBLE),
        "tss": _kv("tss", SqlType.TIMESTAMP),
        "wins": StoreSpec("wins", StoreKind.WINDOW, Column("key", SqlType.VARCHAR), (Column("cnt", SqlType.BIGINT),),
                          partitions=2, window_size_ms=60_000),
        "sess": StoreSpec("sess", StoreKind.SESSION, Column("user", SqlType.VARCHAR), (Column("clicks", SqlType.BIGINT),),
                          partitions=2),
    }
    keys = {
        "ints": sorted(set(rnd.randrange(-30, 60) for _ in range(50))),
        "strs": letters,
        "dbls": [0.5, 1.0, 1.0000000000000002, 1.5, 1.9999999999999998, 2.0, 2.5, -3.25],
        "tss": [T0 - 1, T0, T0 + 1, T0 + 999, T0 + 86_399_999, T0 + 86_400_000, T0 + 86_400_001],
    }
    data: dict[str, list[dict]] = {}
    for name, ks in keys.items():
        data[name] = [{"k": k, "v": rnd.choice(["x", "y", None]), "n": rnd.randrange(0, 100)} for k in ks]
    data["wins"] = [
        {"key": key, "window_start": T0 + m * 60_000, "window_end": T0 + (m + 1) * 60_000, "cnt": rnd.randrange(1, 9)}
        for key in ("a", "b", "c", "d") for m in range(0, 12, rnd.choice([1, 2, 3]))
    ]
    data["sess"] = [
        {"user": u, "window_start": T0 + i * 100_000, "window_end": T0 + i * 100_000 + rnd.randrange(0, 50_000),
         "clicks": rnd.randrange(1, 20)}
        for u in ("u1", "u2", "u3") for i in range(3)
    ]
    return {name: ReferenceStore(specs[name], rows) for name, rows in data.items()}


STORES = _stores()
CATALOG = {name: s.spec for name, s in STORES.items()}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with product_gateway(STORES, tmp_path_factory.mktemp("differential")) as g:
        yield g

QUERIES: list[tuple[str, list | None]] = [
    ("SELECT k, v, n FROM ints WHERE k = 5", None),
    ("SELECT k FROM ints WHERE k IN (1, 2, 3, 99, -7)", None),
    ("SELECT k FROM ints WHERE k = 1 OR k = 7 OR k = 8", None),
    ("SELECT k, n FROM ints WHERE k > 10 AND k < 20", None),
    ("SELECT k FROM ints WHERE k BETWEEN -5 AND 5", None),
    ("SELECT k FROM ints WHERE k > 1.5 AND k <= 9.9", None),
    ("SELECT k FROM ints WHERE k = 1.5", None),
    ("SELECT k FROM ints WHERE k >= 30 ORDER BY k DESC LIMIT 3", None),
    ("SELECT k, v FROM ints ORDER BY k LIMIT 5 OFFSET 2", None),
    ("SELECT k FROM ints WHERE v = 'x' ORDER BY k LIMIT 4", None),
    ("SELECT k FROM ints WHERE k < 20 ORDER BY k DESC, v LIMIT 4", None),
    ("SELECT v, count(*), sum(n) FROM ints WHERE k < 25 GROUP BY v", None),
    ("SELECT a.k, b.k FROM ints a JOIN ints b ON a.n = b.k WHERE a.k > 0 AND b.k < 40", None),
    ("SELECT a.k, b.k FROM ints a LEFT JOIN ints b ON b.k = a.n AND b.k < 10 WHERE a.k BETWEEN 0 AND 20", None),
    ("SELECT k FROM ints WHERE k IN (1, 5, 10, 20) AND k > 2 AND k <= 10", None),
    # joins on the two stores' keys: a constraint on one key reads the other store by the same key (scopes.py)
    ("SELECT a.k, a.v, b.n FROM ints a JOIN ints b USING (k) WHERE a.k = 5", None),
    ("SELECT a.k, b.v FROM ints a JOIN ints b ON b.k = a.k WHERE b.k IN (1, 2, 3, 4, 5, 99)", None),
    ("SELECT a.k, b.v FROM ints a LEFT JOIN ints b ON a.k = b.k AND b.n > 50 WHERE a.k BETWEEN 0 AND 12", None),
    ("SELECT a.k, b.n FROM ints a LEFT JOIN ints b USING (k) WHERE b.k > 20", None),
    ("SELECT a.k, b.k FROM strs a JOIN strs b USING (k) WHERE a.k >= 'b' AND a.k < 'm'", None),
    ("SELECT a.k, b.k FROM ints a JOIN dbls b ON a.k = b.k WHERE a.k = 2", None),  # keys of two types: not carried
    ("SELECT a.k, b.k FROM ints a RIGHT JOIN ints b USING (k) WHERE a.k = 3", None),
    ("SELECT a.k, b.k FROM ints a FULL JOIN ints b ON a.k = b.k WHERE a.k = 3 OR b.k = 4", None),
    ("SELECT a.k, b.k FROM ints a JOIN ints b ON a.k = b.k WHERE a.k = ?", [7]),
    ("SELECT k FROM ints WHERE k = ?", [5]),
    ("SELECT k FROM ints WHERE k BETWEEN ? AND ? AND v IS NOT NULL", [-10, 10]),
    ("WITH c AS (SELECT * FROM ints WHERE k < 0) SELECT count(*) FROM c", None),
    ("SELECT k FROM ints WHERE n > (SELECT min(n) FROM ints WHERE k > 40)", None),
    ("SELECT id, v FROM (SELECT k AS id, v FROM ints WHERE n > 30) AS virtual_table WHERE id BETWEEN 0 AND 30", None),
    ("WITH c AS (SELECT k, n FROM ints WHERE n < 80) SELECT count(*), sum(n) FROM c WHERE k IN (1, 2, 3, 4, 5, 6, 7)", None),
    ("WITH c AS (SELECT k, n FROM ints) SELECT a.k, b.k FROM c a JOIN c b ON a.n = b.k WHERE a.k < 10", None),
    ("SELECT * FROM (SELECT k, row_number() OVER (ORDER BY k) AS rn FROM ints) x WHERE k > 20", None),
    ("SELECT * FROM (SELECT k, k + 1 AS k1 FROM ints) x WHERE k1 = 10", None),
    ("SELECT * FROM (SELECT * FROM ints ORDER BY k LIMIT 5) x WHERE k > -20", None),
    ("SELECT k FROM strs WHERE k > 'b' ORDER BY k LIMIT 3", None),
    ("SELECT k FROM strs WHERE k < 'm' ORDER BY k DESC LIMIT 3", None),
    ("SELECT k FROM strs WHERE k >= 'b' AND k <= 'ma'", None),
    ("SELECT k FROM strs WHERE k IN ('a', 'zz', 'é', '')", None),
    ("SELECT k FROM dbls WHERE k > 1.0 AND k < 2", None),
    ("SELECT k FROM dbls WHERE k IN (2, 2.5)", None),
    ("SELECT k FROM dbls WHERE k >= -4 ORDER BY k LIMIT 2", None),
    ("SELECT k FROM tss WHERE k > TIMESTAMP '2024-01-01 00:00:00' AND k < '2024-01-02'", None),
    ("SELECT k FROM tss WHERE k = '2024-01-01 00:00:00.999'", None),
    ("SELECT k FROM tss WHERE k <= TIMESTAMP '2024-01-01 00:00:00'", None),
    ("SELECT key, window_start, cnt FROM wins WHERE key = 'a' AND window_start >= TIMESTAMP '2024-01-01 00:02:00' "
     "AND window_start < TIMESTAMP '2024-01-01 00:07:00'", None),
    ("SELECT key, window_start FROM wins WHERE window_start BETWEEN '2024-01-01 00:03:00' AND '2024-01-01 00:06:00'", None),
    ("SELECT key, window_end FROM wins WHERE key IN ('b', 'c') AND window_end > TIMESTAMP '2024-01-01 00:05:00' "
     "AND window_end <= TIMESTAMP '2024-01-01 00:09:00'", None),
    ("SELECT key, count(*) FROM wins WHERE key > 'b' GROUP BY key", None),
    ("SELECT user, window_start, clicks FROM sess WHERE user IN ('u1', 'u3') AND window_end > TIMESTAMP '2024-01-01 00:01:00'", None),
]


@pytest.mark.parametrize(("sql", "params"), QUERIES, ids=[q for q, _ in QUERIES])
def test_pushdown_keeps_the_answer(gw: Gateway, sql: str, params: list | None) -> None:
    planner.plan(sql, CATALOG, params=params)  # plans without error on its own too
    got = run_sql(gw, sql, params)
    want = run_direct(sql, STORES, params)
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    if "ORDER BY" in sql:  # order matters too
        assert got == want


PARTITION_QUERIES = [
    "SELECT k, _partition FROM ints WHERE _partition = 2",
    "SELECT k FROM ints WHERE _partition IN (0, 3) AND k > 5",
    "SELECT k FROM ints WHERE k IN (1, 2, 3, 4, 5, 6) AND _partition = 1",
    "SELECT count(*) FROM ints WHERE _partition IN (1, 2)",
]


@pytest.mark.parametrize("sql", PARTITION_QUERIES)
def test_partition_selection_keeps_the_answer(gw: Gateway, sql: str) -> None:
    assert sorted(run_sql(gw, sql)) == sorted(run_direct(sql, STORES, with_partition=True))


def test_partition_beyond_range_is_a_failure_row_not_data(gw: Gateway) -> None:
    sql = "SELECT _partition, _failure_reason FROM ints WHERE _partition = 99"
    assert run_sql(gw, sql, partial=True) == [(99, "DOES_NOT_EXIST")]
    # without naming the failure columns, the failed partition contributes no rows
    assert run_sql(gw, "SELECT k FROM ints WHERE _partition = 99", partial=True) == []


def test_star_never_shows_pseudo_columns(gw: Gateway) -> None:
    key = STORES["ints"].rows[0]["k"]
    rows = run_sql(gw, "SELECT *, _partition AS p FROM ints WHERE k = ?", [key])
    direct = run_direct("SELECT *, _partition AS p FROM ints WHERE k = ?", STORES, [key], with_partition=True)
    assert len(rows) == 1 and len(rows[0]) == 4  # k, v, n, p
    assert rows == [tuple(direct[0][:3]) + (direct[0][4],)]


@pytest.mark.parametrize(("sql", "carried"), [
    ("SELECT a.v, b.n FROM ints a JOIN ints b USING (k) WHERE a.k = 5", True),
    ("SELECT a.v, b.n FROM ints a INNER JOIN ints b ON a.k = b.k WHERE b.k = 5", True),
    ("SELECT a.v, b.n FROM ints a LEFT JOIN ints b ON b.k = a.k WHERE a.k = 5", True),
    ("SELECT a.v, b.n FROM ints a LEFT OUTER JOIN ints b USING (k) WHERE b.k = 5", True),
    ("SELECT a.v, b.n FROM ints a RIGHT JOIN ints b USING (k) WHERE a.k = 5", False),
    ("SELECT a.v, b.n FROM ints a FULL JOIN ints b USING (k) WHERE a.k = 5", False),
    ("SELECT a.v, b.n FROM ints a JOIN ints b ON a.k = b.n WHERE a.k = 5", False),  # not b's key
    ("SELECT a.v, b.k FROM ints a JOIN dbls b ON a.k = b.k WHERE a.k = 5", False),  # keys of two types
    ("SELECT a.v, b.n FROM ints a JOIN ints b ON a.k = b.k OR a.n = b.n WHERE a.k = 5", False),
])
def test_a_join_on_keys_reads_one_key_of_each_store(sql: str, carried: bool) -> None:
    """``r.key = ?`` with ``r JOIN l USING (key)``: two point lookups, not a lookup and a whole store (issue 50)."""
    plan = planner.plan(sql, CATALOG, session={"table_scans": True})
    full = [scan.full_scan for scan in plan.scans]
    assert full == ([False, False] if carried else [False, True]) or (not carried and full == [True, False])
