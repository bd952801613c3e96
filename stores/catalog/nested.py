"""Nested column types (ARRAY, STRUCT, MAP): their type text, and their values as canonical JSON.

A nested value column is stored as JSON text whose scalars are in the
stored forms of ``schema.coerce_key`` (TIMESTAMP epoch ms, DATE days since
the epoch, booleans as true/false); a MAP is a JSON array of ``[key, value]``
pairs, so keys of any scalar type survive and order is kept. The declared
type travels with the store (``store.json``), so readers turn the text back
into typed values (Arrow LIST/STRUCT/MAP for DuckDB) without guessing:
nothing is lost between Spark and a query.

Type text is read in Spark's spelling (``array<bigint>``, ``struct<a:bigint>``,
``map<string,bigint>``), ksqlDB's (``ARRAY<BIGINT>``, ``STRUCT<a BIGINT>``)
and DuckDB's (``BIGINT[]``, ``STRUCT(a BIGINT)``, ``MAP(VARCHAR, BIGINT)``);
it is written in DuckDB's, which is what a query sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NestedType", "parse_nested", "is_nested_text", "encode_nested", "decode_nested", "NestedValueError"]


class NestedValueError(ValueError):
    """A value that does not fit its nested column type."""


@dataclass(frozen=True, slots=True)
class NestedType:
    """``kind`` ARRAY (``element``), STRUCT (``fields``: (name, type) pairs) or MAP (``key``, ``element``).

    Member types are a ``SqlType`` or another ``NestedType``. ``value`` is the
    DuckDB type text, so a NestedType can stand wherever a SqlType's
    ``.value`` is read (store.json, DESCRIBE).
    """

    kind: str
    element: Any = None
    fields: tuple[tuple[str, Any], ...] = ()
    key: Any = None

    @property
    def value(self) -> str:
        return self.render(lambda t: t.value)

    def render(self, scalar: Callable[[Any], str]) -> str:
        """The type text with ``scalar(t)`` naming each scalar member (DuckDB's names, PG's, ...)."""
        def name(t: Any) -> str:
            return t.render(scalar) if isinstance(t, NestedType) else scalar(t)

        if self.kind == "ARRAY":
            return f"{name(self.element)}[]"
        if self.kind == "MAP":
            return f"MAP({name(self.key)}, {name(self.element)})"
        return "STRUCT(" + ", ".join(f"{_quote(n)} {name(t)}" for n, t in self.fields) + ")"

    def __str__(self) -> str:
        return self.value


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


_TOKEN = re.compile(r'\s*(?:(\[\])|([<>(),:])|"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|([A-Za-z_][A-Za-z0-9_]*))')
_NESTED_START = re.compile(r"^\s*(ARRAY|LIST|STRUCT|ROW|MAP)\s*[<(]|\[\]\s*$", re.IGNORECASE)


def is_nested_text(text: str) -> bool:
    return bool(_NESTED_START.search(text))


def parse_nested(text: str, scalar: Callable[[str], Any]) -> NestedType:
    """Parse nested type text; ``scalar`` parses a scalar type name (raising ValueError for an unknown one)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read type {text!r} at {text[pos:]!r}")
        arr, punct, dq, bq, word = m.groups()
        if arr:
            tokens.append(("[]", "[]"))
        elif punct:
            tokens.append((punct, punct))
        elif dq is not None:
            tokens.append(("name", dq.replace('""', '"')))
        elif bq is not None:
            tokens.append(("name", bq.replace("``", "`")))
        else:
            tokens.append(("word", word.strip()))
        pos = m.end()
    p = _Parser(tokens, text, scalar)
    t = p.type()
    if p.i != len(tokens):
        raise ValueError(f"cannot read type {text!r}: unexpected {tokens[p.i][1]!r}")
    if not isinstance(t, NestedType):
        raise ValueError(f"{text!r} is not a nested type")
    return t


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str, scalar: Callable[[str], Any]) -> None:
        self.tokens, self.text, self.scalar, self.i = tokens, text, scalar, 0

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self, *kinds: str) -> str:
        if self.peek() not in kinds:
            got = self.tokens[self.i][1] if self.i < len(self.tokens) else "the end"
            raise ValueError(f"cannot read type {self.text!r}: expected {' or '.join(kinds)}, got {got!r}")
        tok = self.tokens[self.i][1]
        self.i += 1
        return tok

    def type(self) -> Any:
        word = self.take("word")
        head = word.upper()
        close = {"<": ">", "(": ")"}
        if head in ("ARRAY", "LIST", "STRUCT", "ROW", "MAP") and self.peek() in ("<", "("):
            end = close[self.take("<", "(")]
            if head in ("ARRAY", "LIST"):
                t: Any = NestedType("ARRAY", element=self.type())
            elif head == "MAP":
                k = self.type()
                if isinstance(k, NestedType):
                    raise ValueError(f"type {self.text!r}: a MAP key must be a scalar type")
                self.take(",")
                t = NestedType("MAP", key=k, element=self.type())
            else:
                fields = []
                while True:
                    name = self.take("word", "name")
                    if self.peek() == ":":
                        self.take(":")
                    fields.append((name, self.type()))
                    if self.peek() != ",":
                        break
                    self.take(",")
                if len({n for n, _ in fields}) != len(fields):
                    raise ValueError(f"type {self.text!r}: duplicate STRUCT field names")
                t = NestedType("STRUCT", fields=tuple(fields))
            self.take(end)
        else:
            while self.peek() == "word":  # TIMESTAMP WITH TIME ZONE
                word += " " + self.take("word")
            t = self.scalar(word)
            if getattr(t, "value", None) == "BLOB":
                raise ValueError(f"type {self.text!r}: BLOB values inside a nested column are not supported")
        while self.peek() == "[]":
            self.take("[]")
            t = NestedType("ARRAY", element=t)
        return t


