"""DECIMAL's stored form (issue 16 item 7): exact, 16 bytes whose byte order is numeric order, the same
whether a value is encoded alone (Python writes, planner keys) or by the vectorized Arrow path (Spark batches)."""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow as pa
import pytest

from stores.catalog.decimals import (
    EXACT,
    DecimalType,
    decode_decimal,
    encode_decimal,
    parse_decimal,
)
from stores.catalog.schema import Column, StoreKind, StoreSpec, parse_type
from stores.catalog.tuple_keys import coerce_tuple, decode_tuple, encode_tuple, prefix_range
from stores.engine.columns import encode_decimal_array


def _values(t: DecimalType, n: int, seed: int) -> list[Decimal]:
    rnd = random.Random(seed)
    top = 10 ** t.precision - 1
    edge = [Decimal(0), Decimal(top), Decimal(-top), Decimal(1), Decimal(-1)]
    return [d.scaleb(-t.scale, EXACT) for d in edge + [Decimal(rnd.randrange(-top, top + 1)) for _ in range(n)]]


@pytest.mark.parametrize("t", [DecimalType(1, 0), DecimalType(6, 2), DecimalType(18, 4), DecimalType(38, 10),
                               DecimalType(38, 38), DecimalType(38, 0)])
def test_bytes_sort_as_the_numbers_and_decode_exactly(t: DecimalType) -> None:
    vals = _values(t, 300, t.precision)
    enc = [encode_decimal(t, v) for v in vals]
    assert all(len(b) == 16 for b in enc)
    assert [decode_decimal(t, b) for b in sorted(enc)] == sorted(vals)
    assert all(str(decode_decimal(t, b)) == str(v.quantize(Decimal(1).scaleb(-t.scale, EXACT), context=EXACT)) for b, v in zip(enc, vals))


def test_the_arrow_path_equals_the_python_path_with_nulls_and_slices() -> None:
    t = DecimalType(38, 10)
    vals: list[Decimal | None] = list(_values(t, 200, 1))
    vals[3] = vals[50] = None
    arr = pa.array(vals, pa.decimal128(t.precision, t.scale))
    want = [None if v is None else encode_decimal(t, v) for v in vals]
    assert encode_decimal_array(arr).to_pylist() == want
    assert encode_decimal_array(arr.slice(17, 40)).to_pylist() == want[17:57]


def test_text_and_limits() -> None:
    assert parse_decimal("decimal(10,2)") == DecimalType(10, 2) == parse_type("NUMERIC( 10 , 2 )")
    assert parse_decimal("DECIMAL") == DecimalType(10, 0)  # Spark's default
    assert parse_decimal("double") is None
    assert str(DecimalType(20, 2)) == "DECIMAL(20,2)"
    with pytest.raises(ValueError, match="precision 39 is not supported"):
        parse_decimal("DECIMAL(39,0)")
    t = DecimalType(4, 2)
    assert encode_decimal(t, "12.5") == encode_decimal(t, Decimal("12.50")) == encode_decimal(t, 12.5)
    for bad, why in [(Decimal("1.234"), "more than 2 decimal places"), (100, "digits before the point"),
                     ("x", "not a number"), (True, "not a number"), (float("nan"), "not a finite")]:
        with pytest.raises(ValueError, match=why):
            encode_decimal(t, bad)


def test_composite_keys_with_a_decimal_part_keep_tuple_order() -> None:
    parts = (Column("region", "VARCHAR"), Column("rate", "DECIMAL(10,3)"))
    rnd = random.Random(4)
    keys = [(rnd.choice("ab"), Decimal(rnd.randrange(-10**6, 10**6)).scaleb(-3, EXACT)) for _ in range(200)]
    enc = {encode_tuple(parts, coerce_tuple(parts, k)): k for k in keys}
    assert [enc[b] for b in sorted(enc)] == sorted(set(keys))
    assert all(decode_tuple(parts, b) == k for b, k in enc.items())
    lo, hi = prefix_range(parts, ("a",), Decimal("-1.5"), Decimal("2"))
    assert sorted(k for b, k in enc.items() if lo <= b <= hi) == sorted(
        k for k in set(keys) if k[0] == "a" and Decimal("-1.5") <= k[1] <= 2)
    spec = StoreSpec("s", StoreKind.KEY_VALUE, parts, (Column("v", "DECIMAL(20,2)"),))
    assert StoreSpec.from_json(spec.to_json()) == spec


def test_a_stored_decimal_key_coerces_to_itself_and_lands_on_the_same_partition() -> None:
    from stores.catalog.partitioner import partition_for_key
    from stores.catalog.schema import coerce_key

    t = DecimalType(10, 2)
    for v in (Decimal("12.5"), Decimal("-0.01"), Decimal(0)):
        stored = coerce_key(t, v)
        assert coerce_key(t, stored) == stored  # a table aggregate's group, the row path: keys already stored
        assert partition_for_key(stored, 7, t) == partition_for_key(v, 7, t) == partition_for_key(str(v), 7, t)
