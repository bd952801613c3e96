"""Constraints on a composite key's columns → whole keys to look up, or key-prefix ranges to scan.

A store keyed by (region, product) keeps its keys in tuple order
(``stores/catalog/tuple_keys.py``), so:

- an equality on EVERY key column is a key lookup (``IN`` lists multiply: a
  cartesian product of at most ``MAX_KEYS`` keys);
- equalities on the leading columns, optionally followed by a range on the
  next one, are ONE contiguous byte range per combination of leading values;
- anything else (a constraint on a later column alone) leaves a full scan,
  and the predicate to DuckDB (it always stays in the residual SQL).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stores.catalog.schema import StoreSpec
from stores.catalog.tuple_keys import prefix_range

from .literals import NO_MATCH, NOT_PUSHABLE
from .predicates import Constraint

__all__ = ["CompositeKeys", "composite_keys", "MAX_KEYS"]

MAX_KEYS = 10_000  # combinations of IN lists looked up key by key; beyond, the leading columns' range is scanned


@dataclass
class CompositeKeys:
    """What the constraints allow: ``keys`` (whole key tuples) or ``ranges`` (inclusive byte bounds), or neither.

    ``impossible``: no row can match (an empty IN intersection, a bound beyond a column's range).
    ``exact``: the requests return exactly the rows the consumed constraints select.
    """

    keys: list[tuple[Any, ...]] | None = None
    ranges: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    impossible: bool = False
    exact: bool = True


@dataclass
class _Part:
    values: list[Any] | None = None  # equality values (intersected), None: no equality
    lo: Any = None
    hi: Any = None
    ranged: bool = False


Coerce = Callable[..., tuple[Any, str]]  # (ref, sql_type, op, column[, among]): the binder's ``value``


def composite_keys(spec: StoreSpec, constraints: list[Constraint], coerce: Coerce) -> CompositeKeys:
    """``coerce(ref, sql_type, op, column, among)`` → (canonical value or NO_MATCH/NOT_PUSHABLE, op) is the binder's
    (``among``: how many values an equality allows; see ``_Binder.value``)."""
    parts = spec.key_parts
    state = [_Part() for _ in parts]
    out = CompositeKeys()
    for c in constraints:
        if not c.column.startswith("key#"):
            continue
        i = int(c.column[4:])
        col, p = parts[i], state[i]
        if c.kind == "eq":
            coerced = [coerce(r, col.type, "=", col.name, len(c.values))[0] for r in c.values]
            if any(v is NOT_PUSHABLE for v in coerced):
                out.exact = False
                continue
            vals = list(dict.fromkeys(v for v in coerced if v is not NO_MATCH))
            p.values = vals if p.values is None else [v for v in p.values if v in set(vals)]
            continue
        for op, ref in c.bounds:
            v, op2 = coerce(ref, col.type, op, col.name)
            if v is NO_MATCH:
                out.impossible = True
            elif v is NOT_PUSHABLE:
                out.exact = False
            else:
                p.ranged = True
                if op2 in (">=", "="):
                    p.lo = v if p.lo is None else max(p.lo, v)
                if op2 in ("<=", "="):
                    p.hi = v if p.hi is None else min(p.hi, v)
    for p in state:  # a range on a column that also has equalities narrows them
        if p.values is not None and p.ranged:
            p.values = [v for v in p.values if (p.lo is None or v >= p.lo) and (p.hi is None or v <= p.hi)]
    if out.impossible or any(p.values == [] for p in state):
        out.impossible = True
        return out
    lead = 0
    while lead < len(state) and state[lead].values is not None:
        lead += 1
    combos = 1
    for p in state[:lead]:
        combos *= len(p.values or ())
    if lead == len(state) and combos <= MAX_KEYS:
        out.keys = [tuple(k) for k in itertools.product(*(p.values or () for p in state))]
        return out
    if lead == len(state):
        lead -= 1  # too many keys: scan the ranges of the leading columns' combinations
    while lead and combos > MAX_KEYS:
        lead -= 1
        combos //= max(1, len(state[lead].values or ()))
        out.exact = False
    nxt = state[lead] if lead < len(state) else None
    lo = nxt.lo if nxt is not None and nxt.ranged else None
    hi = nxt.hi if nxt is not None and nxt.ranged else None
    if nxt is not None and nxt.values is not None:  # a column whose values were too many to enumerate
        lo, hi = min(nxt.values), max(nxt.values)
    if lead == 0 and lo is None and hi is None:
        return out  # nothing usable: a full scan
    for combo in itertools.product(*(p.values or () for p in state[:lead])):
        out.ranges.append(prefix_range(parts, combo, lo, hi))
    return out
