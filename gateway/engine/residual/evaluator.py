"""Evaluating a simple residual (planner/residual_program.py) over a few looked-up rows, exactly as DuckDB would.

A point lookup answers in ~100 us; handing its row to DuckDB for a
``count(*)`` or a ``WHERE amount > 0`` cost ~190 us more of DuckDB's fixed
overhead (issue 14 item 3). Here the residual is compiled to Python closures
following DuckDB's rules: which side of a mixed comparison is cast
(an integer compared with a DOUBLE becomes a DOUBLE), three-valued logic,
``/`` of integers giving DOUBLE, BIGINT overflow, ``sum`` of integers as
HUGEINT, ``avg`` as the sum converted to DOUBLE over the count, ``min``/``max``
keeping the last of equal values (0.0 and -0.0).

Two escape hatches keep the answer DuckDB's: ``Unsupported`` at compile time
(a mix of types whose DuckDB cast is not replicated here, e.g. a DECIMAL
literal against an integer column) and ``Fallback`` at run time (NaN or an
infinite DOUBLE in the rows, an overflow DuckDB reports as an error, a value of
an unexpected Python type). Either way the statement runs in DuckDB as before,
so this module only ever answers what it can answer exactly. The property
test ``tests/gateway/test_residual_eval.py`` compares it with DuckDB over
generated statements and data.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

from planner.residual_program import (
    Agg,
    Arith,
    Between,
    Case,
    Cmp,
    Col,
    Func,
    In,
    IsNull,
    Join,
    Lit,
    Logic,
    Neg,
    Not,
    Program,
    Slot,
)
from stores.catalog.schema import SqlType

from .calls import compile_call
from .values import (
    Fallback,
    Fn,
    Node,
    Unsupported,
    as_double,
    common,
    count_of,
    decimal_of,
    first_row,
    i64,
    literal_kind,
    logic_and,
    logic_and3,
    logic_or,
    ordered,
    signature,
)

__all__ = ["Compiled", "Fallback", "Unsupported", "compile_for", "signature", "MAX_ROWS"]

MAX_ROWS = 256  # beyond this many rows DuckDB's vectorized engine wins; the scan is not small
_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_COL_KIND = {SqlType.BIGINT: "I", SqlType.INTEGER: "I32", SqlType.DOUBLE: "D", SqlType.VARCHAR: "S",
             SqlType.BOOLEAN: "B"}
_PY_TYPE = {"I": int, "I32": int, "D": float, "S": str, "B": bool}
_INTS = ("I", "I32")



class Compiled:
    """A program compiled for one parameter signature: ``run(rows, params)`` → the result rows."""

    __slots__ = ("_where", "_outputs", "_aggregate", "_checks", "_extras", "_limit", "_offset", "_group", "_order",
                 "_join")

    def __init__(self, program: Program, sig: tuple[str, ...]) -> None:
        self._checks: dict[int, str] = {}
        self._join = program.join
        self._extras: list[Callable[[tuple[Any, ...]], Any]] = []
        self._where: Fn | None = None
        if program.where is not None:
            node = self._predicate(program.where, sig)
            self._where = node.fn
        self._aggregate = program.aggregate
        self._limit, self._offset = count_of(program.limit, sig), count_of(program.offset, sig)
        self._group = [self._expr(c, sig).fn for c in program.group] if program.group else None
        self._order = [(self._sort_key(c, sig), desc, nulls_first) for c, desc, nulls_first in program.order]
        if program.group:  # a grouping column's value is the group's: its first row's (0.0 and -0.0 group together)
            self._outputs = [self._agg(o, sig) if isinstance(o, Agg) else first_row(self._expr(o, sig).fn)
                             for o in program.outputs]
        elif program.aggregate:
            self._outputs = [self._agg(o, sig) for o in program.outputs]
        else:
            self._outputs = [self._expr(o, sig).fn for o in program.outputs]

    def _sort_key(self, node: Any, sig: tuple[str, ...]) -> Fn:
        n = self._expr(node, sig)
        if n.kind not in ("I", "I32", "D", "S", "B"):
            raise Unsupported
        return n.fn

    def run(self, rows: Sequence[tuple[Any, ...]], params: tuple[Any, ...],
            right: Sequence[tuple[Any, ...]] = ()) -> list[tuple[Any, ...]]:
        """The answer over a scan's rows (a join's left scan's, ``right`` its right scan's)."""
        if self._join is not None:
            rows = joined(self._join, rows, right)
        checks = self._checks
        for row in rows:  # every value a column gave must be what its type promises (and no NaN/inf)
            for i, kind in checks.items():
                v = row[i]
                if v is not None and (type(v) is not _PY_TYPE[kind] or (kind == "D" and not math.isfinite(v))):
                    raise Fallback
        p = params + tuple(extra(params) for extra in self._extras) if self._extras else params
        where = self._where
        kept = [r for r in rows if where(r, p) is True] if where is not None else list(rows)
        offset = self._offset(params) if self._offset is not None else 0
        limit = self._limit(params) if self._limit is not None else None
        if self._group is not None:
            groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
            keys = self._group
            for r in kept:
                groups.setdefault(tuple(f(r, p) for f in keys), []).append(r)
            in_order = ordered(list(groups.values()), self._order, p)
            out = [tuple(f(rows, p) for f in self._outputs) for rows in in_order]
        elif self._aggregate:
            out = [tuple(agg(kept, p) for agg in self._outputs)]
        else:
            # every kept row's values, then the cut: DuckDB computes them for the rows an OFFSET skips (and past
            # a LIMIT it does not push below the projection: one of 3e9), so an error there is its answer
            outs = self._outputs
            out = [tuple(f(r, p) for f in outs) for r in kept]
        return out[offset:None if limit is None else offset + limit]

    # -- expressions ---------------------------------------------------------------
    def _expr(self, node: Any, sig: tuple[str, ...]) -> Node:
        if isinstance(node, Col):
            kind = _COL_KIND[node.sql_type]
            self._checks[node.index] = kind
            i = node.index
            return Node(lambda r, _p: r[i], kind, True)
        if isinstance(node, Lit):
            kind = literal_kind(node.value)
            value = node.value
            return Node(lambda _r, _p: value, kind, False)
        if isinstance(node, Slot):
            i = node.index
            kind = sig[i]
            if kind == "N":
                return Node(lambda _r, p: decimal_of(p[i]), kind, False)
            return Node(lambda _r, p: p[i], kind, False)
        if isinstance(node, Neg):
            return self._neg(self._expr(node.item, sig))
        if isinstance(node, Arith):
            return self._arith(node.op, self._expr(node.left, sig), self._expr(node.right, sig))
        if isinstance(node, (Func, Case)):
            return compile_call(self, node, sig)
        raise Unsupported

    def _neg(self, a: Node) -> Node:
        if not a.has_col or a.kind not in ("I", "D"):
            raise Unsupported  # a constant's type is DuckDB's literal typing; INTEGER arithmetic overflows at 2^31
        f = a.fn
        if a.kind == "D":
            return Node(lambda r, p: None if (v := f(r, p)) is None else -v, "D", True)
        return Node(lambda r, p: None if (v := f(r, p)) is None else i64(-v), "I", True)

    def _arith(self, op: str, a: Node, b: Node) -> Node:
        if not (a.has_col or b.has_col) or a.kind not in ("I", "D", "N") or b.kind not in ("I", "D", "N"):
            raise Unsupported
        fa, fb = a.fn, b.fn
        kinds = {a.kind, b.kind}
        if "N" in kinds and (kinds != {"N", "D"}):
            raise Unsupported  # DECIMAL arithmetic (or DECIMAL with an integer): DuckDB's decimal rules
        pyop = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[op]
        if kinds == {"I"} and op != "/":
            def int_op(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
                x, y = fa(r, p), fb(r, p)
                return None if x is None or y is None else i64(pyop(x, y))
            return Node(int_op, "I", True)

        def double_op(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:  # DOUBLE: both sides cast, IEEE arithmetic
            x, y = fa(r, p), fb(r, p)
            if x is None or y is None:
                return None
            x, y = as_double(x), as_double(y)
            if op == "/" and y == 0.0:
                raise Fallback
            v = pyop(x, y)
            if not math.isfinite(v):
                raise Fallback
            return v
        return Node(double_op, "D", True)

    def _predicate(self, node: Any, sig: tuple[str, ...]) -> Node:
        if isinstance(node, Logic):
            items = [self._predicate(i, sig).fn for i in node.items]
            return Node(logic_and(items) if node.op == "and" else logic_or(items), "B", True)
        if isinstance(node, Not):
            f = self._predicate(node.item, sig).fn
            return Node(lambda r, p: None if (v := f(r, p)) is None else not v, "B", True)
        if isinstance(node, IsNull):
            f = self._expr(node.item, sig).fn
            return Node(lambda r, p: f(r, p) is None, "B", True)
        if isinstance(node, Cmp):
            kind, (a, b) = common([self._expr(node.left, sig), self._expr(node.right, sig)])
            if kind == "NULL":
                return Node(lambda _r, _p: None, "B", True)
            fa, fb, cmp = a.fn, b.fn, _CMP[node.op]

            def compare(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
                x, y = fa(r, p), fb(r, p)  # both: DuckDB's error in either side is the statement's
                return None if x is None or y is None else cmp(x, y)
            return Node(compare, "B", True)
        if isinstance(node, Between):
            kind, (x, lo, hi) = common([self._expr(n, sig) for n in (node.item, node.low, node.high)])
            fx, flo, fhi = x.fn, lo.fn, hi.fn
            if kind == "NULL":
                return Node(lambda _r, _p: None, "B", True)

            def between(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
                v, a, b = fx(r, p), flo(r, p), fhi(r, p)
                ge = None if v is None or a is None else v >= a
                le = None if v is None or b is None else v <= b
                return logic_and3(ge, le)
            return Node(between, "B", True)
        if isinstance(node, In):
            return self._in(node, sig)
        if isinstance(node, Col):
            n = self._expr(node, sig)
            if n.kind != "B":
                raise Unsupported
            return n
        if isinstance(node, Lit) and isinstance(node.value, bool):
            value = node.value
            return Node(lambda _r, _p: value, "B", False)
        if isinstance(node, Func):  # starts_with, contains
            n = self._expr(node, sig)
            if n.kind != "B":
                raise Unsupported
            return n
        raise Unsupported

    def _in(self, node: In, sig: tuple[str, ...]) -> Node:
        item = self._expr(node.item, sig)
        options = [self._expr(o, sig) for o in node.options]
        kind, nodes = common([item, *options])
        if kind == "NULL":
            return Node(lambda _r, _p: None, "B", True)
        fx = nodes[0].fn
        if all(not o.has_col for o in options):  # constants: one set per statement, not one scan per row
            fns = [o.fn for o in nodes[1:]]
            slot = len(self._extras)

            def options_of(p: tuple[Any, ...]) -> tuple[frozenset[Any], bool]:
                values = [f((), p) for f in fns]
                return frozenset(v for v in values if v is not None), any(v is None for v in values)
            self._extras.append(options_of)
            at = len(sig) + slot  # the extras follow the parameters

            def contains(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
                v = fx(r, p)
                if v is None:
                    return None
                values, has_null = p[at]
                return True if v in values else (None if has_null else False)
            return Node(contains, "B", True)
        fns = [o.fn for o in nodes[1:]]

        def contains_any(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
            v = fx(r, p)
            options = [f(r, p) for f in fns]  # every one: DuckDB's error in any is the statement's
            if v is None:
                return None
            if v in [o for o in options if o is not None]:
                return True
            return None if None in options else False
        return Node(contains_any, "B", True)

    # -- aggregates ------------------------------------------------------------------
    def _agg(self, node: Any, sig: tuple[str, ...]) -> Callable[[list[tuple[Any, ...]], tuple[Any, ...]], Any]:
        if not isinstance(node, Agg):
            raise Unsupported
        if node.func == "count_star":
            return lambda rows, _p: len(rows)
        arg = self._expr(node.arg, sig)
        f, kind = arg.fn, arg.kind

        def values(rows: list[tuple[Any, ...]], p: tuple[Any, ...]) -> list[Any]:
            return [v for r in rows if (v := f(r, p)) is not None]
        func = node.func
        if func == "count":
            return lambda rows, p: len(values(rows, p))
        if func in ("min", "max"):
            if kind not in ("I", "I32", "D", "S"):
                raise Unsupported
            worse = operator.gt if func == "min" else operator.lt

            def extreme(rows: list[tuple[Any, ...]], p: tuple[Any, ...]) -> Any:
                best = None
                for v in values(rows, p):
                    if best is None or not worse(v, best):  # ties keep the last, as DuckDB's do (-0.0 vs 0.0)
                        best = v
                return best
            return extreme
        if kind in _INTS:
            def int_total(rows: list[tuple[Any, ...]], p: tuple[Any, ...]) -> Any:
                vs = values(rows, p)
                if not vs:
                    return None
                s = sum(vs)
                if func == "sum":
                    return s  # HUGEINT: a few BIGINTs cannot overflow it
                if abs(s) >= 2**63:
                    raise Fallback  # DuckDB's HUGEINT → DOUBLE cast beyond 64 bits is not replicated
                return float(s) / float(len(vs))
            if func in ("sum", "avg"):
                return int_total
        if kind == "D" and func in ("sum", "avg"):
            def float_total(rows: list[tuple[Any, ...]], p: tuple[Any, ...]) -> Any:
                vs = values(rows, p)
                if not vs:
                    return None
                s = 0.0
                for v in vs:  # in row order, one addition at a time (not math.fsum, not 3.12's compensated sum)
                    s += v
                if not math.isfinite(s):
                    raise Fallback
                return s if func == "sum" else s / float(len(vs))
            return float_total
        raise Unsupported


def joined(join: Join, left: Sequence[tuple[Any, ...]], right: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of a join of two point lookups on their keys, as DuckDB joins them: each left row followed by the
    right row of its key (a left join: by NULLs when there is none).

    At most one row a side: the order of several joined rows is DuckDB's hash join's. Keys of one type
    (BIGINT, INTEGER or VARCHAR: planner/residual_program.py) compare as Python values do.
    """
    if len(left) > 1 or len(right) > 1 or any(len(r) != join.left_width for r in left) or any(
            len(r) != join.right_width for r in right):
        raise Fallback
    lk, rk = join.left_key, join.right_key
    out = []
    for row in left:
        key = row[lk]
        match = [r for r in right if key is not None and type(r[rk]) is type(key) and r[rk] == key]
        if right and key is not None and type(right[0][rk]) is not type(key):
            raise Fallback  # not the type the plan says: DuckDB decides
        if match:
            out.append(row + match[0])
        elif join.kind == "left":
            out.append(row + (None,) * join.right_width)
    return out


def compile_for(program: Program, sig: tuple[str, ...]) -> Compiled:
    """Raises Unsupported when the program with these parameter kinds is not evaluated here."""
    return Compiled(program, sig)

