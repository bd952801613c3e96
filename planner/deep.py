"""Running the parser and the analyser on a thread with a deep stack.

sqlglot parses by recursive descent: about 23 Python frames per nested
parenthesis, so Python's default recursion limit (1,000) fails at ~42 levels
— shallower than BI tools nest. Statements are capped at ``limits.MAX_NESTING``
levels; this runs the work on a thread whose stack can hold that, with a
recursion limit to match. Only cache misses pay the thread start (~0.1 ms).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["run_deep", "RECURSION_LIMIT"]

T = TypeVar("T")

RECURSION_LIMIT = 60_000
_STACK_BYTES = 512 * 2**20  # virtual: pages are committed only as deep as the recursion goes
_lock = threading.Lock()


def run_deep(fn: Callable[[], T]) -> T:
    """``fn()`` on a deep-stack thread; its result, or its exception re-raised here."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)  # process-wide; only deep work uses it
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    with _lock:  # stack_size applies to threads started while it is set
        old = threading.stack_size(_STACK_BYTES)
        try:
            t = threading.Thread(target=target, name="iqgate-planner", daemon=True)
            t.start()
        finally:
            threading.stack_size(old)
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
