"""Materialized joins without a JVM (issue 51 item 3): the driver side (``join_state.py``) fed random batches of
records — updates, tombstones, foreign keys that move, table records arriving late — against DuckDB over every
record so far, after every batch, into a real store through its writer; and batches replayed after a crash.

The Spark side (one query over every input) is in test_ksql_joins_spark.py; these cover the join semantics
many times over in a second.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import TimestampedRangeQuery
from stores.pipeline.join_state import JoinSide, JoinState, JoinStatePlan, JoinStep
from stores.pipeline.side_state import SideStateLost

# inputs: 0 users (key BIGINT: name, region), 1 regions (key VARCHAR: zone), 2 scores (key BIGINT: points)
USERS = JoinSide(SqlType.BIGINT, ("name", "region"), (SqlType.VARCHAR, SqlType.VARCHAR))
REGIONS = JoinSide(SqlType.VARCHAR, ("zone",), (SqlType.VARCHAR,))
SCORES = JoinSide(SqlType.BIGINT, ("points",), (SqlType.BIGINT,))


def _struct(side: JoinSide, recs: list[dict[str, Any]]) -> pa.StructArray:
    key_t = pa.int64() if side.key_type is SqlType.BIGINT else pa.string()
    vt = [pa.int64() if t is SqlType.BIGINT else pa.string() for t in side.types]
    fields = [("k", key_t), ("ts", pa.int64()), ("t", pa.string()), ("p", pa.int32()), ("o", pa.int64()),
              ("tomb", pa.bool_()), *((f"v{j}", t) for j, t in enumerate(vt))]
    arrays = [pa.array([r.get(n) for r in recs], t) for n, t in fields]
    return pa.StructArray.from_arrays(arrays, names=[n for n, _ in fields])


def batch_table(sides: list[JoinSide], recs: list[tuple[int, dict[str, Any]]]) -> pa.Table:
    """The projected batch the union query gives: ``__side`` and one struct per input, null in other inputs' rows."""
    cols: dict[str, Any] = {"__side": pa.array([i for i, _ in recs], pa.int32())}
    for i, side in enumerate(sides):
        full = _struct(side, [r if s == i else {} for s, r in recs])
        mask = pa.array([s != i for s, _ in recs], pa.bool_())
        cols[f"__s{i}"] = pa.StructArray.from_arrays(full.flatten(), fields=list(full.type), mask=mask)
    return pa.table(cols)


