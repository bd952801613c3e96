"""ARRAY and STRUCT keys (issue 51 item 4) without a JVM: stored as canonical JSON text, partitioned by it, looked up
whole through IQv2, returned decoded to bulk readers; and never pushed down by the planner (DuckDB's list and
struct equality and order are not the text's), so SQL on them is a scan DuckDB filters."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import planner
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec, parse_type
from stores.engine import open_partition
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery

ARRAY_KEY = StoreSpec("by_tags", StoreKind.KEY_VALUE, Column("key", parse_type("VARCHAR[]")),
                      (Column("n", SqlType.BIGINT),), partitions=3)
STRUCT_KEY = StoreSpec("by_pair", StoreKind.TIMESTAMPED_KEY_VALUE,
                       Column("sk", parse_type("STRUCT(f1 VARCHAR, f2 BIGINT)")), (Column("total", SqlType.BIGINT),),
                       partitions=2)


def test_nested_keys_are_written_partitioned_and_looked_up_whole(tmp_path: Path) -> None:
    parts = {p: open_partition(ARRAY_KEY, p, tmp_path / f"p{p}.db") for p in range(3)}
    try:
        keys = [["1", "0"], ["1", "1"], ["0"], [], ["a\u00e9", "b"]]
        writer = PartitionedWriter(ARRAY_KEY, parts)
        writer.write_table(0, pa.table({"k": pa.array(keys, pa.list_(pa.string())),
                                        "v0": pa.array(range(len(keys)), pa.int64())}),
                           Position.from_map({"t": {0: 0}}))
        for i, k in enumerate(keys):  # the writer's partition is the one a lookup computes (the JSON text's murmur2)
            p = partition_for_key(k, 3, ARRAY_KEY.key.type)
            res = parts[p].query(KeyQuery.with_key(k), PositionBound.unbounded())
            assert res.is_success and res.result == (i,), k
        got = {tuple(kv.key): kv.value for s in parts.values()
               for kv in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result}
        assert got == {tuple(k): (i,) for i, k in enumerate(keys)}
        # bulk readers (the gateway's raw rows) get the key decoded, not its stored text
        scan = [r for s in parts.values()
                for r in s.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result.remaining_rows()]
        assert sorted(r[0] for r in scan) == sorted(keys)
    finally:
        for s in parts.values():
            s.close()


def test_the_planner_leaves_nested_keys_to_duckdb() -> None:
    catalog = {"by_tags": ARRAY_KEY, "by_pair": STRUCT_KEY}
    for sql in ("SELECT * FROM by_tags WHERE key = ['1', '0']", "SELECT * FROM by_tags WHERE key = ?",
                "SELECT * FROM by_tags WHERE key IN (['1'], ['2'])", "SELECT * FROM by_tags WHERE key > ['1']",
                "SELECT * FROM by_pair WHERE sk = {'f1': 'x', 'f2': 1}", "SELECT * FROM by_pair WHERE sk.f1 = 'x'"):
        params = [["1", "0"]] if "?" in sql else None
        plan = planner.plan(sql, catalog, params=params)
        (scan,) = plan.scans
        assert scan.full_scan and "KeyQuery" not in planner.explain_text(plan), sql
    ordered = planner.plan("SELECT key FROM by_tags ORDER BY key LIMIT 2", catalog)
    assert ordered.scans[0].order is None and ordered.scans[0].limit is None  # the text's order is not the list's


@pytest.mark.parametrize("kind, key, message", [
    (StoreKind.KEY_VALUE, "MAP(VARCHAR, BIGINT)", "a key is a scalar, an ARRAY or a STRUCT .*not a MAP"),
    (StoreKind.WINDOW, "VARCHAR[]", "an ARRAY or STRUCT key is for key-value stores"),
    (StoreKind.VERSIONED, "STRUCT(a BIGINT)", "an ARRAY or STRUCT key is for key-value stores"),
])
def test_nested_keys_other_stores_cannot_have_are_refused(kind: StoreKind, key: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StoreSpec("s", kind, Column("k", parse_type(key)), (Column("n", SqlType.BIGINT),))


def test_a_nested_key_survives_store_json() -> None:
    assert StoreSpec.from_json(STRUCT_KEY.to_json()) == STRUCT_KEY
