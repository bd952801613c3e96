"""Rewrites of the parsed statement that keep its meaning and make it cheap: OR chains of equalities → IN.

BI tools filter on many values as ``k = 'a' OR k = 'b' OR …``; sqlglot parses
that as a left-deep tree one level per term, which every recursive walk (ours,
sqlglot's generator, DuckDB's binder with its expression-depth limit) pays for.
``k IN ('a', 'b', …)`` is the same predicate by definition (SQL defines IN as
that disjunction, NULLs included) and one flat node.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["rewrite_or_chains", "flatten"]


def flatten(node: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    """The operands of a chain of one connector (AND or OR), through parentheses; iterative, in order."""
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        while isinstance(cur, exp.Paren):
            cur = cur.this
        if isinstance(cur, kind):
            stack.append(cur.expression)
            stack.append(cur.this)
        else:
            out.append(cur)
    return out


def _same_column(a: exp.Column, b: exp.Column) -> bool:
    return a.name.lower() == b.name.lower() and a.table.lower() == b.table.lower() and not a.args.get("db")


def _constant(node: exp.Expression) -> bool:
    return isinstance(node, (exp.Literal, exp.Placeholder, exp.Null, exp.Boolean)) or (
        isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal))


def _equality(node: exp.Expression) -> tuple[exp.Column, list[exp.Expression]] | None:
    """``col = const`` or ``col IN (const, …)`` as (column, values), else None."""
    if isinstance(node, exp.EQ):
        left, right = node.this, node.expression
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right = right, left
        if isinstance(left, exp.Column) and _constant(right):
            return left, [right]
        return None
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column) and not node.args.get("query") \
            and not node.args.get("unnest") and not node.args.get("field") and not node.args.get("is_global"):
        if all(_constant(e) for e in node.expressions):
            return node.this, list(node.expressions)
    return None


def rewrite_or_chains(statement: exp.Expression) -> exp.Expression:
    """Replace every OR chain whose terms all compare one column with constants by one IN (in place)."""
    roots = [n for n in statement.find_all(exp.Or)
             if not isinstance(_parent_through_parens(n), exp.Or)]
    for root in roots:
        terms = flatten(root, exp.Or)
        if len(terms) < 2:
            continue
        parts = [_equality(t) for t in terms]
        if any(p is None for p in parts):
            continue
        col = parts[0][0]  # type: ignore[index]
        if not all(_same_column(col, p[0]) for p in parts):  # type: ignore[index]
            continue
        values = [v for p in parts for v in p[1]]  # type: ignore[union-attr]
        replacement = exp.In(this=col.copy(), expressions=values)
        target = root
        while isinstance(target.parent, exp.Paren) and target.parent.this is target and \
                isinstance(target.parent.parent, exp.Or):
            target = target.parent
        target.replace(replacement)
    return statement


def _parent_through_parens(node: exp.Expression) -> exp.Expression | None:
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent
