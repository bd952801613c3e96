"""Residual SQL simple enough to evaluate without DuckDB: the statement as a small expression tree.

DuckDB's fixed cost per statement (~190 us in issue 14; 0.5-1 ms with
DuckDB 2.0.1 over a 1-row Arrow relation, issue 50) is most of what a point
lookup plus a residual costs. For one store read by key and a residual made
only of a filter, a projection of columns, arithmetic and a few scalar
functions (``gateway/engine/residual/calls.py``: upper/lower, regexp_replace of a literal
pattern, concat, coalesce, CASE …), ``count/sum/avg/min/max`` over the rows
(or over groups of grouping columns ordered by all of them), LIMIT and
OFFSET, the gateway can compute the answer from the few rows the lookup
returned (``gateway/engine/residual/``). So it can for an inner or left join
of two stores on their keys (``Join``: a point lookup of each). This module
only recognizes that subset and writes it down (pure: sqlglot AST in, frozen
nodes out); anything else gets no program and runs in DuckDB as before.
What DuckDB would do with mixed types is decided by the evaluator when the
parameter values are known; it declines whatever it cannot match exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from stores.catalog.schema import SqlType, StoreSpec

__all__ = ["Program", "Col", "Lit", "Slot", "Cmp", "Logic", "Not", "IsNull", "In", "Between", "Arith", "Neg", "Agg",
           "Func", "Case", "Join", "compile_program", "compile_join_program", "PROGRAM_TYPES"]

# Column types the evaluator computes with exactly as DuckDB does (no time zones, decimals, blobs or nesting).
PROGRAM_TYPES = frozenset({SqlType.BIGINT, SqlType.INTEGER, SqlType.DOUBLE, SqlType.VARCHAR, SqlType.BOOLEAN})
_INT_RE = re.compile(r"[0-9]+")
_DEC_RE = re.compile(r"[0-9]+\.[0-9]*|\.[0-9]+")
_DOUBLE_RE = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+")
_SELECT_ARGS = frozenset({"expressions", "from_", "where", "group", "order", "limit", "offset"})
# the key types a join program matches rows on with Python's ==, exactly as DuckDB's join compares them
_JOIN_KEY_TYPES = frozenset({SqlType.BIGINT, SqlType.INTEGER, SqlType.VARCHAR})
_CMP = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
_AGGS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


@dataclass(frozen=True, slots=True)
class Col:
    index: int  # in the scan's row (spec.columns() order)
    sql_type: SqlType


@dataclass(frozen=True, slots=True)
class Lit:
    """A literal as DuckDB types it: int (INTEGER/BIGINT), Decimal (DECIMAL), float (DOUBLE), str, bool, None."""

    value: Any


@dataclass(frozen=True, slots=True)
class Slot:
    """A placeholder: ``index`` into the plan's ``residual_values``."""

    index: int


@dataclass(frozen=True, slots=True)
class Cmp:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # "and" / "or"
    items: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Not:
    item: Any


@dataclass(frozen=True, slots=True)
class IsNull:
    item: Any  # IS NOT NULL is Not(IsNull)


@dataclass(frozen=True, slots=True)
class In:
    item: Any  # NOT IN is Not(In)
    options: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Between:
    item: Any
    low: Any
    high: Any


@dataclass(frozen=True, slots=True)
class Arith:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class Neg:
    item: Any


@dataclass(frozen=True, slots=True)
class Agg:
    func: str  # count_star, count, sum, avg, min, max
    arg: Any = None


@dataclass(frozen=True, slots=True)
class Func:
    """A scalar function call of ``gateway/engine/residual/calls.CALLS`` (``||`` is ``Func("||", …)``)."""

    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Case:
    """``CASE WHEN cond THEN value … ELSE default END`` (a simple ``CASE x WHEN v`` is written ``x = v``)."""

    whens: tuple[tuple[Any, Any], ...]
    default: Any  # Lit(None) without ELSE


