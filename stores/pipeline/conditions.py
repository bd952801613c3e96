"""A Spark SQL condition evaluated on the driver over Arrow rows: a join's ``where``, a table aggregate's ``having``.

Why not Spark itself: the rows these conditions filter are made on the
driver in foreachBatch (from the side state, ``side_state.py``), and a
Spark job over them would cost ~0.1-0.2 s per micro-batch (measured: a local
``createDataFrame(...).filter(...)`` on 2 cores) — more than the batch.

So the condition is *analyzed by Spark* once, when the store is declared
(names resolved as Spark resolves them, implicit casts made explicit), and
the analyzed expression is compiled to pyarrow compute: comparisons, AND,
OR, NOT (SQL's three-valued logic, Kleene), IS [NOT] NULL, IN, BETWEEN (it
arrives as two comparisons), + - * / and negation on numbers, numeric
casts, and literals. Anything else is refused when the store is declared,
saying what to do, never evaluated differently from Spark. A row qualifies
when the condition is true (NULL does not qualify, as in SQL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from ..catalog.decimals import DecimalType, decode_decimal
from ..catalog.nested import NestedType
from ..catalog.schema import SqlType
from .declarations import TopologyError

__all__ = ["RowCondition", "compile_condition"]

Eval = Callable[[pa.Table], Any]

_CMP = {"EqualTo": "equal", "GreaterThan": "greater", "GreaterThanOrEqual": "greater_equal",
        "LessThan": "less", "LessThanOrEqual": "less_equal"}
_ARITH = {"Add": "add_checked", "Subtract": "subtract_checked", "Multiply": "multiply_checked", "Divide": "divide"}
_SUPPORTED = ("comparisons (=, <>, <, <=, >, >=, <=>), AND, OR, NOT, IS [NOT] NULL, IN (literals), BETWEEN, "
              "+ - * / on numbers, numeric casts, literals and columns")


class RowCondition:
    """A compiled condition: ``keep(table)`` → a boolean mask (True: the row qualifies), over columns in the
    stores' stored forms (``side_state.py``) named as the condition names them."""

    def __init__(self, text: str, evaluate: Eval, columns: tuple[str, ...]) -> None:
        self.text = text  # Spark's SQL of the analyzed condition (for the definition's fingerprint)
        self._evaluate = evaluate
        self.columns = columns

    def keep(self, table: pa.Table) -> pa.Array:
        if len(table) == 0:
            return pa.array([], pa.bool_())
        out = self._evaluate(table)
        if isinstance(out, pa.Scalar):
            out = pa.array([out.as_py()] * len(table), pa.bool_())
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return pc.fill_null(out.cast(pa.bool_()), False)


def compile_condition(spark: SparkSession, store: str, what: str, condition: str | SparkColumn,
                      fields: Mapping[str, tuple[Any, SqlType | DecimalType | NestedType]]) -> RowCondition:
    """Analyze ``condition`` over ``fields`` (name → (Spark type, catalog type)) and compile it (see the module)."""
    if not isinstance(condition, (str, SparkColumn)) or (isinstance(condition, str) and not condition.strip()):
        raise TopologyError(f"store {store!r}: {what} must be a Spark SQL condition (text or a Column), "
                            f"got {condition!r}")
    schema = StructType([StructField(n, dt, True) for n, (dt, _t) in fields.items()])
    empty: DataFrame = spark.createDataFrame([], schema)
    try:
        plan = empty.filter(condition)._jdf.queryExecution().analyzed()
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException through py4j: say it with the store
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TopologyError(f"store {store!r}: {what} {condition!s} cannot be read over the columns "
                            f"{list(fields)}: {first}") from None
    if plan.nodeName() != "Filter":
        raise TopologyError(f"store {store!r}: {what} {condition!s} is not a row condition")
    types = {n: t for n, (_dt, t) in fields.items()}
    used: list[str] = []
    evaluate = _compile(plan.condition(), store, what, types, used)
    return RowCondition(str(plan.condition().sql()), evaluate, tuple(dict.fromkeys(used)))