class Log:
    """Records per input in log order, with DuckDB tables of each input's latest rows and versions."""

    def __init__(self) -> None:
        self.recs: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
        self.offset = 0

    def record(self, side: int, key: Any, values: tuple[Any, ...] | None, ts: int) -> tuple[int, dict[str, Any]]:
        self.offset += 1
        r = {"k": key, "ts": ts, "t": f"topic{side}", "p": 0, "o": self.offset, "tomb": values is None}
        for j, v in enumerate(values or ()):
            r[f"v{j}"] = v
        self.recs[side].append(r)
        return side, r

    def duck(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        for side, typ, names in ((0, pa.int64(), ("name", "region")), (1, pa.string(), ("zone",)),
                                 (2, pa.int64(), ("points",))):
            recs = self.recs[side]
            cols = {"k": pa.array([r["k"] for r in recs], typ), "ts": pa.array([r["ts"] for r in recs], pa.int64()),
                    "o": pa.array([r["o"] for r in recs], pa.int64()),
                    "dead": pa.array([r["tomb"] for r in recs], pa.bool_())}
            for j, n in enumerate(names):
                cols[n] = pa.array([r.get(f"v{j}") for r in recs], pa.int64() if n == "points" else pa.string())
            con.register(f"arrow{side}", pa.table(cols))  # through Arrow: executemany is a statement per row
            con.execute(f"CREATE TABLE log{side} AS SELECT * FROM arrow{side}")
            con.execute(f"CREATE VIEW t{side} AS SELECT * EXCLUDE (dead) FROM log{side} "
                        "QUALIFY row_number() OVER (PARTITION BY k ORDER BY o DESC) = 1 AND NOT dead")
        return con


def _store(spec: StoreSpec, tmp: Path) -> tuple[PartitionedWriter, dict[int, Any]]:
    parts = {p: open_partition(spec, p, tmp / f"{spec.name}-{p}.db") for p in range(spec.partitions)}
    return PartitionedWriter(spec, parts), parts


def _contents(parts: dict[int, Any]) -> dict[Any, tuple[Any, ...]]:
    out = {}
    for s in parts.values():
        for kv in s.query(TimestampedRangeQuery.with_no_bounds(), PositionBound.unbounded()).result:
            out[kv.key] = (*kv.value.value, kv.value.timestamp)
    return out


def _run(plan: JoinStatePlan, spec: StoreSpec, tmp: Path, make_batch: Any, oracle: str, batches: int = 14,
         replay_every: int = 5) -> None:
    log = Log()
    writer, parts = _store(spec, tmp)
    state = JoinState(plan, tmp / f"{spec.name}-side.db")
    rnd = random.Random(hash(spec.name) % 1000)
    try:
        for b in range(batches):
            recs = make_batch(rnd, log)
            table = batch_table(list(plan.sides), recs)
            change = state.apply(b, table, None)
            if b % replay_every == 2:  # a crash after the side state committed, before the store did: Spark replays
                state.close()
                state = JoinState(plan, tmp / f"{spec.name}-side.db")
                change = state.apply(b, table, None)
            if change is not None:
                writer.write_table(b, change, Position.from_map({"t": {0: b}}))
            want = {r[0]: tuple(r[1:]) for r in log.duck().execute(oracle).fetchall()}
            assert _contents(parts) == want, f"{spec.name} batch {b}"
        with pytest.raises(SideStateLost, match=f"side state .* is at batch {batches - 1}, Spark runs batch "
                                                f"{batches + 1}: the state of the batches between is lost"):
            state.apply(batches + 1, batch_table(list(plan.sides), []), None)
    finally:
        state.close()
        for p in parts.values():
            p.close()


def _users_and_scores(rnd: random.Random, log: Log) -> list[tuple[int, dict[str, Any]]]:
    recs = []
    for _ in range(rnd.randrange(3, 12)):
        side = rnd.choice((0, 2))
        key = rnd.randrange(12)
        ts = rnd.randrange(1000)
        if side == 0:
            vals = None if rnd.random() < 0.2 else (rnd.choice(["ann", "bob", None]), rnd.choice("xyz"))
        else:
            vals = None if rnd.random() < 0.2 else (rnd.choice([rnd.randrange(100), None]),)
        recs.append(log.record(side, key, vals, ts))
    return recs


@pytest.mark.parametrize("how, sql_how", [("inner", "JOIN"), ("left", "LEFT JOIN"), ("right", "RIGHT JOIN"),
                                          ("full", "FULL JOIN")])
def test_joins_on_the_key_equal_duckdb_after_every_batch(tmp_path: Path, how: str, sql_how: str) -> None:
    spec = StoreSpec(f"pk_{how}", StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.BIGINT),
                     (Column("name", SqlType.VARCHAR), Column("region", SqlType.VARCHAR),
                      Column("points", SqlType.BIGINT)), partitions=2)
    plan = JoinStatePlan(spec.name, (USERS, SCORES), (JoinStep(how),), (("name", 0, 0), ("region", 0, 1),
                                                                        ("points", 1, 0)), "key", True)

    # input 1 of the plan is the log's input 2 (scores): the batches say 1, the log keeps 2
    def make(rnd: random.Random, log: Log) -> list[tuple[int, dict[str, Any]]]:
        recs = _users_and_scores(rnd, log)
        return [(0 if s == 0 else 1, r) for s, r in recs]

    oracle = (f"SELECT coalesce(a.k, b.k), a.name, a.region, b.points, greatest(a.ts, b.ts) FROM t0 a {sql_how} t2 b "
              "ON a.k = b.k")
    _run(plan, spec, tmp_path, make, oracle)


