"""Property tests: stores agree with a plain-Python model of the same writes, in any write order."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import MultiVersionedKeyQuery, RangeQuery, VersionedKeyQuery

UNBOUNDED = PositionBound.unbounded()


def _store(kind: StoreKind, tmp: str, **kw: Any) -> Any:
    spec = StoreSpec("p", kind, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),), **kw)
    return open_partition(spec, 0, Path(tmp) / "p.db", synchronous="OFF")


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(-1000, 1000), st.one_of(st.none(), st.integers(0, 9))), max_size=60),
    lo=st.one_of(st.none(), st.integers(-1100, 1100)),
    hi=st.one_of(st.none(), st.integers(-1100, 1100)),
    descending=st.booleans(),
)
def test_key_value_range_matches_a_dict(ops: list[tuple[int, int | None]], lo: int | None, hi: int | None,
                                        descending: bool) -> None:
    model: dict[int, int] = {}
    for k, v in ops:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    with tempfile.TemporaryDirectory() as tmp:
        store = _store(StoreKind.KEY_VALUE, tmp)
        store.apply_batch(0, [Change(k, None if v is None else (v,)) for k, v in ops], Position.from_map({"t": {0: 1}}))
        q = RangeQuery.with_range(lo, hi)
        if descending:
            q = q.with_descending_keys()
        got = [(kv.key, kv.value[0]) for kv in store.query(q, UNBOUNDED).result]
        store.close()
    want = sorted(((k, v) for k, v in model.items()
                   if (lo is None or k >= lo) and (hi is None or k <= hi)), reverse=descending)
    if lo is not None and hi is not None and lo > hi:
        want = []
    assert got == want


@settings(max_examples=40, deadline=None)
@given(
    versions=st.dictionaries(st.integers(0, 200), st.one_of(st.none(), st.integers(0, 99)), max_size=15),
    order=st.randoms(use_true_random=False),
    probe=st.integers(-10, 210),
    window=st.tuples(st.integers(-10, 210), st.integers(0, 100)),
)
def test_versioned_history_does_not_depend_on_write_order(versions: dict[int, int | None], order: Any, probe: int,
                                                          window: tuple[int, int]) -> None:
    items = list(versions.items())
    order.shuffle(items)
    ts_sorted = sorted(versions)
    with tempfile.TemporaryDirectory() as tmp:
        store = _store(StoreKind.VERSIONED, tmp)
        for i, (ts, v) in enumerate(items):  # one version per batch, in shuffled order
            store.apply_batch(i, [Change(1, None if v is None else (v,), ts)], Position.from_map({"t": {0: i}}))
        hist = [(r.value[0], r.timestamp, r.valid_to) for r in store.query(
            MultiVersionedKeyQuery.with_key(1).with_ascending_timestamps(), UNBOUNDED).result]
        at = store.query(VersionedKeyQuery.with_key(1).as_of(probe), UNBOUNDED).result
        lo, width = window
        ranged = [r.timestamp for r in store.query(
            MultiVersionedKeyQuery.with_key(1).from_time(lo).to_time(lo + width), UNBOUNDED).result]
        store.close()
    model = []
    for i, ts in enumerate(ts_sorted):
        valid_to = ts_sorted[i + 1] if i + 1 < len(ts_sorted) else None
        if versions[ts] is not None:
            model.append((versions[ts], ts, valid_to))
    assert hist == model
    current = [m for m in model if m[1] <= probe and (m[2] is None or m[2] > probe)]
    assert (None if at is None else (at.value[0], at.timestamp, at.valid_to)) == (current[0] if current else None)
    overlapping = [m[1] for m in model if m[1] <= lo + width and (m[2] is None or m[2] > lo)]
    assert ranged == sorted(overlapping, reverse=True)  # ANY is newest-first
