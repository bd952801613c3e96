"""Cancelling one running statement from another thread (a PostgreSQL CancelRequest).

A face hands ``Gateway.sql(cancel=...)`` a ``Cancellation``; the engine
registers how to stop what it is doing (interrupting the request's DuckDB
cursor) and checks the flag between steps. ``cancel()`` may come from any
thread at any time: before the statement starts (it never runs), while it
runs (it stops with ``StatementCancelled``), or after it ended (nothing
happens). ``reset()`` readies it for the connection's next statement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .errors import StatementCancelled

__all__ = ["Cancellation", "StatementCancelled"]


class Cancellation:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._actions: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            actions, self._actions = self._actions, []
        for action in actions:
            try:
                action()
            except Exception:  # noqa: BLE001 - stopping something already finished is not an error
                pass

    def on_cancel(self, action: Callable[[], None]) -> None:
        """Run ``action`` when cancelled (at once if already cancelled)."""
        with self._lock:
            if not self._cancelled:
                self._actions.append(action)
                return
        action()

    def check(self) -> None:
        if self._cancelled:
            raise StatementCancelled("canceling statement due to user request")

    def reset(self) -> None:
        with self._lock:
            self._cancelled = False
            self._actions = []
