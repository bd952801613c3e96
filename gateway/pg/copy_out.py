"""``COPY (query) TO STDOUT``: a query's rows in PostgreSQL's COPY formats, the way clients export.

psql's ``\\copy (SELECT …) TO 'file' CSV HEADER``, psycopg's ``cursor.copy()`` and asyncpg's
``copy_from_query`` all send ``COPY … TO STDOUT`` and read CopyData messages. Here the query runs through the
engine like any SELECT (same limits, read-only checks, streaming) and its rows are written as PostgreSQL writes
them: text (tab-separated, ``\\N`` for NULL, backslash escapes), CSV (RFC 4180 quoting, HEADER, DELIMITER, NULL,
QUOTE, ESCAPE, FORCE_QUOTE) or binary (PGCOPY, each value in its binary send format). ``COPY store TO
STDOUT`` copies the whole store. Every other COPY is refused with what to do instead: ``FROM`` writes, and
``TO 'file'`` / ``TO PROGRAM`` would have the server write files or run programs.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.errors import NotSupported, SqlError
from .sqltext import lex

__all__ = ["CopyOut", "parse_copy", "copy_header", "copy_rows", "copy_trailer", "forced_columns"]

_BINARY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)


@dataclass(frozen=True)
class CopyOut:
    query: str                       # the SELECT whose rows are copied
    format: str = "text"             # text | csv | binary
    delimiter: str = "\t"
    null: str = "\\N"
    header: bool = False
    quote: str = '"'
    escape: str = '"'
    force_quote: tuple[str, ...] | None = ()   # None: every column (FORCE_QUOTE *)


_STRING = re.compile(r"\s*(?:AS\s+)?(?:[Ee]'(?P<e>(?:[^'\\]|''|\\.)*)'|'(?P<s>(?:[^']|'')*)')\s*", re.I | re.S)
_E_ESCAPE = re.compile(r"\\(?:([bfnrtv\\'])|x([0-9A-Fa-f]{1,2})|([0-7]{1,3}))")
_E_CHARS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'"}


def _string_value(m: re.Match[str]) -> str:
    """A quoted option value; an E'…' string with its backslash escapes read (``DELIMITER E'\\t'`` is a tab)."""
    if m.group("e") is None:
        return m.group("s").replace("''", "'")
    text = m.group("e").replace("''", "'")
    return _E_ESCAPE.sub(lambda e: _E_CHARS[e.group(1)] if e.group(1) else chr(int(e.group(2) or e.group(3),
                                                                                   16 if e.group(2) else 8)), text)


def parse_copy(sql: str) -> CopyOut:
    """The COPY statement ``sql`` (its comments already blanked by sqltext.classify)."""
    text = sql.strip().rstrip(";").strip()
    body = text[4:].lstrip()  # after COPY
    if body.startswith("("):
        end = _closing_paren(body)
        if end is None:
            raise SqlError("COPY: the query in parentheses is not closed", code="SQL_SYNTAX_ERROR")
        query, rest = body[1:end].strip(), body[end + 1:]
        if not query:
            raise SqlError("COPY: the parentheses hold no query", code="SQL_SYNTAX_ERROR")
    else:
        m = re.match(r'((?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)(?:\s*\.\s*(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*))*)\s*', body)
        if m is None:
            raise SqlError("COPY: expected a store name or a query in parentheses after COPY",
                           code="SQL_SYNTAX_ERROR")
        table, rest = m.group(1), body[m.end():]
        columns = "*"
        if rest.startswith("("):
            end = _closing_paren(rest)
            if end is None:
                raise SqlError("COPY: the column list is not closed", code="SQL_SYNTAX_ERROR")
            columns, rest = rest[1:end].strip() or "*", rest[end + 1:]
        query = f"SELECT {columns} FROM {table}"
    m = re.match(r"\s*(TO|FROM)\s+(STDOUT|STDIN|PROGRAM\b|'|E')?", rest, re.I)
    if m is None:
        raise SqlError("COPY: expected TO STDOUT after the query", code="SQL_SYNTAX_ERROR")
    direction, target = m.group(1).upper(), (m.group(2) or "").upper()
    if direction == "FROM":
        raise SqlError("COPY … FROM writes rows: iqgate is a read-only SQL gateway (COPY … TO STDOUT exports)",
                       code="READ_ONLY")
    if target != "STDOUT":
        raise NotSupported("COPY … TO a file or a program would have the server write or run it: use COPY … TO "
                           "STDOUT (psql's \\copy writes the client's file)")
    return _options(query, rest[m.end():])


def _closing_paren(text: str) -> int | None:
    depth = 0
    for kind, s, e in lex(text):
        if kind != "code":
            continue
        for i in range(s, e):
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:
                    return i
    return None


def _options(query: str, text: str) -> CopyOut:
    opts: dict[str, Any] = {}
    text = text.strip()
    m = re.match(r"(?:WITH\s*)?\(", text, re.I)
    if m is not None:  # PostgreSQL 9+: ( option [value], … )
        if not text.endswith(")"):
            raise SqlError("COPY: the option list is not closed", code="SQL_SYNTAX_ERROR")
        inner = text[m.end():-1]
        for piece in _split(inner):
            words = piece.strip().split(None, 1)
            if not words:
                continue
            _option(opts, words[0].lower(), words[1].strip() if len(words) > 1 else None)
    else:  # the old syntax: WITH CSV HEADER DELIMITER ',' NULL '' …
        rest = re.sub(r"^WITH\b", "", text, flags=re.I).strip()
        while rest:
            m = re.match(r"(BINARY|CSV|HEADER|DELIMITER|NULL|QUOTE|ESCAPE|FORCE\s+QUOTE|ENCODING)\b\s*", rest, re.I)
            if m is None:
                raise SqlError(f"COPY: unexpected {rest.split()[0]!r} in the options", code="SQL_SYNTAX_ERROR")
            word, rest = " ".join(m.group(1).lower().split()), rest[m.end():]
            if word in ("binary", "csv"):
                _option(opts, "format", word)
            elif word == "header":
                _option(opts, "header", None)
            elif word == "force quote":
                cols = re.match(r"(\*|[\w\"]+(?:\s*,\s*[\w\"]+)*)\s*", rest)
                if cols is None:
                    raise SqlError("COPY: FORCE QUOTE needs * or column names", code="SQL_SYNTAX_ERROR")
                _option(opts, "force_quote", cols.group(1))
                rest = rest[cols.end():]
            else:
                s = _STRING.match(rest)
                if s is None:
                    raise SqlError(f"COPY: {word.upper()} needs a quoted value", code="SQL_SYNTAX_ERROR")
                _option(opts, word, s.group(0).strip().removeprefix("AS").removeprefix("as").strip())
                rest = rest[s.end():]
    fmt = opts.get("format", "text")
    csv = fmt == "csv"
    copy = CopyOut(query=query, format=fmt, delimiter=opts.get("delimiter", "," if csv else "\t"),
                   null=opts.get("null", "" if csv else "\\N"), header=opts.get("header", False),
                   quote=opts.get("quote", '"'), escape=opts.get("escape", opts.get("quote", '"')),
                   force_quote=opts.get("force_quote", ()))
    _check(copy, opts)
    return copy


def _split(text: str) -> list[str]:
    """The options at top level: commas inside quotes or a column list's parentheses do not split."""
    pieces, start, quoted, escapes, depth = [], 0, False, False, 0
    i = 0
    while i < len(text):
        c = text[i]
        if quoted and escapes and c == "\\":
            i += 2  # E'\'' : an escaped quote does not end the string
            continue
        if c == "'":
            escapes = not quoted and i > 0 and text[i - 1] in "Ee" and (i < 2 or not text[i - 2].isalnum())
            quoted = not quoted
        elif not quoted and c in "()":
            depth += 1 if c == "(" else -1
        elif c == "," and not quoted and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return pieces


