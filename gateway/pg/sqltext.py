"""Statement text as PostgreSQL clients send it: several per Query message, ``$n`` parameters, session commands.

The lexer knows PostgreSQL's quoting (``'…'`` with ``''``, ``E'…'`` with
backslashes, ``"…"``, ``$tag$…$tag$``, ``--`` and nested ``/* */``
comments), so a ``;`` or ``$1`` inside a string or comment is never split on
or counted. ``$n`` parameters go to the engine as they are (the planner takes them). Session commands (transactions, SET/SHOW/RESET of client
settings, DISCARD, DEALLOCATE) are recognised here and answered by the
session; everything else goes to the engine, which refuses writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .wire import ProtocolError

__all__ = ["lex", "split_statements", "highest_parameter", "Command", "classify", "parse_set_value",
           "quote_label_keywords"]


def lex(text: str) -> list[tuple[str, int, int]]:
    """Tokens (kind, start, end): 'code' runs, 'string', 'ident', 'comment', ';', 'param'."""
    out: list[tuple[str, int, int]] = []
    i, n = 0, len(text)
    start = 0
    while i < n:
        c = text[i]
        if c == "'" or (c in "eE" and i + 1 < n and text[i + 1] == "'" and (i == 0 or not text[i - 1].isalnum())):
            escapes = c != "'"
            j = i + (2 if escapes else 1)
            while j < n:
                if escapes and text[j] == "\\":
                    j += 2
                    continue
                if text[j] == "'":
                    if j + 1 < n and text[j + 1] == "'":
                        j += 2
                        continue
                    break
                j += 1
            out += [("code", start, i), ("string", i, min(j + 1, n))]
            i = start = min(j + 1, n)
        elif c == '"':
            j = text.find('"', i + 1)
            while j != -1 and j + 1 < n and text[j + 1] == '"':
                j = text.find('"', j + 2)
            end = n if j == -1 else j + 1
            out += [("code", start, i), ("ident", i, end)]
            i = start = end
        elif c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            end = n if j == -1 else j + 1
            out += [("code", start, i), ("comment", i, end)]
            i = start = end
        elif c == "/" and text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out += [("code", start, i), ("comment", i, j)]
            i = start = j
        elif c == "$":
            m = re.match(r"\$(\d+)", text[i:])
            tag = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", text[i:])
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                out += [("code", start, i), ("param", i, i + m.end())]
                i = start = i + m.end()
            elif tag and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                close = text.find(tag.group(0), i + tag.end())
                end = n if close == -1 else close + tag.end()
                out += [("code", start, i), ("string", i, end)]
                i = start = end
            else:
                i += 1
        elif c == ";":
            out += [("code", start, i), (";", i, i + 1)]
            i = start = i + 1
        else:
            i += 1
    out.append(("code", start, n))
    return [t for t in out if t[1] < t[2]]


def split_statements(text: str) -> list[str]:
    """The statements of a simple Query, in order; whitespace/comment-only pieces are dropped."""
    pieces, start = [], 0
    tokens = lex(text)
    for kind, s, _e in tokens:
        if kind == ";":
            pieces.append(text[start:s])
            start = s + 1
    pieces.append(text[start:])
    return [p for p in pieces if _has_code(p)]


def _has_code(piece: str) -> bool:
    return any(k != "comment" and piece[s:e].strip() for k, s, e in lex(piece))


def highest_parameter(sql: str) -> int:
    """The highest ``$n`` in the statement (0: none): how many parameters a Bind must supply at least."""
    top = 0
    for kind, s, e in lex(sql):
        if kind == "param":
            n = int(sql[s + 1:e])
            if n < 1 or n > 65535:
                raise ProtocolError(f"there is no parameter ${n}", "42P02")
            top = max(top, n)
    return top


def _code_only(sql: str) -> str:
    """The statement with comments removed (strings kept): what command words are read from."""
    return " ".join(sql[s:e] for k, s, e in lex(sql) if k != "comment").strip()


@dataclass(frozen=True)
class Command:
    """A session command: ``kind`` is begin/commit/rollback/noop/set/reset/show/settings/copy/discard/deallocate/
    declare/fetch/close_cursor/unsupported."""

    kind: str
    name: str = ""
    value: str | None = None
    tag: str = ""
    #: a SELECT of settings calls (kind ``settings``): (function, column name, arguments) each, an argument
    #: ("lit", text) or ("param", n)
    calls: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()

    def parameters(self) -> int:
        """The highest ``$n`` its arguments name."""
        args = [a for _fn, _name, call_args in self.calls for a in call_args]
        return max((int(v) for k, v in args if k == "param"), default=0)


_SET = re.compile(r"^SET\s+(?:(?:SESSION|LOCAL)\s+)?(?P<name>[A-Za-z_][\w.]*|\"[^\"]+\")\s*(?:=|\s+TO\s+)\s*(?P<value>.*)$",
                  re.I | re.S)
_WORDS = re.compile(r"[A-Za-z_]+")


_SETTINGS_CALL = re.compile(r"^(?:pg_catalog\s*\.\s*)?(?P<fn>set_config|current_setting)\s*\((?P<args>.*)\)"
                            r"(?:\s+(?:AS\s+)?(?P<alias>\w+|\"[^\"]+\"))?$", re.I | re.S)
_SETTINGS_ARGS = {"set_config": (3,), "current_setting": (1, 2)}


def _settings_select(text: str) -> Command | None:
    """``SELECT set_config('name', 'value', false)`` (BI tools' way to SET in a query), with literals or ``$n``,
    beside other ``set_config``/``current_setting`` calls: asyncpg turns JIT off with ``SELECT
    current_setting('jit') AS cur, set_config('jit', 'off', false) AS new``. Anything else is not a session
    command (the engine answers ``current_setting`` alone, and refuses ``set_config`` inside expressions)."""
    calls = []
    for item in _split_args(text[len("SELECT"):]):
        m = _SETTINGS_CALL.match(item.strip())
        if m is None:
            return None
        fn = m.group("fn").lower()
        args: list[tuple[str, str]] = []
        for piece in _split_args(m.group("args")):
            arg = re.sub(r"::\s*[\w ]+$", "", piece.strip()).strip()  # '…'::text, $1::text
            if re.fullmatch(r"\$\d+", arg):
                args.append(("param", arg[1:]))
            elif re.fullmatch(r"'(?:[^']|'')*'", arg, re.S):
                args.append(("lit", arg[1:-1].replace("''", "'")))
            elif arg.lower() in ("true", "false"):
                args.append(("lit", arg.lower()))
            else:
                return None  # an expression
        if len(args) not in _SETTINGS_ARGS[fn]:
            return None
        calls.append((fn, (m.group("alias") or fn).strip('"'), tuple(args)))
    if not any(fn == "set_config" for fn, _name, _args in calls):
        return None
    return Command("settings", name=calls[0][1], tag="SELECT 1", calls=tuple(calls))


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated pieces (commas in strings or parentheses do not split)."""
    pieces, start, depth = [], 0, 0
    for kind, s, _e in lex(text):
        if kind == "code":
            for i in range(s, _e):
                c = text[i]
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                elif c == "," and depth == 0:
                    pieces.append(text[start:i])
                    start = i + 1
    pieces.append(text[start:])
    return pieces


def classify(sql: str) -> Command | None:
    """The session command ``sql`` is, or None for a statement the engine runs."""
    text = _code_only(sql).rstrip(";").strip()
    words = [w.upper() for w in _WORDS.findall(text[:80])]
    if not words:
        return None
    first = words[0]
    if first == "SELECT" and ("SET_CONFIG" in words[1:3] or "CURRENT_SETTING" in words[1:3]):
        return _settings_select(text)
    if first in ("BEGIN", "START") and (first == "BEGIN" or words[1:2] == ["TRANSACTION"]):
        return Command("begin", tag="BEGIN")
    if first in ("COMMIT", "END"):
        return Command("commit", tag="COMMIT")
    if first in ("ROLLBACK", "ABORT"):
        if "TO" in words[1:3]:
            return Command("noop", tag="ROLLBACK")
        return Command("rollback", tag="ROLLBACK")
    if first in ("SAVEPOINT", "RELEASE"):
        return Command("noop", tag=first)
    if first == "CLOSE":  # a live cursor's end (CLOSE ALL: every one); other cursors do not exist here
        rest = text.split(None, 1)[1].strip() if len(text.split()) > 1 else ""
        return Command("close_cursor", name=rest.strip('"') if rest.startswith('"') else rest.lower(),
                       tag="CLOSE CURSOR" if rest.upper() != "ALL" else "CLOSE CURSOR ALL")
    if first in ("LISTEN", "UNLISTEN"):
        return Command("noop", tag=first)
    if first == "DECLARE" or first == "FETCH":  # live cursors (gateway/pg/live.py parses the rest)
        return Command(first.lower(), value=text, tag=first)
    if first == "DISCARD":
        return Command("discard", tag="DISCARD " + (words[1] if len(words) > 1 else "ALL"))
    if first == "DEALLOCATE":
        rest = [w for w in text.split()[1:] if w.upper() != "PREPARE"]
        return Command("deallocate", name=rest[0].strip('"') if rest else "", tag="DEALLOCATE")
    if first == "COPY":  # the statement as written (comments out): copy_out parses it
        return Command("copy", value="".join(" " if k == "comment" else sql[s:e] for k, s, e in lex(sql)).strip(),
                       tag="COPY")
    if first in ("PREPARE", "EXECUTE", "MOVE", "LOCK", "VACUUM", "CHECKPOINT", "NOTIFY"):
        return Command("unsupported", name=first, tag=first)
    if first == "SET":
        if words[1:3] in (["SESSION", "CHARACTERISTICS"], ["TRANSACTION", "ISOLATION"], ["TRANSACTION", "READ"]) \
                or words[1:2] == ["TRANSACTION"]:
            return Command("noop", tag="SET")
        if words[1:3] == ["TIME", "ZONE"] or words[2:4] == ["TIME", "ZONE"]:
            value = re.split(r"(?i)\bZONE\b", text, maxsplit=1)[1].strip()
            return Command("set", name="timezone", value=parse_set_value(value), tag="SET")
        if words[1:2] == ["NAMES"]:
            return Command("set", name="client_encoding", value=parse_set_value(text.split(None, 2)[2]), tag="SET")
        m = _SET.match(text)
        if m is None:
            return Command("unsupported", name="SET", tag="SET")
        return Command("set", name=m.group("name").strip('"').lower(), value=parse_set_value(m.group("value")),
                       tag="SET")
    if first == "RESET":
        name = text.split(None, 1)[1].strip().strip('"').lower() if len(text.split()) > 1 else ""
        return Command("reset", name=name, tag="RESET")
    if first == "SHOW" and words[1:2] != ["TABLES"] and words[1:3] != ["ALL", "TABLES"]:
        rest = text.split(None, 1)[1].strip() if len(text.split()) > 1 else ""
        return Command("show", name=rest.strip('"').lower(), tag="SHOW")
    return None


def parse_set_value(text: str) -> str | None:
    """``'a b'``, ``E'x'``, ``ident``, ``"ident"``, numbers, ``DEFAULT`` (None), and lists of them joined with ', '."""
    text = text.strip().rstrip(";").strip()
    if text.upper() in ("DEFAULT", "LOCAL"):
        return None
    items, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace() or c == ",":
            i += 1
            continue
        if c == "'" or (c in "eE" and text[i + 1:i + 2] == "'"):
            j = i + (2 if c != "'" else 1)
            buf = []
            while j < len(text):
                if text[j] == "'" and text[j + 1:j + 2] == "'":
                    buf.append("'")
                    j += 2
                elif text[j] == "'":
                    break
                else:
                    buf.append(text[j])
                    j += 1
            items.append("".join(buf))
            i = j + 1
        elif c == '"':
            j = text.find('"', i + 1)
            j = len(text) if j == -1 else j
            items.append(text[i + 1:j])
            i = j + 1
        else:
            j = i
            while j < len(text) and text[j] not in ", \t\n":
                j += 1
            items.append(text[i:j])
            i = j
    return ", ".join(items)


#: PostgreSQL takes any keyword as a column label after AS (``SELECT x AS select``); these are the ones the
#: SQL parser refuses there, so they are quoted (``AS "select"``) before the engine sees the statement.
_LABEL_KEYWORDS = re.compile(r"(?i)\bAS(\s+)(select|not)\b(?!\s+materialized)")


def quote_label_keywords(sql: str) -> str:
    """``… AS select`` → ``… AS "select"`` outside strings and comments, in queries only (BI tools write these)."""
    code = _code_only(sql)
    if not re.match(r"(?i)\s*(select|with|explain|values|\()", code) or not _LABEL_KEYWORDS.search(code):
        return sql
    out, last = [], 0
    for kind, s, e in lex(sql):
        if kind == "code":
            out.append(sql[last:s])
            out.append(_LABEL_KEYWORDS.sub(lambda m: f'AS{m.group(1)}"{m.group(2).lower()}"', sql[s:e]))
            last = e
    out.append(sql[last:])
    return "".join(out)
