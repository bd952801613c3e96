"""Values, three-valued logic and orders as DuckDB treats them: the pieces of ``residual_eval``.

What kind of DuckDB literal a parameter becomes (``sql_literal`` writes ``1.5``
as a DECIMAL and ``1e+20`` as a DOUBLE), how a DECIMAL becomes a DOUBLE,
BIGINT overflow, AND/OR with NULL, LIMIT/OFFSET counts, and the order of
groups (NULLs last unless NULLS FIRST). ``Unsupported`` and ``Fallback`` are
the evaluator's two ways of leaving a statement to DuckDB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from planner.residual_program import Lit, Slot

__all__ = ["Fallback", "Fn", "Node", "Unsupported", "as_double", "common", "count_of", "decimal_of", "first_row", "i64",
           "literal_kind", "logic_and", "logic_and3", "logic_or", "ordered", "signature", "to_double"]

I64 = (-(2**63), 2**63 - 1)
Fn = Callable[[tuple[Any, ...], tuple[Any, ...]], Any]


class Node:
    """A compiled expression: ``fn(row, params)``, its kind (``I`` BIGINT, ``I32`` INTEGER, ``D`` DOUBLE, ``N``
    DECIMAL, ``S`` VARCHAR, ``B`` BOOLEAN, ``NULL``), whether a column is involved."""

    __slots__ = ("fn", "kind", "has_col")

    def __init__(self, fn: Fn, kind: str, has_col: bool) -> None:
        self.fn, self.kind, self.has_col = fn, kind, has_col


def common(nodes: list[Node]) -> tuple[str, list[Node]]:
    """The type DuckDB compares (or merges: COALESCE, CASE) several values in: exact integers, DOUBLE (integers
    and DECIMALs cast), VARCHAR, BOOLEAN; ``Unsupported`` for a mix whose DuckDB cast is not replicated here."""
    kinds = {n.kind for n in nodes} - {"NULL"}
    if not kinds:
        return "NULL", nodes
    if kinds <= {"I", "I32"}:
        return "I", nodes
    if kinds <= {"I", "I32", "D"} or kinds == {"D", "N"}:
        return "D", [to_double(n) for n in nodes]
    if len(kinds) == 1 and kinds <= {"S", "B"}:
        return kinds.pop(), nodes
    raise Unsupported


def to_double(n: Node) -> Node:
    if n.kind in ("D", "NULL"):
        return n
    f = n.fn
    return Node(lambda r, p: None if (v := f(r, p)) is None else as_double(v), "D", n.has_col)


class Unsupported(Exception):
    """This program with these parameter types is not evaluated here (DuckDB answers)."""


class Fallback(Exception):
    """This evaluation met something only DuckDB answers exactly (NaN, an overflow error, …)."""


def value_kind(v: Any) -> str:
    """The DuckDB type family of a parameter value as ``sql_literal`` writes it into the residual SQL."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "B"
    if isinstance(v, int):
        if I64[0] <= v <= I64[1]:
            return "I"
        raise Unsupported
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Unsupported
        text = repr(v)
        return "D" if "e" in text else "N"  # '1.5' is a DECIMAL literal to DuckDB, '1e+20' a DOUBLE
    if isinstance(v, Decimal):
        if not v.is_finite():
            raise Unsupported
        return "N"
    if isinstance(v, str):
        if "\x00" in v:
            raise Unsupported
        return "S"
    raise Unsupported


def signature(values: Sequence[Any]) -> tuple[str, ...]:
    """The parameter kinds a compiled program depends on (raises Unsupported for values it cannot take)."""
    return tuple(value_kind(v) for v in values)


def literal_kind(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "B"
    if isinstance(v, int):
        return "I"
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Unsupported
        return "D"
    if isinstance(v, Decimal):
        return "N"
    if isinstance(v, str):
        return "S"
    raise Unsupported


def as_double(v: Any) -> float:
    """A DECIMAL (or integer) value as DuckDB casts it to DOUBLE; decimals only where that cast is exact-rounded."""
    if isinstance(v, Decimal):
        t = v.as_tuple()
        if len(t.digits) > 15 or not -22 <= int(t.exponent) <= 22:  # type: ignore[arg-type]
            raise Fallback
        return float(v)
    return float(v)


def first_row(f: Fn) -> Callable[[list[tuple[Any, ...]], tuple[Any, ...]], Any]:
    return lambda rows, p: f(rows[0], p)


def ordered(groups: list[list[tuple[Any, ...]]], order: list[tuple[Fn, bool, bool]],
             p: tuple[Any, ...]) -> list[list[tuple[Any, ...]]]:
    """Groups in ORDER BY order (by their first row), NULLs last unless NULLS FIRST, as DuckDB sorts them.

    One stable sort per key, the last key first; the keys cover every grouping column, so no two groups tie.
    """
    for f, desc, nulls_first in reversed(order):
        values = [f(g[0], p) for g in groups]
        present = [i for i, v in enumerate(values) if v is not None]
        if any(type(values[i]) is float and values[i] == 0.0 for i in present):
            raise Fallback  # 0.0 and -0.0 are one group: which one DuckDB shows is settled, its order not tested
        present.sort(key=values.__getitem__, reverse=desc)
        missing = [i for i, v in enumerate(values) if v is None]
        groups = [groups[i] for i in (missing + present if nulls_first else present + missing)]
    return groups


def count_of(node: Any, sig: tuple[str, ...]) -> Callable[[tuple[Any, ...]], int] | None:
    """A LIMIT / OFFSET value: a literal count, or a parameter that must be a non-negative integer."""
    if node is None:
        return None
    if isinstance(node, Lit):
        value = node.value
        return lambda _p: value
    if not isinstance(node, Slot) or sig[node.index] != "I":
        raise Unsupported  # NULL, a fraction, text: DuckDB's casts and errors
    i = node.index

    def count(p: tuple[Any, ...]) -> int:
        v = p[i]
        if v < 0:
            raise Fallback  # DuckDB's error
        return v
    return count


def decimal_of(v: Any) -> Decimal:
    return v if isinstance(v, Decimal) else Decimal(repr(v))


def i64(v: int) -> int:
    if not I64[0] <= v <= I64[1]:
        raise Fallback  # DuckDB: "Overflow in … of INT64"
    return v


def logic_and3(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def logic_and(items: list[Fn]) -> Fn:
    """AND of every item, each evaluated: DuckDB evaluates every side of an AND that is not a WHERE's top level
    (an overflow in any is its error), and a WHERE's in an order of its own choosing (adaptive filters), so an
    item that cannot be evaluated here (``Fallback``) is DuckDB's to answer, whatever the others say."""
    def f(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        values = [item(r, p) for item in items]
        if False in values:
            return False
        return None if None in values else True
    return f


def logic_or(items: list[Fn]) -> Fn:
    """OR of every item, each evaluated (as ``logic_and``)."""
    def f(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        values = [item(r, p) for item in items]
        if True in values:
            return True
        return None if None in values else False
    return f
