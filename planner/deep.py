"""Running the parser and the analyser on a thread with a deep stack.

sqlglot parses by recursive descent: about 23 Python frames per nested
parenthesis, so Python's default recursion limit (1,000) fails at ~42 levels
— shallower than BI tools nest. Statements are capped at ``limits.MAX_NESTING``
levels; this runs the work on a thread whose stack can hold that, with a
recursion limit to match. Only cache misses pay the thread start (~0.1 ms).

Being a thread of its own also makes the work stoppable: parsing and
analysing a megabyte of SQL costs seconds of pure Python, which no DuckDB
interrupt reaches, so a statement past its budget (timeout, cancel, client
gone) stops its planning too, by an asynchronous exception.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["run_deep", "PlanningInterrupted", "RECURSION_LIMIT"]

T = TypeVar("T")

RECURSION_LIMIT = 60_000
_STACK_BYTES = 512 * 2**20  # virtual: pages are committed only as deep as the recursion goes
_lock = threading.Lock()
_RESEND_S = 0.05


class PlanningInterrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt: nothing may catch it as an error
    """Raised in the planning thread when the statement's budget is spent, and then in the caller's.

    A BaseException so that no ``except Exception`` on the way (sqlglot's,
    ours) turns it into a planning error or carries on.
    """


_filter_installed = False


def _without_interrupts(previous: Callable[[object], object]) -> Callable[[object], None]:
    """``previous`` (an unraisable-exception hook), except for PlanningInterrupted.

    Why: an interrupt can land where Python cannot raise it (a gc callback, a
    ``__del__``); it is swallowed there and reported as "Exception ignored",
    with a traceback on stderr (under pytest: a test error, and the re-sent
    interrupt can hit pytest's own hook while it formats the first). That is
    expected: ``run_deep`` sends it again until it lands in the planning.
    """
    def hook(unraisable: object) -> None:
        if getattr(unraisable, "exc_type", None) is not PlanningInterrupted:
            previous(unraisable)
    return hook


def run_deep(fn: Callable[[], T], attach_interrupt: Callable[[Callable[[], None] | None], None] | None = None) -> T:
    """``fn()`` on a deep-stack thread; its result, or its exception re-raised here.

    ``attach_interrupt`` (a statement watch's ``attach``) is given a function
    that stops ``fn`` — PlanningInterrupted is raised in its thread at its
    next Python instruction and then here — while it runs, and None after.
    """
    global _filter_installed
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)  # process-wide; only deep work uses it
    box: dict[str, object] = {}
    running = threading.Lock()  # held by the thread while fn runs: an interrupt after that would hit nothing of fn
    running.acquire()

    def target() -> None:
        try:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
                box["error"] = exc
            finally:
                running.release()
        except PlanningInterrupted:  # an interrupt that landed just as fn ended
            box.setdefault("error", PlanningInterrupted())

    stop = threading.Event()

    def interrupt() -> None:
        stop.set()
        if running.locked() and t.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(PlanningInterrupted))

    with _lock:  # stack_size applies to threads started while it is set
        if attach_interrupt is not None and not _filter_installed:  # once, wrapping the hook that is there then
            _filter_installed = True
            sys.unraisablehook = _without_interrupts(sys.unraisablehook)
        old = threading.stack_size(_STACK_BYTES)
        try:
            t = threading.Thread(target=target, name="iqgate-planner", daemon=True)
            t.start()
        finally:
            threading.stack_size(old)
    if attach_interrupt is not None:
        attach_interrupt(interrupt)
        try:
            while t.is_alive():
                t.join(_RESEND_S)
                if stop.is_set():  # again: one that lands in a gc callback or a __del__ is swallowed there
                    interrupt()
        finally:
            attach_interrupt(None)
    else:
        t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
