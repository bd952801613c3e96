"""Which simple residuals the gateway answers itself: learned per program from DuckDB's first answer.

``residual_eval`` computes a simple residual's rows; the result columns
(names as DuckDB spells them, ``count_star()``, ``min("name")``, and types as
DuckDB types them) are not guessed but taken from DuckDB's answer to the
program's first run, which is also compared with ours: only a program whose
answer was identical is evaluated without DuckDB afterwards (a mismatch turns
it off for good and is logged; a defence in depth behind the property test).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from planner.residual_program import Program

from .evaluator import Compiled, Fallback, Unsupported, compile_for, signature

__all__ = ["Programs"]

_log = logging.getLogger(__name__)
_MAX_SIGNATURES = 16  # parameter-type combinations compiled per program


_RESULT_TYPES = frozenset({"BIGINT", "INTEGER", "HUGEINT", "DOUBLE", "VARCHAR", "BOOLEAN"})


class Programs:
    """What the gateway learned per residual program, kept as long as the planner caches the program."""

    def __init__(self) -> None:
        self._columns: weakref.WeakKeyDictionary[Program, list[tuple[str, str]] | None] = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary[Program, dict[tuple[str, ...], Compiled | None]] = \
            weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def columns(self, program: Program) -> list[tuple[str, str]] | None:
        """The result columns, or None while the program is not (or no longer) evaluated here."""
        return self._columns.get(program)

    def known(self, program: Program) -> bool:
        return program in self._columns

    def evaluate(self, program: Program, values: tuple[Any, ...], rows: Sequence[tuple[Any, ...]],
                 right: Sequence[tuple[Any, ...]] = ()) -> list[tuple[Any, ...]] | None:
        """The result rows over a scan's rows (a join's: its two scans'), or None when DuckDB must answer this
        one."""
        try:
            sig = signature(values)
        except Unsupported:
            return None
        by_sig = self._compiled.get(program)
        if by_sig is None:
            with self._lock:
                by_sig = self._compiled.setdefault(program, {})
        compiled = by_sig.get(sig, False)
        if compiled is False:
            if len(by_sig) >= _MAX_SIGNATURES:  # a client varying its parameters' types: DuckDB answers the rest
                return None
            try:
                compiled = compile_for(program, sig)
            except Unsupported:
                compiled = None
            by_sig[sig] = compiled
        if compiled is None:
            return None
        try:
            return compiled.run(rows, values, right)
        except Fallback:
            return None

    def learn(self, program: Program, values: tuple[Any, ...], rows: Sequence[tuple[Any, ...]],
              columns: list[tuple[str, str]], duck_rows: list[tuple[Any, ...]],
              right: Sequence[tuple[Any, ...]] = ()) -> None:
        """Record DuckDB's columns if this module gives DuckDB's exact answer for the same rows."""
        if not all(t in _RESULT_TYPES for _, t in columns):
            with self._lock:
                self._columns[program] = None
            return
        ours = self.evaluate(program, values, rows, right)
        if ours is None:
            return  # not decidable on these rows: learn on a later run
        same = len(ours) == len(duck_rows) and all(
            len(a) == len(b) == len(columns) and all(_same(x, y) for x, y in zip(a, b)) for a, b in zip(ours, duck_rows))
        if not same:
            _log.warning("residual evaluator disagrees with DuckDB (program turned off): %r gave %r, DuckDB %r",
                         program, ours[:3], duck_rows[:3])
        with self._lock:
            self._columns[program] = list(columns) if same else None


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex()
    return bool(a == b)