_BOOL = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}


def _option(opts: dict[str, Any], name: str, value: str | None) -> None:
    if name in opts:
        raise SqlError(f"COPY: conflicting or redundant option {name}", code="SQL_SYNTAX_ERROR")
    literal = None
    if value is not None:
        s = _STRING.fullmatch(value)
        literal = _string_value(s) if s is not None else value.strip().strip('"')
    if name == "format":
        if (literal or "").lower() not in ("text", "csv", "binary"):
            raise SqlError(f"COPY format {literal!r} not recognized (text, csv or binary)", code="SQL_SYNTAX_ERROR")
        opts[name] = literal.lower()  # type: ignore[union-attr]
    elif name == "header":
        flag = _BOOL.get((literal or "true").lower())
        if flag is None:
            raise SqlError(f"COPY: header takes a Boolean, got {literal!r}", code="SQL_SYNTAX_ERROR")
        opts[name] = flag
    elif name in ("delimiter", "null", "quote", "escape"):
        if literal is None:
            raise SqlError(f"COPY: {name} needs a value", code="SQL_SYNTAX_ERROR")
        opts[name] = literal
    elif name == "force_quote":
        columns = (literal or "").strip()
        columns = columns[1:-1] if columns.startswith("(") and columns.endswith(")") else columns
        opts[name] = None if columns == "*" else tuple(c.strip().strip('"') for c in columns.split(","))
    elif name == "encoding":
        if (literal or "").upper().replace("-", "") not in ("UTF8", "UNICODE"):
            raise NotSupported(f"COPY encoding {literal!r} is not supported: iqgate writes UTF8 only")
        opts[name] = "UTF8"
    else:
        raise NotSupported(f"COPY option {name!r} is not supported (format, header, delimiter, null, quote, escape, "
                           "force_quote, encoding)")


