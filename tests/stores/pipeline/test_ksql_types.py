"""Issues 16 and 51 without a JVM: the log's key types (ARRAY and STRUCT keys too) and nested value fields, the
tombstone column, and the table aggregate (``table_aggregate.py``) against DuckDB over the current rows, into a
real store through its writer."""

from __future__ import annotations

import dataclasses
import random
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stores.catalog.decimals import DecimalType
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec, parse_type
from stores.engine import open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import RangeQuery
from stores.pipeline.open_sessions import merge_sessions
from stores.pipeline.side_state import SideStateLost
from stores.pipeline.stream_rows import parse_value_schema, row_converter, stream_schema
from stores.pipeline.table_aggregate import MAX_COLLECT, Aggregate, AggregatePlan, TableAggregator, result_decimal

SCHEMA = parse_value_schema("a BIGINT, tags ARRAY<STRING>, pos STRUCT<x: DOUBLE, at: TIMESTAMP>, "
                            "m MAP<STRING, BIGINT> NOT NULL, d DATE")
VALUE = {"a": 1, "tags": ["x", 2], "pos": {"x": 1, "at": 1000}, "m": {"q": 3, "r": "bad"}, "d": "2024-01-01"}


def test_nested_value_fields_are_read_leniently() -> None:
    assert SCHEMA.simpleString() == ("struct<a:bigint,tags:array<string>,pos:struct<x:double,at:timestamp>,"
                                     "m:map<string,bigint>,d:date>")
    row = row_converter(stream_schema(SCHEMA))("k", VALUE, 5, "t", 0, 1)
    assert row[1:6] == (1, ["x", "2"], (1.0, datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)),
                        {"q": 3, "r": None}, date(2024, 1, 1))
    bad = row_converter(stream_schema(SCHEMA))("k", {"tags": "no list", "pos": [1], "m": 7}, 5, "t", 0, 1)
    assert bad[1:6] == (None, None, None, None, None)


