"""Stopping a server on request: Ctrl-C, SIGTERM, or ``request_stop`` (tests, a supervisor gone)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

__all__ = ["request_stop", "reset_stop", "wait_for_stop", "stop_requested", "catch_sigterm"]


_STOP = threading.Event()


def request_stop() -> None:
    """Ask a running ``serve``/``demo`` to shut down cleanly (what Ctrl-C does; tests call it)."""
    _STOP.set()


def wait_for_stop(give_up: Any = None) -> None:
    """Block until ``request_stop``, SIGTERM or Ctrl-C (which raises KeyboardInterrupt here).

    SIGTERM is how supervisors (systemd, Docker, Kubernetes) stop a server: it
    gets the same clean shutdown as Ctrl-C (listeners closed, the pipeline's
    queries stopped, worker processes ended) instead of dying mid-write. A
    second SIGTERM while shutting down ends the process at once.
    """
    restore = _stop_on_sigterm()
    try:
        while not _STOP.wait(0.5):
            if give_up is not None and give_up():
                return
    finally:
        restore()


def catch_sigterm() -> Any:
    """Take SIGTERM as a stop request from now on (a server starting up: Spark takes seconds); returns what undoes
    it. ``wait_for_stop`` then returns at once if one came meanwhile."""
    return _stop_on_sigterm()


def _stop_on_sigterm() -> Any:
    """Route SIGTERM to ``request_stop`` while waiting; returns what undoes it (a no-op off the main thread,
    or when someone else handles SIGTERM, e.g. a worker process that stops with its parent)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None

    def on_sigterm(signum: int, frame: Any) -> None:
        print("iqgate: SIGTERM: stopping (a second SIGTERM ends the process at once)", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        request_stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_requested() -> bool:
    return _STOP.is_set()


def reset_stop() -> None:
    """Forget an earlier ``request_stop`` (each command run starts fresh)."""
    _STOP.clear()