@pytest.mark.parametrize("how, sql_how", [("inner", "JOIN"), ("left", "LEFT JOIN")])
def test_foreign_key_chain_equals_duckdb_as_rows_move_and_vanish(tmp_path: Path, how: str, sql_how: str) -> None:
    """users → regions by users.region (a foreign key, inner or left), then users → scores on the key (left): a
    chain with foreign keys that change and rows deleted on every side (KIP-213)."""
    spec = StoreSpec(f"fk_{how}", StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.BIGINT),
                     (Column("name", SqlType.VARCHAR), Column("region", SqlType.VARCHAR),
                      Column("zone", SqlType.VARCHAR), Column("points", SqlType.BIGINT)), partitions=3)
    plan = JoinStatePlan(spec.name, (USERS, REGIONS, SCORES), (JoinStep(how, (0, 1)), JoinStep("left")),
                         (("name", 0, 0), ("region", 0, 1), ("zone", 1, 0), ("points", 2, 0)), "key", True)

    def make(rnd: random.Random, log: Log) -> list[tuple[int, dict[str, Any]]]:
        recs = _users_and_scores(rnd, log)
        for _ in range(rnd.randrange(0, 4)):
            recs.append(log.record(1, rnd.choice("xyz"), None if rnd.random() < 0.25 else
                                   (rnd.choice(["north", "south", None]),), rnd.randrange(1000)))
        return recs

    oracle = ("SELECT a.k, a.name, a.region, r.zone, s.points, greatest(a.ts, r.ts, s.ts) FROM t0 a "
              f"{sql_how} t1 r ON a.region = r.k LEFT JOIN t2 s ON s.k = a.k")
    _run(plan, spec, tmp_path, make, oracle, batches=16)


def test_stream_table_join_takes_the_version_as_of_each_record(tmp_path: Path) -> None:
    """Stream keys (orders) joined to the table's version valid at the order's time; table records arrive out of
    order (older timestamps later) and tombstones are versions too: the oracle is DuckDB's ASOF JOIN."""
    orders = JoinSide(SqlType.VARCHAR, ("user", "amount"), (SqlType.BIGINT, SqlType.BIGINT))
    users = JoinSide(SqlType.BIGINT, ("name", "region"), (SqlType.VARCHAR, SqlType.VARCHAR))
    spec = StoreSpec("enriched", StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.VARCHAR),
                     (Column("user", SqlType.BIGINT), Column("amount", SqlType.BIGINT), Column("name", SqlType.VARCHAR)),
                     partitions=2)
    plan = JoinStatePlan(spec.name, (orders, users), (JoinStep("left", (0, 0)),),
                         (("user", 0, 0), ("amount", 0, 1), ("name", 1, 0)), "key", True, as_of=True)
    log = Log()
    writer, parts = _store(spec, tmp_path)
    state = JoinState(plan, tmp_path / "enriched-side.db")
    rnd = random.Random(3)
    orders_log: list[dict[str, Any]] = []
    try:
        for b in range(15):
            recs = []
            for _ in range(rnd.randrange(2, 10)):
                if rnd.random() < 0.5:
                    vals = None if rnd.random() < 0.15 else (rnd.choice(["ann", "bob", "cy"]), "x")
                    recs.append((1, log.record(0, rnd.randrange(6), vals, rnd.randrange(0, 1000, 10))[1]))
                else:
                    log.offset += 1
                    r = {"k": f"o{rnd.randrange(15)}", "ts": rnd.randrange(0, 1000, 5), "t": "orders", "p": 0,
                         "o": log.offset, "tomb": rnd.random() < 0.1, "v0": rnd.randrange(6), "v1": rnd.randrange(50)}
                    orders_log.append(r)
                    recs.append((0, r))
            change = state.apply(b, batch_table([orders, users], recs), None)
            if change is not None:
                writer.write_table(b, change, Position.from_map({"t": {0: b}}))
            con = log.duck()
            con.register("olog", pa.table({
                "k": pa.array([r["k"] for r in orders_log], pa.string()), "ts": [r["ts"] for r in orders_log],
                "o": [r["o"] for r in orders_log], "dead": pa.array([r["tomb"] for r in orders_log], pa.bool_()),
                "u": [r["v0"] for r in orders_log], "amount": [r["v1"] for r in orders_log]}))
            want = {r[0]: tuple(r[1:]) for r in con.execute("""
                WITH o AS (SELECT * FROM olog QUALIFY row_number() OVER (PARTITION BY k ORDER BY o DESC) = 1),
                     v AS (SELECT * FROM log0 QUALIFY row_number() OVER (PARTITION BY k, ts ORDER BY o DESC) = 1)
                SELECT o.k, o.u, o.amount, CASE WHEN v.dead THEN NULL ELSE v.name END, o.ts
                FROM o ASOF LEFT JOIN v ON o.u = v.k AND o.ts >= v.ts WHERE NOT o.dead""").fetchall()}
            assert _contents(parts) == want, f"batch {b}"
    finally:
        state.close()
        for p in parts.values():
            p.close()
