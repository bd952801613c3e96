"""Issue 16 without a JVM: the log's key types and nested value fields (item 7, item 2), and the table
aggregate's arithmetic against a real store partition (item 6)."""

from __future__ import annotations

import random
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import RangeQuery
from stores.pipeline.open_sessions import merge_sessions
from stores.pipeline.stream_rows import parse_value_schema, row_converter, stream_schema
from stores.pipeline.table_aggregate import aggregate_rows, group_deltas

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


@pytest.mark.parametrize("key_type", ["array<int>", "uuid"])
def test_unsupported_key_types_name_the_supported_ones(key_type: str) -> None:
    with pytest.raises(ValueError, match="use one of string, int, bigint, double, boolean, date, timestamp, binary, "
                                         "decimal"):
        stream_schema(SCHEMA, key_type)


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


PER_CAT = StoreSpec("per_cat", StoreKind.KEY_VALUE, Column("category", SqlType.VARCHAR),
                    (Column("users", SqlType.BIGINT), Column("total", SqlType.BIGINT)), partitions=3)


def test_deltas_applied_to_the_stores_totals_equal_a_recount(tmp_path: Path) -> None:
    """Random moves between groups, batch by batch: the store equals GROUP BY over the current rows."""
    stores = {p: open_partition(PER_CAT, p, tmp_path / f"p{p}.db") for p in range(3)}
    writer = PartitionedWriter(PER_CAT, stores)
    rnd = random.Random(11)
    current: dict[str, tuple[str, int]] = {}
    try:
        for batch in range(12):
            rows = []
            for k in rnd.sample([f"u{i}" for i in range(20)], 8):
                old = current.get(k)
                new = None if rnd.random() < 0.2 else (rnd.choice("abcd"), rnd.randrange(-50, 100))
                rows.append({"k": k, "old_g": old and old[0], "old_s0": old and old[1],
                             "new_g": new and new[0], "new_s0": new and new[1]})
                if new is None:
                    current.pop(k, None)
                else:
                    current[k] = new
            table = pa.Table.from_pylist(rows, pa.schema([("k", pa.string()), ("old_g", pa.string()),
                                                          ("old_s0", pa.int64()), ("new_g", pa.string()),
                                                          ("new_s0", pa.int64())]))
            change = aggregate_rows(PER_CAT, writer.partition_stores.__getitem__, group_deltas(table, ["int"]), 1, ["int"])
            writer.write_table(batch, change, Position.from_map({"users": {0: batch}}))
            got = {}
            for s in stores.values():
                for kv in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result:
                    got[kv.key] = tuple(kv.value)
            want: dict[str, tuple[int, int]] = {}
            for g, amount in current.values():
                n, t = want.get(g, (0, 0))
                want[g] = (n + 1, t + amount)
            assert got == want, f"batch {batch}"
    finally:
        for s in stores.values():
            s.close()


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


AGG_TYPES = ("sum:int", "min:int", "max:int", "avg:int", "min:float", "avg:float")
PER_CAT_AGGS = StoreSpec(
    "per_cat_aggs", StoreKind.KEY_VALUE, Column("category", SqlType.VARCHAR),
    (Column("users", SqlType.BIGINT), Column("total", SqlType.BIGINT), Column("lo", SqlType.BIGINT),
     Column("hi", SqlType.BIGINT), Column("mean", SqlType.DOUBLE), Column("lo_f", SqlType.DOUBLE),
     Column("mean_f", SqlType.DOUBLE)),
    partitions=2, internal=(Column("__aggregate_state", SqlType.VARCHAR),))


def test_min_max_avg_under_retraction_equal_duckdb_over_the_current_rows(tmp_path: Path) -> None:
    """Users move between groups and their values change (nulls too): each batch, the store equals GROUP BY over
    the current rows in DuckDB — a min whose holder left falls to the next value, an avg is exact (item 3)."""
    import duckdb

    stores = {p: open_partition(PER_CAT_AGGS, p, tmp_path / f"p{p}.db") for p in range(2)}
    writer = PartitionedWriter(PER_CAT_AGGS, stores)
    rnd = random.Random(17)
    current: dict[str, tuple[str, int | None, float | None]] = {}
    srcs = (1, 1, 1, 1, 2, 2)  # which value each aggregate reads: the int amount, or the float score
    i64, f64 = pa.int64(), pa.float64()
    schema = pa.schema([("k", pa.string()), ("old_g", pa.string()),
                        *((f"old_s{i}", i64 if s == 1 else f64) for i, s in enumerate(srcs)), ("new_g", pa.string()),
                        *((f"new_s{i}", i64 if s == 1 else f64) for i, s in enumerate(srcs))])
    con = duckdb.connect()
    try:
        for batch in range(15):
            rows = []
            for k in rnd.sample([f"u{i}" for i in range(25)], 9):
                old = current.get(k)
                new = None if rnd.random() < 0.15 else (
                    rnd.choice("abc"), None if rnd.random() < 0.1 else rnd.randrange(-20, 20),
                    None if rnd.random() < 0.1 else rnd.randrange(-400, 400) / 8)
                row = {"k": k, "old_g": old and old[0], "new_g": new and new[0]}
                for i, s in enumerate(srcs):
                    row[f"old_s{i}"] = old[s] if old else None
                    row[f"new_s{i}"] = new[s] if new else None
                rows.append(row)
                if new is None:
                    current.pop(k, None)
                else:
                    current[k] = new
            change = aggregate_rows(PER_CAT_AGGS, writer.partition_stores.__getitem__,
                                    group_deltas(pa.Table.from_pylist(rows, schema), AGG_TYPES), 1, AGG_TYPES)
            writer.write_table(batch, change, Position.from_map({"users": {0: batch}}))
            got = {}
            for s in stores.values():
                for kv in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result:
                    got[kv.key] = tuple(kv.value)
            con.execute("CREATE OR REPLACE TABLE t (g VARCHAR, a BIGINT, f DOUBLE)")
            if current:
                con.executemany("INSERT INTO t VALUES (?, ?, ?)", list(current.values()))
            want = {r[0]: tuple(r[1:]) for r in con.execute(
                "SELECT g, count(*), coalesce(sum(a), 0), min(a), max(a), avg(a), min(f), avg(f) FROM t GROUP BY g"
            ).fetchall()}
            assert got.keys() == want.keys(), f"batch {batch}"
            assert all(len(v) == 7 for v in got.values())  # the internal state column is never read by queries
            for g, w in want.items():
                assert got[g][:5] == w[:5] and got[g][5] == w[5], (batch, g, got[g], w)
                assert got[g][6] == pytest.approx(w[6], abs=1e-9) if w[6] is not None else got[g][6] is None
    finally:
        con.close()
        for s in stores.values():
            s.close()


