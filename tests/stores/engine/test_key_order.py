"""sort_order: stable, SQLite's order for keys that fit the prefix, partitions first; checked against Python's sort."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.engine.key_order import STRING_PREFIX, sort_order

SHORT = st.text(alphabet=st.sampled_from(["a", "b", "\0", "é", "z", "日"]), max_size=9)


def _utf8(s: str) -> bytes:
    return s.encode("utf-8")


@settings(max_examples=80, deadline=None)
@given(st.lists(SHORT, max_size=60), st.booleans())
def test_strings_in_sqlite_binary_order_and_stable(keys: list[str], large: bool) -> None:
    rows = pa.table({"k": pa.array(keys, pa.large_string() if large else pa.string())})
    order = sort_order(rows, ("k",)).tolist()
    # BINARY collation compares the UTF-8 bytes; Python's sort is stable, so equal keys keep their arrival order
    assert order == sorted(range(len(keys)), key=lambda i: _utf8(keys[i]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.integers(-3, 3), st.integers(0, 3)), max_size=60))
def test_long_keys_keep_arrival_order_within_a_row_and_partitions_come_first(items: list) -> None:
    rows = pa.table({"k": pa.array([k for k, _, _ in items], pa.string()),
                     "ts": pa.array([t for _, t, _ in items], pa.int64())})
    part = np.array([p for _, _, p in items], dtype=np.uint8)
    order = sort_order(rows, ("k", "ts"), first=part).tolist()
    assert sorted(order) == list(range(len(items)))
    got = [(items[i][2], _utf8(items[i][0])[:STRING_PREFIX], items[i][1]) for i in order]
    assert [g[0] for g in got] == sorted(g[0] for g in got)  # partitions first
    fits = all(len(_utf8(k)) <= STRING_PREFIX for k, _, _ in items)
    if fits:  # exact order; beyond the prefix the order of distinct keys is free, not the order within one
        assert order == sorted(range(len(items)), key=lambda i: (items[i][2], _utf8(items[i][0]), items[i][1]))
    for a, b in zip(order, order[1:]):
        if (items[a][0], items[a][1], items[a][2]) == (items[b][0], items[b][1], items[b][2]):
            assert a < b  # stable
    seen: dict[tuple, int] = {}
    for pos, i in enumerate(order):  # changes to one row stay in arrival order
        ident = items[i]
        if ident in seen:
            assert order[seen[ident]] < i
        seen[ident] = pos


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(-(2**63), 2**63 - 1)), st.integers(-5, 5), st.integers(-5, 5)),
                max_size=60))
def test_numeric_keys_and_window_bounds(items: list) -> None:
    rows = pa.table({"k": pa.array([k for k, _, _ in items], pa.int64()),
                     "ws": pa.array([w for _, w, _ in items], pa.int64()),
                     "we": pa.array([e for _, _, e in items], pa.int64())})
    assert sort_order(rows, ("k", "ws", "we")).tolist() == sorted(range(len(items)), key=lambda i: items[i])


def test_doubles_and_null_times() -> None:
    rows = pa.table({"k": pa.array([2.5, -0.0, 0.0, -1e300, 2.5]), "ts": pa.array([None, 1, None, 3, 0], pa.int64())})
    assert sort_order(rows, ("k", "ts")).tolist() == [3, 2, 1, 0, 4]  # -0.0 == 0.0; a null time sorts first
