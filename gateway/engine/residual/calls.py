"""Scalar functions and CASE over a row, exactly as DuckDB computes them: the evaluator's ``Func`` and ``Case``.

Why: a point lookup with a function of its row (``regexp_replace(key, 'c',
'k')``, ``upper(name)``, ``coalesce(l.item, 'none')``) cost DuckDB's whole
fixed price per statement, 0.5-1 ms with DuckDB 2.0.1, for one row (issue 50
item 2). Each call here takes only the argument types whose DuckDB result it
reproduces, and only the values it is sure of; the rest is ``Unsupported``
(at compile time: DuckDB answers that statement with those parameter types)
or ``Fallback`` (at run time: DuckDB answers this once):

- ``upper``/``lower`` of ASCII text (DuckDB's Unicode case mapping is not
  Python's: ``upper('ß')`` is ``ẞ`` there, ``SS`` here);
- ``length`` (code points, as DuckDB counts them), ``trim``/``ltrim``/``rtrim``
  (spaces only, as DuckDB's one-argument forms), ``replace`` (an empty search
  string leaves the text as it is), ``starts_with``, ``contains``;
- ``regexp_replace`` (first match, or every one with ``'g'``) of a pattern
  without a regular-expression metacharacter and a replacement without a
  backslash: then RE2's match is the text's first occurrence and the
  replacement is literal; a pattern or replacement it cannot be sure of is
  checked before any NULL, since DuckDB rejects an invalid constant pattern
  whatever the row;
- ``concat`` (NULLs skipped; text, integers and booleans as DuckDB casts them
  to VARCHAR) and ``||`` (NULL if either side is);
- ``coalesce``, ``nullif``, ``abs`` (its overflow at the type's minimum is
  DuckDB's error), ``CASE`` (only the taken branch is evaluated, as DuckDB's
  executor does), over the types ``values.common`` merges exactly.

An integer a ``coalesce``/``nullif``/``CASE`` gives is marked INTEGER-kinded
whatever its DuckDB type: arithmetic on it (whose overflow depends on that
type) is then DuckDB's. A call of constants only is left to DuckDB, which
folds it while optimizing. The property test
``tests/gateway/test_residual_calls.py`` compares every call with DuckDB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from planner.residual_program import Case, Func

from .values import Fallback, Node, Unsupported, common

__all__ = ["compile_call", "CALLS"]

_META = frozenset(".^$*+?()[]{}|\\")  # RE2's metacharacters: a pattern without them matches itself
_BACKSLASH = frozenset("\\")  # what a replacement's rewrite reads specially (a group number, a backslash)
_TEXT_OF: dict[str, Callable[[Any], str]] = {"S": lambda v: v, "I": str, "I32": str,
                                             "B": lambda v: "true" if v else "false"}


class Compiler(Protocol):
    """What a call compiles its arguments with (``evaluator.Compiled``); ``_extras`` run once per evaluation
    with its parameters, before any row."""

    _extras: list[Callable[[tuple[Any, ...]], Any]]

    def _expr(self, node: Any, sig: tuple[str, ...]) -> Node: ...

    def _predicate(self, node: Any, sig: tuple[str, ...]) -> Node: ...


def compile_call(compiler: Compiler, node: Func | Case, sig: tuple[str, ...]) -> Node:
    """The compiled call (raises ``Unsupported`` for one DuckDB must make)."""
    if isinstance(node, Case):
        return _case(compiler, node, sig)
    build = CALLS.get(node.name)
    if build is None:
        raise Unsupported
    args = [compiler._expr(a, sig) for a in node.args]
    if not any(a.has_col for a in args):
        raise Unsupported  # constants only: DuckDB folds them (and raises their errors) while optimizing
    if node.name.startswith("regexp_replace"):
        for arg, special in zip(args[1:], (_META, _BACKSLASH)):
            if not arg.has_col:  # DuckDB compiles a constant pattern when it binds: an error whatever the rows
                f = arg.fn
                compiler._extras.append(lambda p, f=f, special=special: _literal(f((), p), special))  # type: ignore[misc]
    return build(args)


def _literal(text: Any, special: frozenset[str]) -> None:
    """A pattern or replacement RE2 reads as the text itself (none of its ``special`` characters), or ``Fallback``."""
    if text is not None and not special.isdisjoint(text):
        raise Fallback


def _need(args: list[Node], n: int, kinds: frozenset[str] = frozenset({"S"})) -> None:
    if len(args) != n or any(a.kind not in kinds for a in args):
        raise Unsupported


def _text(f: Callable[[str], Any], kind: str, ascii_only: bool = False) -> Callable[[list[Node]], Node]:
    """A function of one VARCHAR (NULL gives NULL)."""
    def build(args: list[Node]) -> Node:
        _need(args, 1)
        g = args[0].fn

        def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
            v = g(r, p)
            if v is None:
                return None
            if ascii_only and not v.isascii():
                raise Fallback  # DuckDB's Unicode case mapping
            return f(v)
        return Node(fn, kind, True)
    return build


def _two_texts(f: Callable[[str, str], Any], kind: str) -> Callable[[list[Node]], Node]:
    def build(args: list[Node]) -> Node:
        _need(args, 2)
        fa, fb = args[0].fn, args[1].fn

        def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
            a, b = fa(r, p), fb(r, p)
            return None if a is None or b is None else f(a, b)
        return Node(fn, kind, True)
    return build


def _regexp(every: bool) -> Callable[[list[Node]], Node]:
    def build(args: list[Node]) -> Node:
        _need(args, 3)
        fs, fp, fr = (a.fn for a in args)

        def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
            pattern, replacement = fp(r, p), fr(r, p)
            _literal(pattern, _META)  # RE2's syntax and rewrite rules (or its error for an invalid pattern)
            _literal(replacement, _BACKSLASH)
            s = fs(r, p)
            if s is None or pattern is None or replacement is None:
                return None
            return s.replace(pattern, replacement) if every else s.replace(pattern, replacement, 1)
        return Node(fn, "S", True)
    return build


def _replace(args: list[Node]) -> Node:
    _need(args, 3)
    fs, fa, fb = (a.fn for a in args)

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        s, a, b = fs(r, p), fa(r, p), fb(r, p)
        if s is None or a is None or b is None:
            return None
        return s if a == "" else s.replace(a, b)
    return Node(fn, "S", True)


def _concat(args: list[Node]) -> Node:
    if any(a.kind not in _TEXT_OF and a.kind != "NULL" for a in args):
        raise Unsupported  # a DOUBLE's or DECIMAL's text is DuckDB's formatting
    parts = [(a.fn, _TEXT_OF[a.kind]) for a in args if a.kind != "NULL"]

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        return "".join(text(v) for f, text in parts if (v := f(r, p)) is not None)
    return Node(fn, "S", True)


def _dpipe(args: list[Node]) -> Node:
    if len(args) != 2 or any(a.kind not in _TEXT_OF for a in args) or all(a.kind != "S" for a in args):
        raise Unsupported  # ``||`` of lists, blobs, NULL literals: DuckDB's binder
    (fa, ta), (fb, tb) = ((a.fn, _TEXT_OF[a.kind]) for a in args)

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        a, b = fa(r, p), fb(r, p)
        return None if a is None or b is None else ta(a) + tb(b)
    return Node(fn, "S", True)


def _merged_kind(kind: str) -> str:
    """The kind of an integer COALESCE/NULLIF/CASE gives: INTEGER-kinded (its DuckDB type is INTEGER or BIGINT
    by its arguments' and literals' types: arithmetic on it is left to DuckDB)."""
    return "I32" if kind == "I" else kind


def _coalesce(args: list[Node]) -> Node:
    kind, nodes = common(args)
    if kind == "NULL":
        raise Unsupported
    fns = [n.fn for n in nodes if n.kind != "NULL"]

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        for f in fns:
            v = f(r, p)
            if v is not None:
                return v
        return None
    return Node(fn, _merged_kind(kind), True)


def _nullif(args: list[Node]) -> Node:
    if len(args) != 2:
        raise Unsupported
    a, b = args
    ints = {"I", "I32"}
    if not ((a.kind in ints and b.kind in ints) or (a.kind == b.kind and a.kind in ("D", "S", "B"))):
        raise Unsupported  # DuckDB casts both sides to a common type first
    fa, fb = a.fn, b.fn

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        x, y = fa(r, p), fb(r, p)  # both, as DuckDB evaluates them (an error in either is its)
        return x if x is None or y is None or x != y else None
    return Node(fn, _merged_kind(a.kind), True)


def _abs(args: list[Node]) -> Node:
    if len(args) != 1 or args[0].kind not in ("I", "I32", "D"):
        raise Unsupported
    f, kind = args[0].fn, args[0].kind
    # an INTEGER-kinded value may be a BIGINT (_merged_kind): at or below INTEGER's minimum, DuckDB decides
    lowest = {"I": -(2**63), "I32": -(2**31)}.get(kind)

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        v = f(r, p)
        if v is None:
            return None
        if lowest is not None and v <= lowest:
            raise Fallback  # DuckDB: "Overflow on abs(…)"
        return abs(v)
    return Node(fn, kind, True)


def _case(compiler: Compiler, node: Case, sig: tuple[str, ...]) -> Node:
    conds = [compiler._predicate(c, sig) for c, _ in node.whens]
    values = [compiler._expr(v, sig) for _, v in node.whens] + [compiler._expr(node.default, sig)]
    if not any(n.has_col for n in conds + values):
        raise Unsupported
    kind, values = common(values)
    if kind == "NULL":
        raise Unsupported  # DuckDB's type for it is its own "NULL"
    branches = [(c.fn, v.fn) for c, v in zip(conds, values)]
    default = values[-1].fn

    def fn(r: tuple[Any, ...], p: tuple[Any, ...]) -> Any:
        for cond, value in branches:
            if cond(r, p) is True:
                return value(r, p)
        return default(r, p)
    return Node(fn, _merged_kind(kind), True)


CALLS: dict[str, Callable[[list[Node]], Node]] = {
    "upper": _text(str.upper, "S", ascii_only=True),
    "lower": _text(str.lower, "S", ascii_only=True),
    "length": _text(len, "I"),
    "trim": _text(lambda v: v.strip(" "), "S"),
    "ltrim": _text(lambda v: v.lstrip(" "), "S"),
    "rtrim": _text(lambda v: v.rstrip(" "), "S"),
    "regexp_replace": _regexp(every=False),
    "regexp_replace_g": _regexp(every=True),
    "replace": _replace,
    "concat": _concat,
    "||": _dpipe,
    "coalesce": _coalesce,
    "nullif": _nullif,
    "abs": _abs,
    "starts_with": _two_texts(str.startswith, "B"),
    "contains": _two_texts(lambda a, b: b in a, "B"),
}