def _column_values(name: str, t: Any) -> Eval:
    """A column's stored form → the values comparisons need (booleans as bool, decimals as decimal128)."""
    def get(table: pa.Table) -> Any:
        arr = table.column(name)
        if t is SqlType.BOOLEAN:
            return arr.cast(pa.bool_())
        if isinstance(t, DecimalType):
            vals = [None if v is None else decode_decimal(t, v) for v in arr.to_pylist()]
            return pa.array(vals, pa.decimal128(t.precision, t.scale))
        return arr
    return get


def _literal(node: Any, store: str, what: str) -> Any:
    value, dt = node.value(), node.dataType().simpleString()
    if value is None:
        return None
    if dt == "string":
        return str(value.toString())
    if dt.startswith("decimal"):
        return Decimal(str(value.toString()))
    if dt in ("timestamp", "timestamp_ntz"):
        return int(value) // 1000  # Spark keeps microseconds; stores keep epoch ms
    if dt in ("int", "bigint", "smallint", "tinyint", "date"):
        return int(value)
    if dt in ("double", "float"):
        return float(value)
    if dt == "boolean":
        return bool(value)
    raise TopologyError(f"store {store!r}: {what}: a literal of type {dt} is not supported here; use {_SUPPORTED}")


def _arrow_type(dt: str, store: str, what: str) -> pa.DataType:
    if dt in ("int", "bigint", "smallint", "tinyint"):
        return pa.int64()
    if dt in ("double", "float"):
        return pa.float64()
    if dt.startswith("decimal("):
        p, s = (int(x) for x in dt[len("decimal("):-1].split(","))
        return pa.decimal128(p, s)
    raise TopologyError(f"store {store!r}: {what}: a cast to {dt} is not supported here; use {_SUPPORTED}")


def _compile(node: Any, store: str, what: str, types: Mapping[str, Any], used: list[str],
             refs: dict[int, Eval] | None = None) -> Eval:
    kind = node.nodeName()
    kids = [node.children().apply(i) for i in range(node.children().size())]
    refs = {} if refs is None else refs

    def sub(i: int) -> Eval:
        return _compile(kids[i], store, what, types, used, refs)

    if kind == "With":  # Spark 4's common subexpressions (BETWEEN evaluates its operand once)
        defs = node.defs()
        for i in range(defs.size()):
            d = defs.apply(i)
            refs[int(d.id().id())] = _compile(d.child(), store, what, types, used, refs)
        return _compile(node.child(), store, what, types, used, refs)
    if kind == "CommonExpressionRef":
        return refs[int(node.id().id())]

    if kind == "AttributeReference":
        name = str(node.name())
        t = types.get(name)
        if t is None or isinstance(t, NestedType) or t is SqlType.BLOB:
            raise TopologyError(f"store {store!r}: {what}: column {name!r} ({t}) cannot be compared on the driver; "
                                "compare scalar columns (ARRAY/STRUCT/MAP and binary ones are not supported here)")
        used.append(name)
        return _column_values(name, t)
    if kind == "Literal":
        value = _literal(node, store, what)
        return lambda table: value
    if kind in _CMP:
        a, b, fn = sub(0), sub(1), getattr(pc, _CMP[kind])
        return lambda table: fn(a(table), b(table))
    if kind == "EqualNullSafe":
        a, b = sub(0), sub(1)

        def null_safe(table: pa.Table) -> Any:
            x, y = _array(a(table), len(table)), _array(b(table), len(table))
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            return pc.or_(both_null, pc.fill_null(pc.equal(x, y), False))
        return null_safe
    if kind in ("And", "Or"):
        a, b, fn = sub(0), sub(1), (pc.and_kleene if kind == "And" else pc.or_kleene)
        return lambda table: fn(_array(a(table), len(table)), _array(b(table), len(table)))
    if kind == "Not":
        a = sub(0)
        return lambda table: pc.invert(_array(a(table), len(table)))
    if kind in ("IsNull", "IsNotNull"):
        a = sub(0)
        test = pc.is_null if kind == "IsNull" else pc.is_valid
        return lambda table: test(_array(a(table), len(table)))
    if kind == "In":
        value = _compile(node.value(), store, what, types, used, refs)
        items = node.list()
        lits = []
        for i in range(items.size()):
            item = items.apply(i)
            if not _constant(item):
                raise TopologyError(f"store {store!r}: {what}: IN takes literals here; use {_SUPPORTED}")
            lits.append(_literal(item, store, what) if item.nodeName() == "Literal" else _folded(item, store, what))
        has_null = any(v is None for v in lits)
        choices = [v for v in lits if v is not None]

        def member(table: pa.Table) -> Any:
            x = _array(value(table), len(table))
            hit = pc.is_in(x, value_set=pa.array(choices, x.type)) if choices else pa.array([False] * len(x))
            hit = pc.if_else(pc.is_null(x), pa.scalar(None, pa.bool_()), hit)
            if has_null:  # x IN (…, NULL) is NULL when no item matched, as in SQL
                hit = pc.if_else(hit, True, pa.scalar(None, pa.bool_()))
            return hit
        return member
    if kind in _ARITH:
        a, b, fn = sub(0), sub(1), getattr(pc, _ARITH[kind])
        return lambda table: fn(a(table), b(table))
    if kind == "UnaryMinus":
        a = sub(0)
        return lambda table: pc.negate_checked(a(table))
    if kind in ("Cast", "AnsiCast", "TryCast") and _constant(kids[0]):
        value = _folded(node, store, what)  # a cast of a literal (NULL in IN (…, NULL)): Spark computes it once
        return lambda table: value
    if kind in ("Cast", "AnsiCast", "TryCast") and kids[0].dataType().simpleString() == \
            node.dataType().simpleString():
        return sub(0)  # a cast to the type it has (the analyzer's, around IN's operands)
    if kind in ("Cast", "AnsiCast", "TryCast"):
        target = _arrow_type(node.dataType().simpleString(), store, what)
        a = sub(0)

        def cast(table: pa.Table) -> Any:
            x = a(table)
            if not isinstance(x, (pa.Array, pa.ChunkedArray)):
                return None if x is None else pa.array([x] * len(table)).cast(target)[0].as_py()
            return x.cast(target)
        return cast
    replacement = _replacement(node)
    if replacement is not None:  # BETWEEN and its kin: Spark defines them as simpler expressions
        return _compile(replacement, store, what, types, used, refs)
    raise TopologyError(f"store {store!r}: {what}: {str(node.sql())!r} ({kind}) is not supported on the driver; use "
                        f"{_SUPPORTED} (or compute the value as a column first)")


