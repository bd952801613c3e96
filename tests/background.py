"""A test's background worker (a client or a producer running beside the code under test), as a context manager.

Why a base: every such worker needs the same daemon thread, stop event and
bounded join; subclasses only say what one run does (``_run``, which must
return soon after ``stopped(...)`` says so).
"""

from __future__ import annotations

import threading


class Background:
    """``with Worker(...) as w:`` runs ``w._run()`` in a daemon thread; leaving the block stops and joins it."""

    join_s = 30.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def _run(self) -> None:
        raise NotImplementedError

    def stopped(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` seconds; True once the block was left (the run should return)."""
        return self._stop.wait(wait_s)

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.join_s)
