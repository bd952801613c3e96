"""How many parameters a statement has, and where: ``?`` (what ADBC and JDBC clients write) or ``$n``.

A prepared statement's parameter schema needs the count before anything is
bound; the engine takes both styles as they are. A ``?`` statement is also
read as ``$1, $2, …`` so the engine can say which types its parameters take
(``Gateway.parameter_types`` reads ``$n``). Placeholders inside string
literals, quoted identifiers, dollar-quoted strings and comments are text.
"""

from __future__ import annotations

import re

__all__ = ["Placeholders", "placeholders"]

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_DOLLAR_PARAM = re.compile(r"\$(\d+)")


class Placeholders:
    __slots__ = ("count", "numbered")

    def __init__(self, count: int, numbered: str) -> None:
        self.count = count        # the number of parameters: ``?`` counted, or the highest ``$n``
        self.numbered = numbered  # the statement with each ``?`` written as its ``$n``


def placeholders(sql: str) -> Placeholders:
    out: list[str] = []
    questions = highest = 0
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # a doubled quote is the quote itself
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i:j + 1])
            i = j + 1
            continue
        if c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
            continue
        if c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
            continue
        if c == "$":
            param = _DOLLAR_PARAM.match(sql, i)
            if param is not None:
                highest = max(highest, int(param.group(1)))
                out.append(param.group(0))
                i = param.end()
                continue
            tag = _DOLLAR_TAG.match(sql, i)
            if tag is not None:
                end = sql.find(tag.group(0), tag.end())
                j = n if end < 0 else end + len(tag.group(0))
                out.append(sql[i:j])
                i = j
                continue
        if c == "?":
            questions += 1
            out.append(f"${questions}")
            i += 1
            continue
        out.append(c)
        i += 1
    return Placeholders(max(questions, highest), "".join(out))
