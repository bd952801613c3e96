"""The types of a statement's ``$n`` parameters, as PostgreSQL infers them from the SQL around each one.

A PostgreSQL client that prepares ``SELECT … WHERE id = $1`` without saying
what ``$1`` is asks the server (Describe) and then sends the value in that
type: asyncpg sends a Python int only to an ``int8`` parameter, and refuses
it for ``text``. DuckDB leaves such parameters UNKNOWN until it sees a value,
so the types come from the statement: a parameter compared with, or added to,
an expression of a known type takes that type (``id = $1``, ``$1 < amount``,
``id IN ($1, $2)``, ``id BETWEEN $1 AND $2``, ``id = ANY($1)`` its array), a
cast names it (``$1::oid[]``), LIMIT and OFFSET take ``bigint``, LIKE and
``||`` take text. Anything else stays unknown, which PostgreSQL resolves to
text, as before. Column types come from the stores' and system tables'
schemas through sqlglot's type annotation; a statement that annotation
cannot follow has no inferred types rather than an error (Describe must
still describe it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from stores.catalog.schema import StoreSpec

from .dialect import IqgateDialect, parse_statement
from .systables import SYSTEM_TABLES
from .systables.model import relation_columns, relations

__all__ = ["parameter_types"]

# Longer statements are not annotated: qualify and annotate are pure Python over the whole tree, and grow
# faster than linearly in an OR chain (1,000 ``(k = $i AND v = $j)`` terms, 28,000 characters: 1.0 s, about
# what planning it takes; 2,000 terms: 2.6 s). Their parameters stay unknown (text), as before inference.
MAX_INFERRED_SQL_CHARS = 30_000

_COMPARED = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
             exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod)
_TEXT = (exp.Like, exp.ILike, exp.SimilarTo, exp.DPipe, exp.RegexpLike)


def parameter_types(sql: str, catalog: Mapping[str, StoreSpec]) -> dict[int, str]:
    """``{n: type}`` for the ``$n`` whose type the statement decides, the type as PostgreSQL writes it
    (``bigint``, ``decimal(10, 2)``, ``oid[]``); parameters it does not decide are left out."""
    if len(sql) > MAX_INFERRED_SQL_CHARS:
        return {}
    try:
        tree = parse_statement(sql)
    except Exception:  # noqa: BLE001 - the statement's own error is reported when it runs
        return {}
    placeholders = [p for p in tree.find_all(exp.Placeholder) if str(p.this or "").isdigit()]
    if not placeholders:
        return {}
    try:
        schema = _schema(catalog)
        tree = qualify(tree, schema=schema, dialect=IqgateDialect, validate_qualify_columns=False,
                       quote_identifiers=False)
        tree = annotate_types(tree, schema=schema, dialect=IqgateDialect)
    except Exception:  # noqa: BLE001 - sqlglot cannot follow every statement DuckDB can; then nothing is inferred
        return {}
    found: dict[int, str] = {}
    for p in tree.find_all(exp.Placeholder):
        if not str(p.this or "").isdigit():
            continue
        decided = _decided_type(p)
        if decided is not None:
            found.setdefault(int(str(p.this)), decided.sql("postgres").lower())
    return found


def _schema(catalog: Mapping[str, StoreSpec]) -> MappingSchema:
    """The stores', streams' and system tables' columns for sqlglot, built once per catalog (building it was 2.5 ms
    of the 3.5 ms a Describe spent here); qualify and annotate only read it."""
    return _schema_of(tuple(sorted(relations(catalog).items())))


@functools.lru_cache(maxsize=8)
def _schema_of(stores: tuple[tuple[str, Any], ...]) -> MappingSchema:
    tables: dict[str, dict[str, dict[str, str]]] = {"public": {}}
    for name, spec in stores:
        tables["public"][name] = {c.name: str(c.type) for c in relation_columns(spec)}
    for table in SYSTEM_TABLES.values():
        tables.setdefault(table.schema, {})[table.name] = dict(table.columns)
    return MappingSchema(tables, dialect=IqgateDialect, normalize=True)


def _decided_type(p: exp.Placeholder) -> exp.DataType | None:
    node: exp.Expression = p
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    parent = node.parent
    if isinstance(parent, (exp.Cast, exp.TryCast)) and parent.this is node:
        return parent.to
    if isinstance(parent, (exp.Limit, exp.Offset, exp.Fetch)):
        return exp.DataType.build("bigint")
    if isinstance(parent, _TEXT):
        return exp.DataType.build("text")
    quantified = isinstance(parent, (exp.Any, exp.All)) or (
        isinstance(parent, exp.Anonymous) and str(parent.this).upper() in ("ANY", "ALL", "SOME"))  # <> ALL($1)
    if quantified and isinstance(parent.parent, _COMPARED):
        element = _known(_other(parent.parent, parent))
        return None if element is None else exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[element],
                                                         nested=True)
    if isinstance(parent, _COMPARED):
        return _known(_other(parent, node))
    if isinstance(parent, exp.In):
        others = list(parent.expressions) if parent.this is node else [parent.this]
        return next((t for t in map(_known, others) if t is not None), None)
    if isinstance(parent, exp.Between):
        others = [parent.this] if parent.this is not node else [parent.args.get("low"), parent.args.get("high")]
        return next((t for t in map(_known, others) if t is not None), None)
    return None


def _other(binary: exp.Expression, side: exp.Expression) -> exp.Expression | None:
    return binary.expression if binary.this is side else binary.this


def _known(node: exp.Expression | None) -> exp.DataType | None:
    """The annotated type of ``node`` when sqlglot knows it (not a parameter's, not NULL's, not unknown)."""
    if node is None or isinstance(node, exp.Placeholder):
        return None
    t = node.type
    if t is None or t.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL, exp.DataType.Type.USERDEFINED):
        return None
    return t
