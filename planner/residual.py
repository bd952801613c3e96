"""Rewriting store references for the residual SQL DuckDB runs.

Each store table becomes a subquery over the scan's relation that keeps the
user's alias, hides failure rows (unless the statement asks for them) and
exposes only the store's columns plus the pseudo-columns the statement names;
``SELECT *`` therefore never shows a pseudo-column.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

__all__ = ["wrap_store", "rewrite_stars", "CARRIED_TABLE_ARGS", "OPAQUE_TABLE_ARGS"]

# Table modifiers the wrapping subquery takes over unchanged.
CARRIED_TABLE_ARGS = ("pivots", "sample", "laterals", "joins")
# Of those, the ones after which the store's rows are no longer what WHERE sees
# (so nothing is pushed into that store's scan).
OPAQUE_TABLE_ARGS = ("pivots", "sample")
_HANDLED = {"this", "alias", "db", "catalog", "version", *CARRIED_TABLE_ARGS}


def unsupported_table_args(table: exp.Table) -> list[str]:
    """Table modifiers the planner cannot carry into the residual SQL (so it refuses them)."""
    return [k for k, v in table.args.items() if v and k not in _HANDLED]


def wrap_store(table: exp.Table, scan: Any, exposed: tuple[str, ...]) -> exp.Subquery:
    cols = [exp.column(c.name, quoted=True) for c in scan.spec.columns()] + [exp.column(p, quoted=True) for p in exposed]
    inner = exp.select(*cols).from_(exp.table_(scan.relation, quoted=True))
    if not scan.include_failures:
        inner = inner.where(exp.column("_failure_reason", quoted=True).is_(exp.null()))
    alias = table.args.get("alias")
    if alias is None:
        alias = exp.TableAlias(this=exp.to_identifier(scan.alias, quoted=True))
    else:
        alias = alias.copy()
    wrapped = exp.Subquery(this=inner, alias=alias)
    for arg in CARRIED_TABLE_ARGS:  # PIVOT/UNPIVOT, TABLESAMPLE, ... apply to the wrapped relation alike
        if table.args.get(arg):
            wrapped.set(arg, table.args[arg])
    return wrapped


def _exclude(star: exp.Star, names: tuple[str, ...]) -> None:
    existing = list(star.args.get("except_") or [])
    have = {e.name.lower() for e in existing}
    existing += [exp.column(n, quoted=True) for n in names if n not in have]
    star.set("except_", existing)


def rewrite_stars(select: exp.Select, by_table: dict[int, Any], exposed_by_scan: dict[int, tuple[str, ...]]) -> None:
    """Keep pseudo-columns a store exposes (because the statement names them) out of ``*``."""
    sources: list[tuple[str, exp.Expression]] = []
    frm = select.args.get("from_")
    if frm is not None:
        sources.append((frm.this.alias_or_name, frm.this))
    joins = select.args.get("joins") or []
    sources += [(j.this.alias_or_name, j.this) for j in joins]
    hidden = {alias.lower(): exposed_by_scan.get(id(node), ()) for alias, node in sources if id(node) in by_table}
    if not any(hidden.values()):
        return
    natural = any(j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL" for j in joins)
    new_exprs: list[exp.Expression] = []
    for e in select.expressions:
        if isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            names = hidden.get(e.table.lower(), ())
            if names:
                _exclude(e.this, names)
            new_exprs.append(e)
        elif isinstance(e, exp.Star):
            if len(sources) == 1 or natural or all(id(node) in by_table for _, node in sources):
                all_hidden = tuple(dict.fromkeys(n for names in hidden.values() for n in names))
                _exclude(e, all_hidden)
                new_exprs.append(e)
            else:
                for alias, node in sources:
                    star = exp.Star()
                    if e.args.get("except_") or e.args.get("replace"):
                        star = e.copy()
                    names = hidden.get(alias.lower(), ())
                    if names:
                        _exclude(star, names)
                    new_exprs.append(exp.Column(this=star, table=exp.to_identifier(alias)))
        else:
            new_exprs.append(e)
    select.set("expressions", new_exprs)
