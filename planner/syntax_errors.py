"""sqlglot's parse errors in SQL words: the token as written, what is missing, the line and column it starts at."""

from __future__ import annotations

import re

from sqlglot.errors import ParseError

from .errors import SqlSyntaxError

__all__ = ["syntax_error"]

_TOKEN_RE = re.compile(r"<Token token_type: [^,]*, text: (.*?), line: \d+, col: \d+, start: \d+, end: \d+, comments: \[.*?\]>")
_INTERNALS_RE = re.compile(r"Required keyword: '(\w+)' missing for <class 'sqlglot\.[\w.]*?\.(\w+)'>")
_CLAUSES = {"Where": "a WHERE without a condition", "Having": "a HAVING without a condition",
            "Alias": "an alias without an expression", "Order": "an ORDER BY without a column",
            "Group": "a GROUP BY without a column", "Limit": "a LIMIT without a count", "Join": "an incomplete JOIN"}


def _incomplete(class_name: str) -> str:
    """What sqlglot's ``Required keyword … missing for <class …>`` means, in SQL words (no internals)."""
    if class_name in _CLAUSES:
        return _CLAUSES[class_name]
    return "an operator or function is missing an operand"


def syntax_error(err: ParseError) -> SqlSyntaxError:
    """The SqlSyntaxError for sqlglot's first parse error: its message without sqlglot's internals, where the
    offending token starts (sqlglot reports where it ends)."""
    first = err.errors[0] if err.errors else {}
    message = _TOKEN_RE.sub(lambda m: repr(m.group(1)), str(first.get("description") or err).split("\n")[0])
    message = message.replace("'SENTINEL'", "the end of the statement")
    message = _INTERNALS_RE.sub(lambda m: _incomplete(m.group(2)), message)
    col = first.get("col")
    if col is not None and first.get("highlight"):  # sqlglot reports the token's last column
        col = max(1, col - len(first["highlight"]) + 1)
    return SqlSyntaxError(f"syntax error: {message}", line=first.get("line"), col=col)
