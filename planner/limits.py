"""What a statement may be, checked on the raw text before any parsing: size, nesting, names, encoding.

Parsing and planning run outside DuckDB's statement timeout, so their cost
must be bounded by the input: these checks keep pathological statements
(a megabyte-long function name, thousands of nested parentheses, a lone
surrogate) from ever reaching the parser, each with a 400 that says where.
BI tools generate long SQL; the limits are far above anything they write.
"""

from __future__ import annotations

from typing import Any

from .errors import ParameterError, ResourceLimitError, SqlSyntaxError
from .positions import line_col

__all__ = ["check_text", "check_tree_depth", "check_param_values", "MAX_SQL_CHARS", "MAX_NESTING", "MAX_TREE_DEPTH",
           "MAX_NAME_CHARS", "MAX_PARAMS", "MAX_TERMS"]

MAX_SQL_CHARS = 1_000_000
# list items and AND/OR terms (commas and the two words, outside strings and comments): planning costs about
# 0.1-0.2 ms a term here (sqlglot's parse, then the analysis's passes), so 20,000 select-list columns took 3 s of
# Python that no DuckDB interrupt reaches; past this a statement is refused before it is parsed (issue 50 item 4)
MAX_TERMS = 10_000
MAX_NESTING = 1_000  # parentheses and brackets inside one another
MAX_NAME_CHARS = 1_024  # an identifier or a function name
# expressions inside one another once parsed (OR chains on one column folded into IN, long AND/OR chains
# balanced): chains the text check does not see (x::int::int …, a.b.c …, - - 1) cost planning ~0.1 ms a level
MAX_TREE_DEPTH = 10_000
MAX_PARAMS = 100_000
MAX_ARRAY_DIMENSIONS = 6  # PostgreSQL's MAXDIM

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


def check_text(sql: str) -> None:
    """Refuse text no parser should see; one linear pass, strings and comments skipped."""
    if len(sql) > MAX_SQL_CHARS:
        raise SqlSyntaxError(f"the statement has {len(sql):,} characters; the limit is {MAX_SQL_CHARS:,}")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:
        line, col = line_col(sql, exc.start)
        raise SqlSyntaxError(f"the statement contains an invalid character (a lone surrogate, U+{ord(sql[exc.start]):04X})",
                             line=line, col=col) from None
    depth = deepest = 0
    terms = 0
    i, n = 0, len(sql)
    word_start = -1
    while i < n:
        ch = sql[i]
        if ch in _WORD:
            if word_start < 0:
                word_start = i
            elif i - word_start >= MAX_NAME_CHARS:
                line, col = line_col(sql, word_start)
                raise SqlSyntaxError(f"a name longer than {MAX_NAME_CHARS} characters", line=line, col=col)
            i += 1
            continue
        if word_start >= 0 and 2 <= i - word_start <= 3 and sql[word_start:i].lower() in _CONNECTIVES:
            terms += 1
            if terms > MAX_TERMS:
                _too_many_terms(sql, word_start)
        elif ch == ",":
            terms += 1
            if terms > MAX_TERMS:
                _too_many_terms(sql, i)
        word_start = -1
        if ch in "'\"`":  # a string or quoted identifier: skip to its end ('' and "" escape themselves)
            close = sql.find(ch, i + 1)
            while close >= 0 and close + 1 < n and sql[close + 1] == ch:
                close = sql.find(ch, close + 2)
            if ch == '"' and close > i and close - i - 1 > MAX_NAME_CHARS:
                line, col = line_col(sql, i)
                raise SqlSyntaxError(f"a name longer than {MAX_NAME_CHARS} characters", line=line, col=col)
            i = n if close < 0 else close + 1
            continue
        if ch == "-" and sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
            continue
        if ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    line, col = line_col(sql, i)
                    raise SqlSyntaxError(f"the statement nests more than {MAX_NESTING} levels deep", line=line, col=col)
        elif ch in ")]}":
            depth -= 1
        i += 1


_CONNECTIVES = frozenset({"and", "or"})


def _too_many_terms(sql: str, at: int) -> None:
    line, col = line_col(sql, at)
    raise ResourceLimitError(
        f"the statement has more than {MAX_TERMS:,} list items and AND/OR terms (select-list columns, IN values, "
        f"arguments, conditions); the limit is {MAX_TERMS:,}, reached here. Split it into several statements, or "
        "pass a long list of keys as one array parameter (key = ANY(?))", line=line, col=col)


def check_tree_depth(tree: Any) -> None:
    """Refuse a parsed statement nested deeper than MAX_TREE_DEPTH; iterative, so any depth is safe to measure.

    Why after parsing: the parser gets through chains of casts or dotted
    names, but the analysis after it recurses once per level, outside any
    statement timeout (50,000 casts took 6 s to fail with a RecursionError,
    answered as a 500).
    """
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise SqlSyntaxError(f"the statement nests expressions more than {MAX_TREE_DEPTH:,} levels deep (a chain of "
                                 "casts, dotted names or unary operators); write it with fewer levels")
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def check_param_values(params: Any) -> None:
    """Parameters are values (dates and times too) or lists of them (PostgreSQL's arrays: ``id = ANY($1)``,
    at most MAX_ARRAY_DIMENSIONS deep), at most MAX_PARAMS values in all, strings valid UTF-8."""
    values = list(params.values()) if hasattr(params, "values") and callable(params.values) else list(params)
    if len(values) > MAX_PARAMS:
        raise ParameterError(f"{len(values):,} parameters were given; the limit is {MAX_PARAMS:,}")
    count = len(values)
    for i, v in enumerate(values):
        if isinstance(v, list):
            count += _list_values(v, i)
            if count > MAX_PARAMS:
                raise ParameterError(f"the parameters hold more than {MAX_PARAMS:,} values (list elements count); "
                                     "that is the limit")
        else:
            _check_value(v, i)


def _list_values(top: list[Any], i: int) -> int:
    """How many values a list parameter holds, its elements checked like parameters (without recursion)."""
    count = 0
    stack = [(top, 1)]
    while stack:
        items, depth = stack.pop()
        if depth > MAX_ARRAY_DIMENSIONS:
            raise ParameterError(f"parameter {i + 1} is a list nested more than {MAX_ARRAY_DIMENSIONS} deep; the "
                                 "limit is PostgreSQL's for arrays")
        for v in items:
            count += 1
            if isinstance(v, list):
                stack.append((v, depth + 1))
            else:
                _check_value(v, i)
    return count


def _check_value(v: Any, i: int) -> None:
    if isinstance(v, (tuple, dict, set)):
        raise ParameterError(f"parameter {i + 1} is a {type(v).__name__}; parameters are values or lists of values")
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ParameterError(f"parameter {i + 1} contains an invalid character (a lone surrogate)") from None
