"""SQL:2011 system-versioned semantics of a versioned store, through the real stores and Gateway.

Which rows the table has is decided by the ``FOR SYSTEM_TIME`` clause alone
(none: the current versions); predicates on ``valid_from``/``valid_to``, in any
spelling (naive, ``+00``, TIMESTAMPTZ, tz-aware parameters, ``year()``), only
filter. The oracle is DuckDB over the versions computed here in Python from
the same events, with each clause spelled as its SQL:2011 definition.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import duckdb
import pytest

from gateway import Gateway
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.planner.reference_store import ReferenceStore, product_gateway, run_sql

T0 = 1_356_998_400_000  # 2013-01-01 00:00:00 UTC
DAY = 86_400_000
SPEC = StoreSpec("vers", StoreKind.VERSIONED, Column("key", SqlType.VARCHAR),
                 (Column("amount", SqlType.BIGINT), Column("item", SqlType.VARCHAR)), partitions=3)


def _events() -> list[tuple[str, tuple[int, str] | None, int]]:
    """(key, value or None for a tombstone, valid_from) — out of order, with tombstones and re-creations."""
    rnd = random.Random(11)
    out = []
    for i in range(400):
        key = f"c{rnd.randrange(25):04d}"
        ts = T0 + rnd.randrange(0, 700) * DAY // 2 + rnd.choice([0, 1, 999])
        value = None if rnd.random() < 0.12 else (rnd.randrange(1, 500), rnd.choice(["tea", "mug", "pen"]))
        out.append((key, value, ts))
    return out


EVENTS = _events()


def _history() -> list[tuple[Any, ...]]:
    """(key, amount, item, valid_from, valid_to, tomb) as SQL:2011 defines the versions; last write per (key, ts) wins."""
    latest: dict[tuple[str, int], tuple[int, str] | None] = {}
    for key, value, ts in EVENTS:
        latest[(key, ts)] = value
    by_key: dict[str, list[int]] = {}
    for key, ts in latest:
        by_key.setdefault(key, []).append(ts)
    rows = []
    for key, times in by_key.items():
        times.sort()
        for i, ts in enumerate(times):
            value = latest[(key, ts)]
            end = times[i + 1] if i + 1 < len(times) else None
            amount, item = value if value is not None else (None, None)
            rows.append((key, amount, item, _dt(ts), None if end is None else _dt(end), value is None))
    return rows


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    store = ReferenceStore(SPEC, [])
    store.changes = lambda: [Change(k, v, ts) for k, v, ts in EVENTS]  # type: ignore[method-assign]
    with product_gateway({"vers": store}, tmp_path_factory.mktemp("versioned")) as g:
        yield g


def _oracle(period: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """``sql`` over a table ``vers`` holding the versions ``period`` selects (a SQL:2011 definition)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE hist (key VARCHAR, amount BIGINT, item VARCHAR, valid_from TIMESTAMPTZ,"
                " valid_to TIMESTAMPTZ, tomb BOOLEAN)")
    con.executemany("INSERT INTO hist VALUES (?, ?, ?, ?, ?, ?)", _history())
    con.execute(f"CREATE VIEW vers AS SELECT key, amount, item, valid_from, valid_to FROM hist WHERE NOT tomb AND ({period})")
    rows = con.execute(sql, params).fetchall() if params is not None else con.execute(sql).fetchall()
    con.close()
    return [tuple(v.astimezone(timezone.utc) if isinstance(v, datetime) else v for v in r) for r in rows]


CURRENT = "valid_to IS NULL"
AS_OF = "valid_from <= TIMESTAMPTZ '2013-06-01 00:00:00+00' AND (valid_to IS NULL OR valid_to > TIMESTAMPTZ '2013-06-01 00:00:00+00')"
FROM_TO = "valid_from < TIMESTAMPTZ '2013-09-01 00:00:00+00' AND (valid_to IS NULL OR valid_to > TIMESTAMPTZ '2013-03-01 00:00:00+00')"
BETWEEN = "valid_from <= TIMESTAMPTZ '2013-09-01 00:00:00+00' AND (valid_to IS NULL OR valid_to > TIMESTAMPTZ '2013-03-01 00:00:00+00')"
ALL = "TRUE"

AWARE = datetime(2013, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))  # 2013-01-01 00:00 UTC