# -- values --------------------------------------------------------------------------------------
def encode_nested(t: NestedType, value: Any, coerce: Callable[[Any, Any], Any]) -> str:
    """A Python value (lists, dicts/tuples/Rows for structs, dicts or pairs for maps) → canonical JSON text.

    ``coerce(scalar_type, v)`` is ``schema.coerce_key`` (canonical scalar forms).
    """
    return json.dumps(_enc(t, value, coerce), separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _enc(t: Any, v: Any, coerce: Callable[[Any, Any], Any]) -> Any:
    if v is None:
        return None
    if not isinstance(t, NestedType):
        out = coerce(t, v)
        return out
    if t.kind == "ARRAY":
        if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, (Sequence, set, frozenset)) and not hasattr(v, "tolist"):
            raise NestedValueError(f"{_short(v)} is not an array")
        items = v.tolist() if hasattr(v, "tolist") else v
        return [_enc(t.element, e, coerce) for e in items]
    if t.kind == "MAP":
        pairs = v.items() if isinstance(v, Mapping) else v
        out = []
        try:
            for k, e in pairs:
                if k is None:
                    raise NestedValueError("a MAP key is null")
                out.append([coerce(t.key, k), _enc(t.element, e, coerce)])
        except (TypeError, ValueError) as exc:
            if isinstance(exc, NestedValueError):
                raise
            raise NestedValueError(f"{_short(v)} is not a map ({exc})") from None
        return out
    if isinstance(v, Mapping) or hasattr(v, "asDict"):
        d = v.asDict() if hasattr(v, "asDict") else v
        extra = set(d) - {n for n, _ in t.fields}
        if extra:
            raise NestedValueError(f"struct fields {sorted(extra)} are not in {t.value}")
        return {n: _enc(ft, d.get(n), coerce) for n, ft in t.fields}
    if isinstance(v, (tuple, list)) and len(v) == len(t.fields):
        return {n: _enc(ft, e, coerce) for (n, ft), e in zip(t.fields, v)}
    raise NestedValueError(f"{_short(v)} is not a struct of {len(t.fields)} field(s)")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def decode_nested(t: NestedType, text: str | None) -> Any:
    """Stored JSON text → the Python value readers get: lists, dicts (STRUCT by field, MAP by key)."""
    if text is None:
        return None
    return _dec(t, json.loads(text))


def _dec(t: Any, v: Any) -> Any:
    if v is None or not isinstance(t, NestedType):
        return v
    if t.kind == "ARRAY":
        return [_dec(t.element, e) for e in v]
    if t.kind == "MAP":
        return {k: _dec(t.element, e) for k, e in v}
    return {n: _dec(ft, v.get(n)) for n, ft in t.fields}
