"""Which conjuncts of a WHERE (or inner-join ON) constrain which store column, and how.

Only null-rejecting comparisons of a store column with a constant are
recognised (``=``, ``IN``, an ``OR`` of equalities, ``<``/``<=``/``>``/``>=``,
``BETWEEN``); they are safe to push below joins, aggregates and window
functions because a row failing them can never reach the output. Every
conjunct also stays in the residual SQL, so pushing is only ever a
pre-filter: the answer is DuckDB's either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlglot import exp

from .literals import ValueRef, value_ref
from .rewrites import flatten

__all__ = ["Constraint", "conjuncts", "classify"]

_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "=": "="}
_OPS: dict[type, str] = {exp.EQ: "=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}


@dataclass(frozen=True, slots=True)
class Constraint:
    """``source.column`` is one of ``values`` (kind "eq") or satisfies every (op, value) in ``bounds`` (kind "range")."""

    source: str
    column: str
    kind: str
    values: tuple[ValueRef, ...] = ()
    bounds: tuple[tuple[str, ValueRef], ...] = ()


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """Top-level AND terms, looking through parentheses (iterative: BI tools chain thousands)."""
    return [] if node is None else flatten(node, exp.And)


def _disjuncts(node: exp.Expression) -> list[exp.Expression]:
    return flatten(node, exp.Or)


Resolver = Callable[[exp.Column], tuple[str, str] | None]


def classify(node: exp.Expression, resolve: Resolver, params: dict[int, int]) -> Constraint | None:
    """The constraint one conjunct puts on a single store column, or None (it stays residual only)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Or):
        parts = [classify(d, resolve, params) for d in _disjuncts(node)]
        if not parts or any(p is None or p.kind != "eq" for p in parts):
            return None
        first = parts[0]
        if any((p.source, p.column) != (first.source, first.column) for p in parts):
            return None
        return Constraint(first.source, first.column, "eq", tuple(v for p in parts for v in p.values))
    if type(node) in _OPS:
        op = _OPS[type(node)]
        left, right = node.this, node.expression
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, _FLIP[op]
        if not isinstance(left, exp.Column):
            return None
        target = resolve(left)
        ref = value_ref(right, params)
        if target is None or ref is None:
            return None
        if ref.start is None and left.this._meta:  # NULL carries no position: point at the column
            ref = replace(ref, start=left.this.meta.get("start"))
        if op == "=":
            return Constraint(target[0], target[1], "eq", (ref,))
        return Constraint(target[0], target[1], "range", bounds=((op, ref),))
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field") or not isinstance(node.this, exp.Column):
            return None
        target = resolve(node.this)
        refs = [value_ref(e, params) for e in node.expressions]
        if target is None or not refs or any(r is None for r in refs):
            return None
        at = node.this.this.meta.get("start") if node.this.this._meta else None
        if at is not None:  # as above: a NULL carries no position, so an error about it points at the column
            refs = [replace(r, start=at) if r is not None and r.start is None else r for r in refs]
        return Constraint(target[0], target[1], "eq", tuple(refs))  # type: ignore[arg-type]
    if isinstance(node, exp.Between):
        if node.args.get("symmetric") or not isinstance(node.this, exp.Column):
            return None
        target = resolve(node.this)
        low, high = value_ref(node.args["low"], params), value_ref(node.args["high"], params)
        if target is None or low is None or high is None:
            return None
        return Constraint(target[0], target[1], "range", bounds=((">=", low), ("<=", high)))
    return None
