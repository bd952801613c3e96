"""Constant key expressions folded before pushdown (issue 16 item 3): ``id = 10 + 1``, ``key = lower('C0001')``.

ksqlDB resolves the right-hand side of a key comparison when it is a
constant expression; here such an expression becomes the literal it denotes,
so the comparison is a key lookup (or a range bound) instead of a scan. Only
operations whose result this module computes exactly as DuckDB does are
folded; anything else returns None and stays a residual predicate, which is
always correct (pushdown only ever pre-filters: DuckDB still evaluates the
original expression over the rows).

Folded: integer and DECIMAL ``+ - *`` (and unary minus) within BIGINT's
range, integer ``//`` and ``%`` (DuckDB's truncating semantics), ``||`` /
``concat`` of strings, ``lower``/``upper`` of ASCII text, ``trim``/``ltrim``/
``rtrim`` of spaces, and ``CAST`` between integers and text, and to
DATE/TIMESTAMP from text (read as a literal of that type would be).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

__all__ = ["fold_constant"]

_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$")
_INT_TYPES = {exp.DType.INT: 32, exp.DType.BIGINT: 64, exp.DType.SMALLINT: 16, exp.DType.TINYINT: 8}
_TEXT_TYPES = {exp.DType.VARCHAR, exp.DType.TEXT, exp.DType.CHAR, exp.DType.NVARCHAR}
_TIME_TYPES = {exp.DType.DATE: "DATE", exp.DType.TIMESTAMP: "TIMESTAMP", exp.DType.TIMESTAMPTZ: "TIMESTAMPTZ"}
_MAX_DEPTH = 32


class _NoFold(Exception):
    """The expression is not one this module folds exactly."""


def fold_constant(node: exp.Expression) -> tuple[Any, str] | None:
    """(value, sql type) of a constant expression, or None when it is not one this module folds exactly.

    Types are the planner's literal types: INTEGER, DECIMAL, VARCHAR, and
    DATE/TIMESTAMP (with the value as text, parsed later as a literal is).
    """
    try:
        return _fold(node, 0)
    except (_NoFold, InvalidOperation, ValueError, ArithmeticError):
        return None


def _int(v: int, bits: int = 64) -> tuple[int, str]:
    if not -(2 ** (bits - 1)) <= v <= 2 ** (bits - 1) - 1:
        raise _NoFold  # DuckDB would fail (overflow) or widen: let it decide
    return v, "INTEGER"


def _bits(v: int) -> int:
    """DuckDB types an integer literal INTEGER when it fits 32 bits, else BIGINT; arithmetic stays in that width."""
    return 32 if -(2**31) <= v <= 2**31 - 1 else 64


def _fold(node: exp.Expression, depth: int) -> tuple[Any, str]:
    if depth > _MAX_DEPTH:
        raise _NoFold
    d = depth + 1
    if isinstance(node, exp.Paren):
        return _fold(node.this, d)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this, "VARCHAR"
        text = node.this
        if _INT_TEXT.match(text):
            return _int(int(text))
        if "e" in text.lower():
            raise _NoFold
        return Decimal(text), "DECIMAL"
    if isinstance(node, exp.Neg):
        v, t = _fold(node.this, d)
        if t == "INTEGER":
            return _int(-v)
        if t == "DECIMAL":
            return -v, t
        raise _NoFold
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod)):
        (a, ta), (b, tb) = _fold(node.this, d), _fold(node.expression, d)
        if ta not in ("INTEGER", "DECIMAL") or tb not in ("INTEGER", "DECIMAL"):
            raise _NoFold
        if isinstance(node, (exp.IntDiv, exp.Mod)):
            if ta != "INTEGER" or tb != "INTEGER" or b == 0:
                raise _NoFold
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # truncating, as DuckDB (and C)
            return _int(q if isinstance(node, exp.IntDiv) else a - q * b, max(_bits(a), _bits(b)))
        op = {exp.Add: lambda x, y: x + y, exp.Sub: lambda x, y: x - y, exp.Mul: lambda x, y: x * y}[type(node)]
        if ta == tb == "INTEGER":
            return _int(op(a, b), max(_bits(a), _bits(b)))
        out = op(Decimal(a), Decimal(b))
        if len(out.as_tuple().digits) > 18:
            raise _NoFold  # past DECIMAL(18): DuckDB widens or fails
        return out, "DECIMAL"
    if isinstance(node, (exp.DPipe, exp.Concat)):  # every part is a non-NULL string here
        parts = [node.this, node.expression] if isinstance(node, exp.DPipe) else list(node.expressions)
        out = []
        for p in parts:
            v, t = _fold(p, d)
            if t != "VARCHAR":
                raise _NoFold
            out.append(v)
        return "".join(out), "VARCHAR"
    if isinstance(node, (exp.Lower, exp.Upper)):
        v, t = _fold(node.this, d)
        if t != "VARCHAR" or not v.isascii():
            raise _NoFold  # Unicode case mapping is DuckDB's to decide
        return (v.lower() if isinstance(node, exp.Lower) else v.upper()), "VARCHAR"
    if isinstance(node, exp.Trim):
        if node.args.get("expression") is not None or node.args.get("collation") is not None:
            raise _NoFold
        v, t = _fold(node.this, d)
        if t != "VARCHAR":
            raise _NoFold
        where = (node.args.get("position") or "BOTH").upper()
        return (v.strip(" ") if where == "BOTH" else v.lstrip(" ") if where == "LEADING" else v.rstrip(" ")), "VARCHAR"
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        return _cast(node, d)
    raise _NoFold


def _cast(node: exp.Cast, depth: int) -> tuple[Any, str]:
    to = node.to.this if isinstance(node.to, exp.DataType) else None
    if node.to.expressions:  # VARCHAR(10), DECIMAL(10, 2): widths and scales change values
        raise _NoFold
    v, t = _fold(node.this, depth)
    if to in _INT_TYPES:
        if t == "INTEGER":
            return _int(v, _INT_TYPES[to])
        if t == "VARCHAR" and _INT_TEXT.match(v):
            return _int(int(v.strip()), _INT_TYPES[to])
        raise _NoFold  # DECIMAL → INT rounds; text like '1.5' too: DuckDB decides
    if to in _TEXT_TYPES:
        if t in ("INTEGER", "VARCHAR"):
            return str(v), "VARCHAR"
        raise _NoFold
    if to in _TIME_TYPES and t == "VARCHAR":
        return v, _TIME_TYPES[to]
    raise _NoFold