def test_the_internal_column_is_kept_in_store_json_but_not_among_the_columns() -> None:
    assert StoreSpec.from_json(PER_CAT_AGGS.to_json()) == PER_CAT_AGGS
    assert StoreSpec.from_json(PER_CAT_AGGS.to_json()).internal == PER_CAT_AGGS.internal
    assert "__aggregate_state" not in [c.name for c in PER_CAT_AGGS.columns()]
    assert "internal" not in PER_CAT.to_json()  # stores without one write store.json as before


def test_a_min_over_too_many_distinct_values_fails_saying_why() -> None:
    from stores.pipeline.table_aggregate import MAX_DISTINCT, _apply_multiset

    state = {"0": [[v, 1] for v in range(MAX_DISTINCT)]}
    assert _apply_multiset(PER_CAT_AGGS, "a", 0, "min", "int", state, "[[-1, 1], [0, -1]]") == -1
    with pytest.raises(RuntimeError, match="would keep 10001 distinct values .*aggregate a coarser column"):
        _apply_multiset(PER_CAT_AGGS, "a", 0, "min", "int", state, "[[-5, 1]]")


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
    """DECIMAL(6,2) amounts (item 7 x item 3): sum DECIMAL(16,2), min/max DECIMAL(6,2) and avg DECIMAL(10,6)
    equal DuckDB's DECIMAL GROUP BY over the current rows exactly — tenths never drift as floats would."""
    import duckdb

    from stores.pipeline.table_aggregate import needs_state, result_decimal

    kinds = ("sum:decimal(6,2)", "min:decimal(6,2)", "max:decimal(6,2)", "avg:decimal(6,2)")
    assert [result_decimal(k.split(":")[0], "decimal(6,2)").value for k in kinds] == [
        "DECIMAL(16,2)", "DECIMAL(6,2)", "DECIMAL(6,2)", "DECIMAL(10,6)"]
    assert result_decimal("sum", "decimal(38,10)").value == "DECIMAL(38,10)"
    assert result_decimal("avg", "decimal(36,10)").value == "DECIMAL(38,14)" and needs_state(kinds)
    spec = StoreSpec("dec_aggs", StoreKind.KEY_VALUE, Column("g", SqlType.VARCHAR),
                     (Column("n", SqlType.BIGINT), Column("total", "DECIMAL(16,2)"), Column("lo", "DECIMAL(6,2)"),
                      Column("hi", "DECIMAL(6,2)"), Column("mean", "DECIMAL(10,6)")),
                     partitions=2, internal=(Column("__aggregate_state", SqlType.VARCHAR),))
    stores = {p: open_partition(spec, p, tmp_path / f"d{p}.db") for p in range(2)}
    writer = PartitionedWriter(spec, stores)
    dec = pa.decimal128(6, 2)
    schema = pa.schema([("k", pa.string()), ("old_g", pa.string()), *((f"old_s{i}", dec) for i in range(4)),
                        ("new_g", pa.string()), *((f"new_s{i}", dec) for i in range(4))])
    rnd = random.Random(23)
    current: dict[str, tuple[str, Decimal | None]] = {}
    con = duckdb.connect()
    try:
        for batch in range(12):
            rows = []
            for k in rnd.sample([f"u{i}" for i in range(20)], 8):
                old = current.get(k)
                new = None if rnd.random() < 0.15 else (rnd.choice("ab"), None if rnd.random() < 0.1 else
                                                        Decimal(rnd.choice(["0.10", "0.20", "-0.30", "99.99", "1.05"])))
                row = {"k": k, "old_g": old and old[0], "new_g": new and new[0]}
                for i in range(4):
                    row[f"old_s{i}"], row[f"new_s{i}"] = old and old[1], new and new[1]
                rows.append(row)
                if new is None:
                    current.pop(k, None)
                else:
                    current[k] = new
            change = aggregate_rows(spec, writer.partition_stores.__getitem__,
                                    group_deltas(pa.Table.from_pylist(rows, schema), kinds), 1, kinds)
            writer.write_table(batch, change, Position.from_map({"t": {0: batch}}))
            got = {kv.key: tuple(kv.value) for s in stores.values()
                   for kv in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result}
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
        con.close()
        for s in stores.values():
            s.close()
