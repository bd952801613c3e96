"""Every statement's budget — time, memory, the client still listening — watched by one thread.

A statement starts its clock when the gateway receives it (parsing and
planning count), and one monitor thread checks every running statement
every ``TICK_S``: past its deadline, its client gone (HTTP disconnect, PG
cancel), or the process's memory grown beyond its budget since it started —
then its DuckDB cursor is interrupted and the statement fails with the
reason. DuckDB's own ``memory_limit`` bounds what its buffer manager holds;
this catches what it does not (large LIST and string values are allocated
outside it), and the planner refuses literal-sized giants before they run.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import OutOfMemoryError, StatementCancelled, StatementTimeout

__all__ = ["Guards", "StatementWatch", "process_rss", "TICK_S"]

TICK_S = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_rss() -> int:
    """This process's resident set size in bytes (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class StatementWatch:
    """One statement's budget; ``check()`` raises once it is spent, ``attach`` names what to interrupt."""

    __slots__ = ("_guards", "_id", "deadline", "timeout_ms", "cancelled", "start_rss", "reason", "_interrupt",
                 "why_cancelled", "memory_bytes")

    def __init__(self, guards: Guards, wid: int, timeout_ms: int, cancelled: Callable[[], bool] | None,
                 memory_bytes: int | None = None) -> None:
        self._guards = guards
        self._id = wid
        self.timeout_ms = timeout_ms
        self.deadline = time.monotonic() + timeout_ms / 1000
        self.cancelled = cancelled
        # a user's lower ceiling (access limits) applies to this statement only; never above the gateway's
        self.memory_bytes = guards.memory_bytes if memory_bytes is None or not guards.memory_bytes else \
            min(memory_bytes, guards.memory_bytes)
        self.start_rss = guards.recent_rss() if self.memory_bytes else 0
        self.reason: str | None = None
        self._interrupt: Callable[[], None] | None = None
        self.why_cancelled = "the client went away"

    def restart(self) -> None:
        """Start the clock again (an answer read later than it was asked for: its budget counts from the read)."""
        if self.reason is None:
            self.deadline = time.monotonic() + self.timeout_ms / 1000

    def attach(self, interrupt: Callable[[], None] | None) -> None:
        """The DuckDB cursor's interrupt, while DuckDB runs the statement (None once it is done)."""
        self._interrupt = interrupt
        if interrupt is not None and self.reason is not None:
            interrupt()

    def trip(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        interrupt = self._interrupt
        if interrupt is not None:
            try:
                interrupt()
            except Exception:  # noqa: BLE001 - a cursor that just finished
                pass

    def alive(self) -> bool:
        """False once the statement is out of time or its client is gone (for loops that wait)."""
        if self.reason is None:
            if time.monotonic() > self.deadline:
                self.reason = "timeout"
            elif self.cancelled is not None and _safe(self.cancelled):
                self.reason = "cancelled"
        return self.reason is None

    def check(self, what: str = "the statement") -> None:
        if not self.alive():
            raise self.error(what)

    def error(self, what: str = "the statement") -> Exception:
        if self.reason == "memory":
            return OutOfMemoryError(
                f"{what} needed more memory than its budget of {(self.memory_bytes or 0) // 2**20} MB "
                "(the server's --max-memory); aggregate or filter more, or ask for fewer rows")
        if self.reason == "cancelled":
            return StatementCancelled(f"{what} was cancelled: {self.why_cancelled}")
        return StatementTimeout(f"{what} ran longer than the statement timeout of {self.timeout_ms} ms "
                                "(parsing, planning, reading the stores and running the SQL all count)")

    def close(self) -> None:
        self._interrupt = None
        self._guards._forget(self._id)


class Guards:
    """The statements of one Gateway and the thread that watches them (started on first use)."""

    def __init__(self, memory_bytes: int | None) -> None:
        self.memory_bytes = memory_bytes
        self._watches: dict[int, StatementWatch] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self.tripped: dict[str, int] = {"timeout": 0, "cancelled": 0, "memory": 0}
        self._rss = (0.0, 0)  # (when, bytes): read at most every TICK_S, not once per statement

    def recent_rss(self) -> int:
        at, value = self._rss
        now = time.monotonic()
        if now - at > TICK_S:
            value = process_rss()
            self._rss = (now, value)
        return value

    def watch(self, timeout_ms: int, cancelled: Callable[[], bool] | None = None,
              memory_bytes: int | None = None) -> StatementWatch:
        wid = next(self._ids)
        w = StatementWatch(self, wid, timeout_ms, cancelled, memory_bytes)
        with self._lock:
            self._watches[wid] = w
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="iqgate-statement-guard", daemon=True)
                self._thread.start()
        if not self._wake.is_set():
            self._wake.set()
        return w

    def _forget(self, wid: int) -> None:
        with self._lock:
            w = self._watches.pop(wid, None)
        if w is not None and w.reason is not None:
            with self._lock:
                self.tripped[w.reason] = self.tripped.get(w.reason, 0) + 1

    def _run(self) -> None:
        while True:
            if not self._watches:
                self._wake.clear()
                if not self._watches:  # a statement registered between the check and the clear re-sets it
                    self._wake.wait()
                continue
            time.sleep(TICK_S)
            with self._lock:
                watches = list(self._watches.values())
            now = time.monotonic()
            rss = process_rss() if self.memory_bytes else 0
            self._rss = (now, rss)
            for w in watches:
                if w.reason is not None:
                    continue
                if now > w.deadline:
                    w.trip("timeout")
                elif w.cancelled is not None and _safe(w.cancelled):
                    w.trip("cancelled")
                elif w.memory_bytes and rss - w.start_rss > w.memory_bytes:
                    w.trip("memory")


def _safe(check: Callable[[], Any]) -> bool:
    try:
        return bool(check())
    except Exception:  # noqa: BLE001 - a disconnect probe that fails counts as "still there"
        return False