@dataclass(frozen=True, slots=True)
class Join:
    """``FROM left [INNER | LEFT] JOIN right`` on the two stores' keys: a program's rows are a left scan row followed
    by its right scan row (NULLs for a left row without one). Each scan row is its store's columns then
    ``_partition`` and ``_position``; the right one's columns are indexed after the left row's ``left_width``."""

    kind: str  # "inner" / "left"
    left_key: int
    right_key: int
    left_width: int
    right_width: int


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Program:
    """``SELECT outputs FROM <the one scan> WHERE where``; ``aggregate``: every output is an aggregate (one row).

    Compared by identity: the gateway keeps what it learned about a program (its result columns) per object,
    and a program lives as long as its cached template.
    """

    outputs: tuple[Any, ...]
    where: Any
    aggregate: bool
    width: int  # store columns in a scan row
    limit: Lit | Slot | None = None  # LIMIT / OFFSET (rows in scan order, as DuckDB keeps insertion order)
    offset: Lit | Slot | None = None
    group: tuple[Col, ...] = ()  # GROUP BY columns (then ``order`` orders the groups completely)
    order: tuple[tuple[Any, bool, bool], ...] = ()  # ORDER BY (expression, descending, nulls first)
    join: Join | None = None  # two stores joined on their keys (then the rows are joined rows, see Join)

    @property
    def sources(self) -> int:
        """How many scans' rows the program reads: 1, or 2 for a join."""
        return 1 if self.join is None else 2


class _NotInSubset(Exception):
    pass


def compile_program(select: exp.Expression, table: exp.Table, spec: StoreSpec, alias: str,
                    param_index: dict[int, int]) -> Program | None:
    """The program of ``select`` over the one store ``table``, or None when DuckDB must run it."""
    try:
        return _Compiler([(alias, spec, 0)], param_index).program(select, table)
    except _NotInSubset:
        return None


def compile_join_program(select: exp.Expression, tables: list[tuple[exp.Table, StoreSpec, str]],
                         param_index: dict[int, int]) -> Program | None:
    """The program of ``select`` over two stores joined on their keys (``Join``), or None when DuckDB must run it.

    Only ``FROM a [INNER | LEFT [OUTER]] JOIN b`` with ``USING (key)`` (both keys so named) or ``ON a.k = b.k``
    of the two single key columns of one type (``_JOIN_KEY_TYPES``), no GROUP BY: what a join of two point
    lookups is. The evaluator answers only while each side has at most one row (its order would be DuckDB's).
    """
    try:
        return _join_program(select, tables, param_index)
    except _NotInSubset:
        return None


def _join_program(select: exp.Expression, tables: list[tuple[exp.Table, StoreSpec, str]],
                  param_index: dict[int, int]) -> Program:
    (left, lspec, lalias), (right, rspec, ralias) = tables
    joins = (select.args.get("joins") or []) if isinstance(select, exp.Select) else []
    if len(joins) != 1 or joins[0].this is not right or select.args.get("group"):
        raise _NotInSubset
    join = joins[0]
    if any(v for k, v in join.args.items() if k not in ("this", "on", "using", "side", "kind")):
        raise _NotInSubset  # NATURAL, ASOF, a hint, …
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if side == "" and kind in ("", "INNER"):
        how = "inner"
    elif side == "LEFT" and kind in ("", "OUTER"):
        how = "left"
    else:
        raise _NotInSubset
    for table in (left, right):
        alias = table.args.get("alias")
        if any(table.args.get(a) for a in ("pivots", "sample", "laterals", "joins")) or (alias is not None
                                                                                          and alias.columns):
            raise _NotInSubset
    ktype = lspec.key.type
    if lspec.composite or rspec.composite or ktype is not rspec.key.type or ktype not in _JOIN_KEY_TYPES:
        raise _NotInSubset
    lkey, rkey = _key_index(lspec), _key_index(rspec)
    lwidth, rwidth = len(lspec.columns()) + 2, len(rspec.columns()) + 2  # + _partition, _position
    sources = [(lalias, lspec, 0), (ralias, rspec, lwidth)]
    keys = {Col(lkey, ktype), Col(lwidth + rkey, ktype)}  # type: ignore[arg-type]
    using, on = join.args.get("using"), join.args.get("on")
    if using:
        name = using[0].name.lower() if len(using) == 1 and isinstance(using[0], exp.Identifier) else None
        if on is not None or name is None or name != lspec.key.name.lower() or name != rspec.key.name.lower():
            raise _NotInSubset
        compiler = _Compiler(sources, param_index, using={name: Col(lkey, ktype)})  # type: ignore[arg-type]
    else:
        compiler = _Compiler(sources, param_index)
        while isinstance(on, exp.Paren):
            on = on.this
        if not isinstance(on, exp.EQ) or {compiler.value(on.this), compiler.value(on.expression)} != keys:
            raise _NotInSubset
    return compiler.program(select, left, Join(how, lkey, rkey, lwidth, rwidth))


def _key_index(spec: StoreSpec) -> int:
    return [c.name.lower() for c in spec.columns()].index(spec.key.name.lower())


class _Compiler:
    def __init__(self, sources: list[tuple[str, StoreSpec, int]], param_index: dict[int, int],
                 using: dict[str, Col] | None = None) -> None:
        """``sources``: (alias, store, where its columns start in a program row); ``using``: the columns a USING
        join merges, as an unqualified name reads them (the left store's)."""
        self.by_alias: dict[str, dict[str, Col | None]] = {}
        self.unqualified: dict[str, Col | None] = {}
        for alias, spec, offset in sources:
            columns: dict[str, Col | None] = {}
            for i, c in enumerate(spec.columns()):
                name = c.name.lower()
                typ = c.type if isinstance(c.type, SqlType) and c.type in PROGRAM_TYPES else None
                # a name twice (case differs) is ambiguous to DuckDB: out of the subset
                columns[name] = None if name in columns or typ is None else Col(offset + i, typ)
            if alias.lower() in self.by_alias:
                raise _NotInSubset
            self.by_alias[alias.lower()] = columns
            for name, col in columns.items():  # a name in two stores is ambiguous unqualified
                self.unqualified[name] = None if name in self.unqualified else col
        self.unqualified.update(using or {})
        self.columns = self.by_alias[sources[0][0].lower()]
        self.joined = len(sources) > 1
        self.width = len(sources[0][1].columns())
        self.param_index = param_index

    def program(self, select: exp.Expression, table: exp.Table, join: Join | None = None) -> Program:
        allowed = _SELECT_ARGS | {"joins"} if join is not None else _SELECT_ARGS
        if not isinstance(select, exp.Select) or any(v for k, v in select.args.items() if k not in allowed):
            raise _NotInSubset
        frm = select.args.get("from_")
        if frm is None or frm.this is not table:
            raise _NotInSubset
        outputs: list[Any] = []
        for e in select.expressions:
            named = isinstance(e, exp.Alias)
            if named:
                e = e.this
            if isinstance(e, exp.Star):
                if any(e.args.values()):
                    raise _NotInSubset
                outputs += self._all_columns()
            else:
                outputs.append(self.output(e, named))
        if not outputs:
            raise _NotInSubset
        group = self.group_by(select.args.get("group"))
        aggregate = bool(group) or any(isinstance(o, Agg) for o in outputs)
        if aggregate and not all(isinstance(o, Agg) or o in group for o in outputs):
            raise _NotInSubset  # a column beside an aggregate that is not grouped by: DuckDB's error
        order = self.order_by(select.args.get("order"), group)
        where = select.args.get("where")
        return Program(tuple(outputs), self.predicate(where.this) if where is not None else None, aggregate,
                       self.width, self.count(select.args.get("limit")), self.count(select.args.get("offset")),
                       group, order, join)

    def group_by(self, clause: exp.Expression | None) -> tuple[Col, ...]:
        if clause is None:
            return ()
        if any(v for k, v in clause.args.items() if k != "expressions") or not clause.expressions:
            raise _NotInSubset  # ROLLUP, CUBE, GROUPING SETS, GROUP BY ALL
        cols = tuple(self.value(e) for e in clause.expressions)
        if not all(isinstance(c, Col) for c in cols) or len(set(cols)) != len(cols):
            raise _NotInSubset  # GROUP BY 1, an expression, a column twice
        return cols  # type: ignore[return-value]

    def order_by(self, clause: exp.Expression | None, group: tuple[Col, ...]) -> tuple[tuple[Any, bool, bool], ...]:
        """ORDER BY only where it orders completely: the groups by every grouping column (groups are unique);
        other orders leave ties in an order only DuckDB knows, so they stay with DuckDB."""
        if clause is None:
            if group:
                raise _NotInSubset  # groups come out in DuckDB's hash order
            return ()
        if not group or any(v for k, v in clause.args.items() if k != "expressions"):
            raise _NotInSubset
        items = []
        for o in clause.expressions:
            if not isinstance(o, exp.Ordered) or o.args.get("with_fill"):
                raise _NotInSubset
            node = self.value(o.this)
            if not isinstance(node, Col) or node not in group:
                raise _NotInSubset
            items.append((node, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
        if {c for c, _, _ in items} != set(group):
            raise _NotInSubset
        return tuple(items)

    def count(self, clause: exp.Expression | None) -> Lit | Slot | None:
        """A LIMIT or OFFSET of a literal count or a parameter (checked when its value is known)."""
        if clause is None:
            return None
        if any(v for k, v in clause.args.items() if k != "expression"):
            raise _NotInSubset  # LIMIT … PERCENT, WITH TIES, ``LIMIT a, b``
        node = self.value(clause.expression)
        if isinstance(node, Slot) or (isinstance(node, Lit) and type(node.value) is int and node.value >= 0):
            return node
        raise _NotInSubset

    def _all_columns(self) -> list[Col]:
        cols = list(self.columns.values())
        if self.joined or any(c is None for c in cols) or len(cols) != self.width:
            raise _NotInSubset
        return cols  # type: ignore[return-value]

    # -- expressions -----------------------------------------------------------
    def output(self, e: exp.Expression, named: bool) -> Any:
        """An output column (``named``: it has an alias). Its name and type are learned once from DuckDB, so
        neither may depend on a parameter's value: an unnamed output with a parameter in it is named by DuckDB
        after the value (the residual SQL has it inlined: ``regexp_replace(c, 'a', 'k')``), and a named one
        may hold one only where its type does not depend on the value (``_typed_by_slot``)."""
        agg = _AGGS.get(type(e))
        if agg is not None:
            return self.aggregate(agg, e, named)
        node = self.value(e)
        if isinstance(node, (Lit, Slot)) or _typed_by_slot(node) or (not named and _has_slot(node)):
            raise _NotInSubset  # a constant's name and type are DuckDB's guess: leave it to DuckDB
        return node

    def aggregate(self, func: str, e: exp.Expression, named: bool = True) -> Agg:
        if any(v for k, v in e.args.items() if k not in ("this", "big_int")):
            raise _NotInSubset  # DISTINCT inside, FILTER, several arguments, ...
        arg = e.this
        if func == "count" and (arg is None or isinstance(arg, exp.Star)):
            return Agg("count_star")
        if isinstance(arg, exp.Distinct) or arg is None:
            raise _NotInSubset
        node = self.value(arg)
        if isinstance(node, (Lit, Slot)) or _typed_by_slot(node) or (not named and _has_slot(node)):
            raise _NotInSubset  # as ``output``: the column's name and type may not depend on a parameter
        return Agg(func, node)

    def value(self, e: exp.Expression) -> Any:
        if isinstance(e, exp.Paren):
            return self.value(e.this)
        if isinstance(e, exp.Column):
            return self.column(e)
        if isinstance(e, exp.Placeholder):
            if id(e) not in self.param_index:
                raise _NotInSubset
            return Slot(self.param_index[id(e)])
        if isinstance(e, (exp.Literal, exp.Boolean, exp.Null)):
            return Lit(_literal(e))
        if isinstance(e, exp.Neg):
            inner = e.this
            if isinstance(inner, exp.Literal) and not inner.is_string:
                v = _literal(inner)
                return Lit(-v)
            return Neg(self.value(inner))
        op = _ARITH.get(type(e))
        if op is not None:
            if op == "/" and (e.args.get("typed") or e.args.get("safe")):
                raise _NotInSubset
            return Arith(op, self.value(e.this), self.value(e.expression))
        return self.call(e)

    def call(self, e: exp.Expression) -> Func | Case:
        """A scalar function call or CASE the evaluator computes (gateway/engine/residual/calls.py); which
        argument types it takes, and which values, it decides when the parameters are known."""
        args = e.args
        name = _UNARY.get(type(e))
        if name is not None and not any(v for k, v in args.items() if k != "this"):
            return Func(name, (self.value(e.this),))
        name = _BINARY.get(type(e))
        if name is not None and not any(v for k, v in args.items() if k not in ("this", "expression", "safe")):
            return Func(name, (self.value(e.this), self.value(e.expression)))
        if isinstance(e, exp.Trim) and not args.get("expression") and not args.get("collation"):
            name = _TRIMS.get(args.get("position"))
            if name is not None:
                return Func(name, (self.value(e.this),))
        if isinstance(e, exp.RegexpReplace) and args.get("single_replace") and not args.get("modifiers"):
            return Func("regexp_replace", (self.value(e.this), self.value(args["expression"]),
                                           self.value(args["replacement"])))
        if (isinstance(e, exp.Anonymous) and str(e.this).lower() == "regexp_replace" and len(e.expressions) == 4
                and isinstance(e.expressions[3], exp.Literal) and e.expressions[3].this == "g"):
            return Func("regexp_replace_g", tuple(self.value(a) for a in e.expressions[:3]))
        if isinstance(e, exp.Replace) and args.get("replacement") is not None:
            return Func("replace", (self.value(e.this), self.value(args["expression"]),
                                    self.value(args["replacement"])))
        if isinstance(e, exp.Concat) and e.expressions:
            return Func("concat", tuple(self.value(a) for a in e.expressions))
        if isinstance(e, exp.Coalesce):
            return Func("coalesce", (self.value(e.this), *(self.value(a) for a in e.expressions)))
        if isinstance(e, exp.If):
            default = args.get("false")
            return Case(((self.predicate(e.this), self.value(args["true"])),),
                        self.value(default) if default is not None else Lit(None))
        if isinstance(e, exp.Case) and args.get("ifs"):
            operand = self.value(e.this) if e.this is not None else None
            whens = []
            for branch in args["ifs"]:
                if not isinstance(branch, exp.If) or branch.args.get("false") is not None:
                    raise _NotInSubset
                cond = (Cmp("=", operand, self.value(branch.this)) if operand is not None
                        else self.predicate(branch.this))
                whens.append((cond, self.value(branch.args["true"])))
            default = args.get("default")
            return Case(tuple(whens), self.value(default) if default is not None else Lit(None))
        raise _NotInSubset

    def column(self, e: exp.Column) -> Col:
        if not isinstance(e.this, exp.Identifier) or e.args.get("db") or e.args.get("catalog"):
            raise _NotInSubset
        if e.table:
            columns = self.by_alias.get(e.table.lower())
            col = columns.get(e.name.lower()) if columns is not None else None
        else:
            col = self.unqualified.get(e.name.lower())
        if col is None:
            raise _NotInSubset
        return col

    def predicate(self, e: exp.Expression) -> Any:
        if isinstance(e, exp.Paren):
            return self.predicate(e.this)
        if isinstance(e, (exp.And, exp.Or)):
            op = "and" if isinstance(e, exp.And) else "or"
            items: list[Any] = []
            for side in (e.this, e.expression):
                node = self.predicate(side)
                items += node.items if isinstance(node, Logic) and node.op == op else [node]
            return Logic(op, tuple(items))
        if isinstance(e, exp.Not):
            return Not(self.predicate(e.this))
        op = _CMP.get(type(e))
        if op is not None:
            return Cmp(op, self.value(e.this), self.value(e.expression))
        if isinstance(e, exp.Is):
            if not isinstance(e.expression, exp.Null):
                raise _NotInSubset  # IS TRUE / IS DISTINCT FROM …
            return IsNull(self.value(e.this))
        if isinstance(e, exp.In):
            if any(e.args.get(k) for k in ("query", "unnest", "field")) or not e.expressions:
                raise _NotInSubset
            return In(self.value(e.this), tuple(self.value(x) for x in e.expressions))
        if isinstance(e, exp.Between):
            if e.args.get("symmetric"):
                raise _NotInSubset
            return Between(self.value(e.this), self.value(e.args["low"]), self.value(e.args["high"]))
        if isinstance(e, exp.Column):
            col = self.column(e)
            if col.sql_type is not SqlType.BOOLEAN:
                raise _NotInSubset
            return col
        if isinstance(e, exp.Boolean):
            return Lit(bool(e.this))
        if isinstance(e, (exp.StartsWith, exp.Contains)):
            return self.call(e)
        raise _NotInSubset


_UNARY: dict[type, str] = {exp.Upper: "upper", exp.Lower: "lower", exp.Length: "length", exp.Abs: "abs"}
_BINARY: dict[type, str] = {exp.DPipe: "||", exp.Nullif: "nullif", exp.StartsWith: "starts_with",
                            exp.Contains: "contains"}
_TRIMS: dict[Any, str] = {None: "trim", "LEADING": "ltrim", "TRAILING": "rtrim"}
# calls whose DuckDB result type is the same whatever their arguments' types (the evaluator takes them only with
# the argument types it expects, and declines the rest)
_FIXED_TYPE = frozenset({"upper", "lower", "length", "trim", "ltrim", "rtrim", "regexp_replace", "regexp_replace_g",
                         "replace", "concat", "||", "starts_with", "contains"})


def _has_slot(node: Any) -> bool:
    """Whether a parameter is anywhere in ``node``."""
    if isinstance(node, Slot):
        return True
    if isinstance(node, Arith):
        return _has_slot(node.left) or _has_slot(node.right)
    if isinstance(node, Neg):
        return _has_slot(node.item)
    if isinstance(node, Func):
        return any(_has_slot(a) for a in node.args)
    if isinstance(node, Case):
        return any(_has_slot(v) for _, v in node.whens) or _has_slot(node.default)
    return False


def _typed_by_slot(node: Any) -> bool:
    """Whether the DuckDB type of ``node`` can depend on a parameter's value (the type of the literal it is
    written as): a program's result columns are learned once from DuckDB, so such an output stays DuckDB's."""
    if isinstance(node, Func) and node.name in _FIXED_TYPE:
        return False
    return _has_slot(node)


def _literal(e: exp.Expression) -> Any:
    """The value of a literal as DuckDB reads its text: digits → integer, ``1.5`` → DECIMAL, ``1e3`` → DOUBLE."""
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if not isinstance(e, exp.Literal):
        raise _NotInSubset
    text = str(e.this)
    if e.is_string:
        return text
    if _INT_RE.fullmatch(text):
        v = int(text)
        if v >= 2**63:
            raise _NotInSubset  # HUGEINT or DOUBLE in DuckDB
        return v
    if _DEC_RE.fullmatch(text):
        return Decimal(text)
    if _DOUBLE_RE.fullmatch(text):
        return float(text)
    raise _NotInSubset