# (product SQL, its period, the same question over the oracle's ``vers``, params)
CASES: list[tuple[str, str, str, Any]] = [
    ("SELECT * FROM vers WHERE key = 'c0004'", CURRENT, "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT * FROM vers WHERE key = 'c0004' AND valid_from >= TIMESTAMP '2000-01-01 00:00:00'", CURRENT,
     "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT * FROM vers WHERE key = 'c0004' AND valid_from >= TIMESTAMP '2000-01-01 00:00:00+00'", CURRENT,
     "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT * FROM vers WHERE key = 'c0004' AND valid_from >= TIMESTAMPTZ '2000-01-01 00:00:00+05'", CURRENT,
     "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT * FROM vers WHERE key = 'c0004' AND year(valid_from) >= 2013", CURRENT,
     "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT * FROM vers WHERE key = ? AND valid_from >= ?", CURRENT,
     "SELECT * FROM vers WHERE key = ? AND valid_from >= ?", ["c0004", AWARE]),
    ("SELECT count(*) FROM vers", CURRENT, "SELECT count(*) FROM vers", None),
    ("SELECT item, count(*), sum(amount) FROM vers GROUP BY item ORDER BY item", CURRENT,
     "SELECT item, count(*), sum(amount) FROM vers GROUP BY item ORDER BY item", None),
    ("SELECT count(DISTINCT item) FROM vers WHERE valid_to IS NULL", CURRENT,
     "SELECT count(DISTINCT item) FROM vers", None),
    ("SELECT key, amount FROM vers WHERE key BETWEEN 'c0005' AND 'c0012' ORDER BY key", CURRENT,
     "SELECT key, amount FROM vers WHERE key BETWEEN 'c0005' AND 'c0012' ORDER BY key", None),
    ("SELECT key, amount FROM vers FOR SYSTEM_TIME AS OF TIMESTAMP '2013-06-01 00:00:00' WHERE key = 'c0004'", AS_OF,
     "SELECT key, amount FROM vers WHERE key = 'c0004'", None),
    ("SELECT key, amount FROM vers FOR SYSTEM_TIME AS OF TIMESTAMPTZ '2013-06-01 02:00:00+02'", AS_OF,
     "SELECT key, amount FROM vers", None),
    ("SELECT key, amount FROM vers FOR SYSTEM_TIME AS OF ? WHERE key IN ('c0001', 'c0004', 'c0020')", AS_OF,
     "SELECT key, amount FROM vers WHERE key IN ('c0001', 'c0004', 'c0020')",
     [datetime(2013, 5, 31, 20, 0, tzinfo=timezone(timedelta(hours=-4)))]),
    ("SELECT item, count(*) FROM vers FOR SYSTEM_TIME AS OF '2013-06-01T00:00:00Z' GROUP BY item", AS_OF,
     "SELECT item, count(*) FROM vers GROUP BY item", None),
    ("SELECT * FROM vers FOR SYSTEM_TIME FROM TIMESTAMP '2013-03-01 00:00:00' TO TIMESTAMP '2013-09-01 00:00:00'"
     " WHERE key = 'c0004'", FROM_TO, "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT count(*) FROM vers FOR SYSTEM_TIME FROM TIMESTAMP '2013-03-01 00:00:00' TO TIMESTAMP '2013-09-01 00:00:00'",
     FROM_TO, "SELECT count(*) FROM vers", None),
    ("SELECT * FROM vers FOR SYSTEM_TIME BETWEEN '2013-03-01 00:00:00+00' AND TIMESTAMP '2013-09-01 00:00:00'"
     " WHERE key = 'c0004'", BETWEEN, "SELECT * FROM vers WHERE key = 'c0004'", None),
    ("SELECT count(*), count(DISTINCT key) FROM vers FOR SYSTEM_TIME ALL", ALL,
     "SELECT count(*), count(DISTINCT key) FROM vers", None),
    ("SELECT * FROM vers FOR SYSTEM_TIME ALL WHERE key = 'c0004' AND valid_from >= TIMESTAMP '2013-05-01 00:00:00'"
     " AND valid_to < TIMESTAMPTZ '2013-12-01 00:00:00+00'", ALL,
     "SELECT * FROM vers WHERE key = 'c0004' AND valid_from >= TIMESTAMP '2013-05-01 00:00:00'"
     " AND valid_to < TIMESTAMPTZ '2013-12-01 00:00:00+00'", None),
    ("SELECT key, count(*) FROM vers FOR SYSTEM_TIME ALL WHERE valid_to IS NULL GROUP BY key", ALL,
     "SELECT key, count(*) FROM vers WHERE valid_to IS NULL GROUP BY key", None),
    ("SELECT * FROM vers FOR SYSTEM_TIME ALL WHERE key = 'c0004' AND year(valid_from) = 2013", ALL,
     "SELECT * FROM vers WHERE key = 'c0004' AND year(valid_from) = 2013", None),
]


@pytest.mark.parametrize(("sql", "period", "oracle_sql", "params"), CASES, ids=[c[0] for c in CASES])
def test_versioned_table_is_what_its_period_says(gw: Gateway, sql: str, period: str, oracle_sql: str,
                                                 params: Any) -> None:
    got = run_sql(gw, sql, params)
    want = _oracle(period, oracle_sql, params if "?" in oracle_sql else None)
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    assert got, "every case should find rows, or it checks nothing"
    if "ORDER BY" in sql:
        assert got == want


def test_a_filter_never_adds_rows(gw: Gateway) -> None:
    """The bug of issue 13: adding a predicate on valid_from turned the table into its history."""
    base = run_sql(gw, "SELECT * FROM vers WHERE key = 'c0004'")
    filtered = run_sql(gw, "SELECT * FROM vers WHERE key = 'c0004' AND valid_from >= TIMESTAMP '2000-01-01 00:00:00'")
    assert len(base) == 1 and filtered == base


def test_versioned_scans_respect_table_scans(gw: Gateway) -> None:
    import gateway.engine.errors as ge

    with pytest.raises(ge.GatewayError, match="table scans are disabled"):
        gw.sql("SELECT count(*) FROM vers", session={"table_scans": False})
    assert run_sql(gw, "SELECT count(*) FROM vers WHERE key = 'c0004'", None) == [(1,)]


def test_scan_positions_are_reported(gw: Gateway) -> None:
    res = gw.sql("SELECT count(*) FROM vers FOR SYSTEM_TIME ALL")
    assert res.position == Position.from_map({"t": {0: 0}})
    assert sorted(p.partition for p in res.partitions) == [0, 1, 2]