def _check(copy: CopyOut, opts: dict[str, Any]) -> None:
    """PostgreSQL's own checks of the option combination (its messages, shortened)."""
    csv = copy.format == "csv"
    if copy.format == "binary" and set(opts) - {"format"}:
        raise SqlError("COPY: binary format takes no other option", code="SQL_SYNTAX_ERROR")
    if not csv and set(opts) & {"quote", "escape", "force_quote"}:
        raise SqlError("COPY: quote, escape and force_quote are available only in CSV mode", code="SQL_SYNTAX_ERROR")
    if len(copy.delimiter.encode()) != 1:
        raise SqlError("COPY delimiter must be a single one-byte character", code="SQL_SYNTAX_ERROR")
    if csv and (len(copy.quote.encode()) != 1 or len(copy.escape.encode()) != 1):
        raise SqlError("COPY quote and escape must be single one-byte characters", code="SQL_SYNTAX_ERROR")
    if copy.delimiter in "\r\n" or (not csv and copy.delimiter in "\\.abcdefghijklmnopqrstuvwxyz0123456789"):
        raise SqlError(f"COPY delimiter cannot be {copy.delimiter!r}", code="SQL_SYNTAX_ERROR")
    if csv and copy.delimiter == copy.quote:
        raise SqlError("COPY delimiter and quote must be different", code="SQL_SYNTAX_ERROR")
    if copy.delimiter in copy.null or "\r" in copy.null or "\n" in copy.null:
        raise SqlError("COPY null representation cannot use the delimiter or a newline", code="SQL_SYNTAX_ERROR")


def copy_header(copy: CopyOut, names: Sequence[str]) -> bytes | None:
    """What goes before the rows: the binary signature, or the header line (column names, quoted as values)."""
    if copy.format == "binary":
        return _BINARY_SIGNATURE
    if not copy.header:
        return None
    return copy_row(copy, [n.encode() for n in names], [False] * len(names))


def copy_trailer(copy: CopyOut) -> bytes | None:
    """What goes after the rows: binary COPY's end marker (a tuple of -1 fields)."""
    return struct.pack("!h", -1) if copy.format == "binary" else None


def copy_row(copy: CopyOut, values: Sequence[bytes | None], forced: Sequence[bool]) -> bytes:
    """One row: ``values`` are each value's text (text and CSV) or binary send form (binary), None for NULL."""
    if copy.format == "binary":
        out = [struct.pack("!h", len(values))]
        for v in values:
            out.append(b"\xff\xff\xff\xff" if v is None else struct.pack("!i", len(v)) + v)
        return b"".join(out)
    if copy.format == "csv":
        single = len(values) == 1
        fields = [copy.null if v is None else _csv_field(copy, v.decode("utf-8"), f, single)
                  for v, f in zip(values, forced)]
    else:
        fields = [copy.null if v is None else _text_field(v.decode("utf-8"), copy.delimiter) for v in values]
    return (copy.delimiter.join(fields) + "\n").encode("utf-8")


_TEXT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _text_field(value: str, delimiter: str) -> str:
    out = value
    if any(c in value for c in "\\\n\r\t\b\f\v" + delimiter):
        out = "".join(_TEXT_ESCAPES.get(c, "\\" + c if c == delimiter else c) for c in value)
    return out


def _csv_field(copy: CopyOut, value: str, forced: bool, single: bool) -> str:
    """PostgreSQL's CopyAttributeOutCSV: quoted when forced, equal to the NULL text, holding the delimiter, the
    quote or a line break, or ``\\.`` alone on its line (a one-column row: COPY FROM's end-of-data marker)."""
    needs = (forced or value == copy.null or any(c in value for c in (copy.delimiter, copy.quote, "\r", "\n"))
             or (single and value == "\\."))
    if not needs:
        return value
    if copy.escape != copy.quote:
        value = value.replace(copy.escape, copy.escape * 2)
    return copy.quote + value.replace(copy.quote, copy.escape + copy.quote) + copy.quote


def forced_columns(copy: CopyOut, names: Sequence[str]) -> list[bool]:
    """Which columns FORCE_QUOTE quotes (CSV only; NULLs are never quoted)."""
    if copy.format != "csv":
        return [False] * len(names)
    if copy.force_quote is None:
        return [True] * len(names)
    wanted = {c.lower() for c in copy.force_quote}
    unknown = wanted - {n.lower() for n in names}
    if unknown:
        raise SqlError(f"COPY: FORCE_QUOTE column {sorted(unknown)[0]!r} is not in the query's columns",
                       code="UNKNOWN_COLUMN")
    return [n.lower() in wanted for n in names]


def copy_rows(copy: CopyOut, rows: Iterable[Sequence[Any]], encoders: Sequence[Callable[[Any], bytes]],
              forced: Sequence[bool]) -> Iterator[bytes]:
    """CopyData payloads, one per row (each value through its column's text or binary encoder)."""
    for row in rows:
        yield copy_row(copy, [None if v is None else enc(v) for enc, v in zip(encoders, row)], forced)
