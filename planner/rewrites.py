"""Rewrites of the parsed statement that keep its meaning and make it cheap: OR chains of equalities → IN.

BI tools filter on many values as ``k = 'a' OR k = 'b' OR …``; sqlglot parses
that as a left-deep tree one level per term, which every recursive walk (ours,
sqlglot's generator, DuckDB's binder with its expression-depth limit) pays for.
``k IN ('a', 'b', …)`` is the same predicate by definition (SQL defines IN as
that disjunction, NULLs included) and one flat node.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["rewrite_or_chains", "balance_chains", "flatten", "BALANCE_MIN_TERMS"]

BALANCE_MIN_TERMS = 32  # shorter chains stay as parsed (their SQL, EXPLAIN text and fixtures unchanged)


def flatten(node: exp.Expression, kind: type[exp.Connector], *, keep_parens: bool = False) -> list[exp.Expression]:
    """The operands of a chain of one connector (AND or OR), through parentheses; iterative, in order.

    ``keep_parens``: an operand keeps its own parentheses (to rebuild the
    chain as SQL); by default they are stripped (to look at the operand).
    """
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        inner = cur
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, kind):
            stack.append(inner.expression)
            stack.append(inner.this)
        else:
            out.append(cur if keep_parens else inner)
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


def balance_chains(statement: exp.Expression) -> int:
    """Rebuild every AND or OR chain of BALANCE_MIN_TERMS terms or more as a balanced tree, terms in order (in place).

    Why: a chain of n terms parses one level per term, and walks that look
    up from each column to its SELECT (ours, sqlglot's scope analysis) cost
    O(depth) per column: a WHERE of 3,000 mixed ``(k = … AND v = …)`` terms
    planned in 5 s, quadratic in n. AND and OR are associative, in SQL's
    three-valued logic too, so ``((a OR b) OR c) OR d`` and ``(a OR b) OR
    (c OR d)`` are one predicate; the balanced tree is log2(n) deep. Terms
    keep their own parentheses. Returns how many chains were rebuilt: the
    gateway runs a statement with one in DuckDB without its expression
    rewriter, which is quadratic in such a chain (``Plan.long_chains``).
    """
    rebuilt = 0
    for kind in (exp.Or, exp.And):
        roots = [n for n in statement.find_all(kind) if not isinstance(_parent_through_parens(n), kind)]
        for root in roots:
            terms = flatten(root, kind, keep_parens=True)
            if len(terms) >= BALANCE_MIN_TERMS:
                root.replace(_balanced(kind, terms))
                rebuilt += 1
    return rebuilt


def _balanced(kind: type[exp.Connector], terms: list[exp.Expression]) -> exp.Expression:
    level = terms
    while len(level) > 1:
        paired = [kind(this=level[i], expression=level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[-1:] if len(level) % 2 else paired
    return level[0]