def _replacement(node: Any) -> Any:
    """A RuntimeReplaceable expression's replacement (``between(a, 1, 3)`` is ``1 <= a AND a <= 3``), or None."""
    if node.nodeName() not in ("Between",):
        return None
    try:
        return node.replacement()
    except Exception:  # noqa: BLE001 - py4j: no such method on this Spark
        return None


def _constant(node: Any) -> bool:
    return node.nodeName() == "Literal" or (node.nodeName() in ("Cast", "AnsiCast", "TryCast")
                                             and _constant(node.children().apply(0)))


def _folded(node: Any, store: str, what: str) -> Any:
    """A constant expression's value, computed by Spark (so its cast rules are Spark's), in stored form."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    dt = node.dataType().simpleString()
    row = spark.sql(f"SELECT {node.sql()} AS v").collect()[0]
    v = row["v"]
    if v is None:
        return None
    if dt in ("timestamp", "timestamp_ntz"):
        return int(v.replace(tzinfo=v.tzinfo or timezone.utc).timestamp() * 1000)
    if dt == "date":
        return (v - date(1970, 1, 1)).days
    if dt.startswith("decimal") or dt in ("string", "boolean", "int", "bigint", "smallint", "tinyint", "double",
                                            "float"):
        return v
    raise TopologyError(f"store {store!r}: {what}: a constant of type {dt} is not supported here; use {_SUPPORTED}")


def _array(x: Any, n: int) -> Any:
    """A scalar result (a literal, a constant expression) broadcast to ``n`` rows for the kernels that need arrays."""
    if isinstance(x, (pa.Array, pa.ChunkedArray)):
        return x
    if isinstance(x, pa.Scalar):
        x = x.as_py()
    return pa.array([x] * n)