@pytest.mark.parametrize("key_type, raw, want", [
    ("double", "1.5", 1.5), ("boolean", " TRUE ", True), ("boolean", "yes", None),
    ("date", "2024-01-02", date(2024, 1, 2)),
    ("timestamp", "2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)),
    ("binary", b"\x00\xff", b"\x00\xff"), ("binary", "ab", b"ab"), ("bigint", " 12 ", 12), ("bigint", "x", None),
    ("bigint", b"42", 42), ("string", b"caf\xc3\xa9", "café"), ("int", 7, 7),
])
def test_keys_of_every_type_from_text_or_kafka_bytes(key_type: str, raw: object, want: object) -> None:
    assert row_converter(stream_schema(SCHEMA, key_type))(raw, None, 5, "t", 0, 1)[0] == want


@pytest.mark.parametrize("key_type", ["uuid", "map<string,int>", "array<decimal(4,2)>"])
def test_unsupported_key_types_name_the_supported_ones(key_type: str) -> None:
    with pytest.raises(ValueError, match="use one of string, int, bigint, double, boolean, date, timestamp, binary, "
                                         "decimal.*array<…>, struct<…>"):
        stream_schema(SCHEMA, key_type)


@pytest.mark.parametrize("key_type, raw, want", [
    ("array<string>", '["1","0"]', ["1", "0"]), ("array<string>", b'["1", 2]', ["1", "2"]),
    ("array<bigint>", "[3, 4]", [3, 4]), ("array<bigint>", "not json", None), ("array<bigint>", '{"a": 1}', None),
    ("struct<f1: string, f2: string>", '{"f1": "1", "f2": "0"}', ("1", "0")),
    ("struct<f1: string, f2: bigint>", '{"f2": 7}', (None, 7)),
])
def test_array_and_struct_keys_are_read_as_json(key_type: str, raw: object, want: object) -> None:
    """ksqlDB's ARRAY/STRUCT keys (issue 51 item 4): Kafka's JSON key format, leniently as value fields are."""
    assert row_converter(stream_schema(SCHEMA, key_type))(raw, None, 5, "t", 0, 1)[0] == want


def test_only_a_null_value_is_a_tombstone() -> None:
    """Issue 51 item 1: the tombstone column is true for a record whose value is null, false for a value whose
    fields are all null (or that is not an object): the rows a Kafka table keeps with null columns."""
    convert = row_converter(stream_schema(parse_value_schema("mapping MAP<STRING, ARRAY<INT>>")))
    assert convert("four", None, 5, "t", 0, 1)[-1] is True
    assert convert("four", {"mapping": None}, 5, "t", 0, 1)[-2:] == (1, False)
    assert convert("four", {}, 5, "t", 0, 1)[1:2] == (None,)
    with_headers = row_converter(stream_schema(parse_value_schema("n BIGINT"), include_headers=True))
    assert with_headers("k", None, 5, "t", 0, 1, [("a", b"1")])[-2:] == (True, [("a", b"1")])


def test_decimal_keys_and_values_from_the_log_are_exact_or_null() -> None:
    """JSON numbers by their shortest repr (0.1 is 0.1, not 0.1000000000000000055…), long ones as JSON text."""
    schema = parse_value_schema("price DECIMAL(10,2), big DECIMAL(38,10), n DECIMAL")
    assert schema.simpleString() == "struct<price:decimal(10,2),big:decimal(38,10),n:decimal(10,0)>"
    conv = row_converter(stream_schema(schema, "decimal(4,1)"))
    row = conv(b"-12.5", {"price": 0.1, "big": "1234567890123456789012345678.0123456789", "n": 7}, 5, "t", 0, 1)
    assert row[:4] == (Decimal("-12.5"), Decimal("0.10"), Decimal("1234567890123456789012345678.0123456789"),
                       Decimal("7"))
    assert str(row[1]) == "0.10"
    # more places than the scale, more digits than the precision, not a number: null (never rounded)
    assert conv("123.45", {"price": 0.125, "big": True, "n": 1e12}, 5, "t", 0, 1)[:4] == (None,) * 4
    with pytest.raises(ValueError, match="precision 39 is not supported"):
        stream_schema(schema, "decimal(39,1)")
    with pytest.raises(ValueError, match="not supported"):  # inside a nested value JSON numbers are not exact
        parse_value_schema("prices ARRAY<DECIMAL(4,2)>")


@pytest.mark.parametrize("ddl, message", [
    ("m MAP<BIGINT, STRING>", "map<bigint,string> is not supported"),
    ("a ARRAY<", "not supported"),
    ("b BINARY", "not supported"),
])
def test_value_fields_json_cannot_carry_are_refused(ddl: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_value_schema(ddl)


def _agg_batch(plan: AggregatePlan, recs: list[tuple[Any, ...]]) -> pa.Table:
    """The projected batch a table aggregate's query gives: ``(key, groups, sources, tombstone, partition, offset)``
    per record, as ``__k``, ``__g<i>``, ``__s<i>``, ``__tomb``, ``__partition``, ``__offset``."""
    def arrow_type(t: Any) -> pa.DataType:
        if isinstance(t, DecimalType):
            return pa.decimal128(t.precision, t.scale)
        return {SqlType.VARCHAR: pa.string(), SqlType.DOUBLE: pa.float64()}.get(t, pa.int64())
    ng, ns = len(plan.group_types), len(plan.source_types)
    cols: dict[str, Any] = {"__k": pa.array([r[0] for r in recs], pa.string())}
    for i, t in enumerate(plan.group_types):
        cols[f"__g{i}"] = pa.array([r[1 + i] for r in recs], arrow_type(t))
    for i, t in enumerate(plan.source_types):
        cols[f"__s{i}"] = pa.array([r[1 + ng + i] for r in recs], arrow_type(t))
    cols["__tomb"] = pa.array([r[1 + ng + ns] for r in recs], pa.bool_())
    cols["__partition"] = pa.array([r[2 + ng + ns] for r in recs], pa.int32())
    cols["__offset"] = pa.array([r[3 + ng + ns] for r in recs], pa.int64())
    return pa.table(cols)


def _store_rows(parts: dict[int, Any]) -> dict[Any, tuple[Any, ...]]:
    return {kv.key: tuple(kv.value) for s in parts.values()
            for kv in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result}


class _Having:
    """``count > 1`` as the compiled conditions give it (conditions.py needs Spark to analyze; tested there)."""

    text, columns = "(n > 1)", ("n",)

    @staticmethod
    def keep(table: pa.Table) -> pa.Array:
        import pyarrow.compute as pc
        return pc.fill_null(pc.greater(table.column("n"), 1), False)


AGGS = (Aggregate("total", "sum", 0, "int"), Aggregate("lo", "min", 0, "int"), Aggregate("hi", "max", 0, "int"),
        Aggregate("mean", "avg", 1, "float"), Aggregate("first", "min", 2), Aggregate("names", "collect_list", 2),
        Aggregate("name_set", "collect_set", 2), Aggregate("top2", "topk", 0, k=2),
        Aggregate("top2d", "topk_distinct", 0, k=2))
PLAN = AggregatePlan("per_group", SqlType.VARCHAR, (SqlType.VARCHAR, SqlType.BIGINT),
                     (SqlType.BIGINT, SqlType.DOUBLE, SqlType.VARCHAR), AGGS,
                     (SqlType.BIGINT, SqlType.BIGINT, SqlType.BIGINT, SqlType.BIGINT, SqlType.DOUBLE, SqlType.VARCHAR,
                      *(parse_type(t) for t in ("VARCHAR[]", "VARCHAR[]", "BIGINT[]", "BIGINT[]"))),
                     ("n", "total", "lo", "hi", "mean", "first", "names", "name_set", "top2", "top2d"),
                     ("region", "tier"))


def test_table_aggregates_under_retraction_equal_duckdb_over_the_current_rows(tmp_path: Path) -> None:
    """Users move between (region, tier) groups, change values (nulls too), are deleted by tombstones or fall out of
    every group (a null group column): after each batch the store equals GROUP BY … HAVING over the current rows
    in DuckDB — a min whose holder left falls to the next value, collect_list keeps log order (a member that
    changes moves to the end), topk ranks what is there now. Batches are replayed after a crash now and then."""
    import duckdb

    spec = StoreSpec("per_group", StoreKind.KEY_VALUE, (Column("region", SqlType.VARCHAR),
                                                        Column("tier", SqlType.BIGINT)),
                     tuple(Column(n, t) for n, t in zip(PLAN.value_names, PLAN.value_types)), partitions=2)
    plan = dataclasses.replace(PLAN, having=_Having())
    parts = {p: open_partition(spec, p, tmp_path / f"p{p}.db") for p in range(2)}
    writer = PartitionedWriter(spec, parts)
    agg = TableAggregator(plan, tmp_path / "side.db")
    rnd = random.Random(17)
    current: dict[str, tuple[Any, ...]] = {}
    offsets = {0: 0, 1: 0}
    con = duckdb.connect()
    try:
        for batch in range(18):
            recs = []
            for k in (f"u{rnd.randrange(25)}" for _ in range(rnd.randrange(1, 14))):
                p = int(k[1:]) % 2
                offsets[p] += 1
                dead = rnd.random() < 0.12
                row = (None if rnd.random() < 0.05 else rnd.choice("ab"), rnd.randrange(2),
                       None if rnd.random() < 0.1 else rnd.randrange(-20, 20),
                       None if rnd.random() < 0.1 else rnd.randrange(-400, 400) / 8,
                       None if rnd.random() < 0.1 else rnd.choice(["ann", "bob", "cy", "dee"]))
                recs.append((k, *((None,) * 5 if dead else row), dead, p, offsets[p]))
                if dead or row[0] is None:
                    current.pop(k, None)
                else:
                    current[k] = (*row, p, offsets[p])
            table = _agg_batch(plan, recs)
            change = agg.apply(batch, table, 7)
            if batch % 6 == 3:  # the side state committed the batch, the store did not: Spark replays it
                agg.close()
                agg = TableAggregator(plan, tmp_path / "side.db")
                change = agg.apply(batch, table, 7)
            if change is not None:
                writer.write_table(batch, change, Position.from_map({"users": {0: batch}}))
            con.execute("CREATE OR REPLACE TABLE t (region VARCHAR, tier BIGINT, a BIGINT, f DOUBLE, name VARCHAR, "
                        "p INT, o BIGINT)")
            if current:
                con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)", list(current.values()))
            want = {}
            for r in con.execute("""
                SELECT region, tier, count(*), coalesce(sum(a), 0), min(a), max(a), avg(f), min(name),
                       coalesce(list(name ORDER BY p, o) FILTER (WHERE name IS NOT NULL), []),
                       coalesce(list(a ORDER BY a DESC) FILTER (WHERE a IS NOT NULL), [])[1:2],
                       coalesce(list(DISTINCT a ORDER BY a DESC) FILTER (WHERE a IS NOT NULL), [])[1:2]
                FROM t GROUP BY region, tier HAVING count(*) > 1""").fetchall():
                names = r[8]
                want[(r[0], r[1])] = (*r[2:6], r[6], r[7], names, list(dict.fromkeys(names)), r[9], r[10])
            got = _store_rows(parts)
            assert got.keys() == want.keys(), f"batch {batch}"
            for g, w in want.items():
                assert got[g][:4] == w[:4] and got[g][5:] == w[5:], (batch, g, got[g], w)
                assert got[g][4] == pytest.approx(w[4], abs=1e-9) if w[4] is not None else got[g][4] is None
        with pytest.raises(SideStateLost, match="is at batch 17, Spark runs batch 19"):
            agg.apply(19, _agg_batch(plan, []), 7)
    finally:
        agg.close()
        con.close()
        for s in parts.values():
            s.close()


def test_a_collect_over_too_many_members_fails_saying_why(tmp_path: Path) -> None:
    plan = AggregatePlan("big", SqlType.VARCHAR, (SqlType.VARCHAR,), (SqlType.VARCHAR,),
                         (Aggregate("names", "collect_list", 0),), (SqlType.BIGINT, parse_type("VARCHAR[]")),
                         ("n", "names"), ("g",))
    agg = TableAggregator(plan, tmp_path / "side.db")
    try:
        recs = [(f"k{i}", "g", f"n{i}", False, 0, i) for i in range(MAX_COLLECT + 1)]
        with pytest.raises(RuntimeError, match="collect_list 'names' would hold more than 10000 values"):
            agg.apply(0, _agg_batch(plan, recs), None)
    finally:
        agg.close()


def test_sessions_merge_as_kafka_merges_them() -> None:
    """A record within the gap of a session joins it; one bridging two sessions merges them (item 4)."""
    gap = 10
    s = merge_sessions([], [(100, [1]), (105, [2]), (122, [4])], gap)
    assert s == [[100, 105, 2, 3], [122, 122, 1, 4]]
    s = merge_sessions(s, [(113, [8])], gap)  # within 10 of 105 and of 122: one session
    assert s == [[100, 122, 4, 15]]
    s = merge_sessions(s, [(133, [None]), (90, [1])], gap)  # 133 is 11 after 122: a new one; 90 joins the first
    assert s == [[90, 122, 5, 16], [133, 133, 1, 0]]


def test_sessions_equal_a_recomputation_whatever_the_batching() -> None:
    rnd = random.Random(5)
    events = [(rnd.randrange(0, 500), [rnd.randrange(5)]) for _ in range(200)]

    def oracle(evts):  # noqa: ANN001, ANN202 - sorted by time, gaps larger than 10 split sessions
        out = []
        for t, (v,) in sorted(evts):
            if out and t - out[-1][1] <= 10:
                out[-1][1] = t
                out[-1][2] += 1
                out[-1][3] += v
            else:
                out.append([t, t, 1, v])
        return out

    for size in (1, 7, 200):
        state: list = []
        for i in range(0, len(events), size):
            state = merge_sessions(state, events[i:i + size], 10)
        assert state == oracle(events)


def test_session_min_max_avg_equal_a_recomputation() -> None:
    from stores.pipeline.open_sessions import session_values

    rnd = random.Random(8)
    events = [(rnd.randrange(0, 400), [v, v, v, v]) for v in
              (None if rnd.random() < 0.1 else rnd.randrange(-9, 9) for _ in range(150))]
    fns = ["sum", "min", "max", "avg"]
    state: list = []
    for i in range(0, len(events), 13):
        state = merge_sessions(state, events[i:i + 13], 10, fns)
    want = []
    for t, (v, *_r) in sorted(events, key=lambda e: e[0]):
        if want and t - want[-1][1] <= 10:
            want[-1][1] = t
            want[-1][2].append(v)
        else:
            want.append([t, t, [v]])
    got = [(s[0], s[1], s[2], session_values(s, fns)) for s in state]
    exp = []
    for ws, we, vs in want:
        nn = [v for v in vs if v is not None]
        exp.append((ws, we, len(vs), [sum(nn), min(nn, default=None), max(nn, default=None),
                                      sum(nn) / len(nn) if nn else None]))
    assert got == exp


def test_decimal_sum_min_max_avg_under_retraction_are_exact(tmp_path: Path) -> None:
    """DECIMAL(6,2) amounts: sum DECIMAL(16,2), min/max DECIMAL(6,2) and avg DECIMAL(10,6) equal DuckDB's DECIMAL
    GROUP BY over the current rows exactly — tenths never drift as floats would."""
    import duckdb

    kinds = ("sum", "min", "max", "avg")
    assert [result_decimal(k, "decimal(6,2)").value for k in kinds] == [
        "DECIMAL(16,2)", "DECIMAL(6,2)", "DECIMAL(6,2)", "DECIMAL(10,6)"]
    assert result_decimal("sum", "decimal(38,10)").value == "DECIMAL(38,10)"
    assert result_decimal("avg", "decimal(36,10)").value == "DECIMAL(38,14)"
    d62 = DecimalType(6, 2)
    plan = AggregatePlan("dec_aggs", SqlType.VARCHAR, (SqlType.VARCHAR,), (d62,),
                         tuple(Aggregate(k, k, 0, "decimal(6,2)") for k in kinds),
                         (SqlType.BIGINT, *(result_decimal(k, "decimal(6,2)") for k in kinds)),
                         ("n", *kinds), ("g",))
    spec = StoreSpec("dec_aggs", StoreKind.KEY_VALUE, Column("g", SqlType.VARCHAR),
                     tuple(Column(n, t) for n, t in zip(plan.value_names, plan.value_types)), partitions=2)
    parts = {p: open_partition(spec, p, tmp_path / f"d{p}.db") for p in range(2)}
    writer = PartitionedWriter(spec, parts)
    agg = TableAggregator(plan, tmp_path / "side.db")
    rnd = random.Random(23)
    current: dict[str, tuple[str, Decimal | None]] = {}
    con = duckdb.connect()
    off = 0
    try:
        for batch in range(12):
            recs = []
            for k in rnd.sample([f"u{i}" for i in range(20)], 8):
                off += 1
                dead = rnd.random() < 0.15
                new = (rnd.choice("ab"), None if rnd.random() < 0.1 else
                       Decimal(rnd.choice(["0.10", "0.20", "-0.30", "99.99", "1.05"])))
                recs.append((k, *((None, None) if dead else new), dead, 0, off))
                if dead:
                    current.pop(k, None)
                else:
                    current[k] = new
            change = agg.apply(batch, _agg_batch(plan, recs), 1)
            if change is not None:
                writer.write_table(batch, change, Position.from_map({"t": {0: batch}}))
            got = _store_rows(parts)
            con.execute("CREATE OR REPLACE TABLE t (g VARCHAR, a DECIMAL(6,2))")
            if current:
                con.executemany("INSERT INTO t VALUES (?, ?)", list(current.values()))
            want = {r[0]: tuple(r[1:]) for r in con.execute(
                "SELECT g, count(*), coalesce(sum(a), 0), min(a), max(a), round(avg(a), 6) FROM t GROUP BY g"
            ).fetchall()}
            assert got.keys() == want.keys(), batch
            for g, w in want.items():
                assert got[g][:4] == w[:4] and (got[g][4] is None) == (w[4] is None), (batch, g, got[g], w)
                assert w[4] is None or got[g][4] == Decimal(str(w[4])).quantize(Decimal("0.000001")), (got[g], w)
                assert all(type(v) is Decimal for v in got[g][1:] if v is not None)
    finally:
        agg.close()
        con.close()
        for s in parts.values():
            s.close()
