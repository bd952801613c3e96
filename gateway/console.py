"""What the terminal commands share: printing results as psql-like tables, and stopping a server on request.

``cli`` (``serve``, ``sql``) and ``demo`` both print results and both serve
until Ctrl-C or ``request_stop``; keeping that here lets neither import the other.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from .json_values import dumps, json_default

__all__ = ["print_table", "print_result", "request_stop", "reset_stop", "wait_for_stop", "die"]


# -- output ---------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, dict)):
        return dumps(v)
    return str(json_default(v))


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    """A plain text table, numbers right-aligned, like psql's."""
    cells = [[str(_cell(v)) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
               for i in range(len(columns))]
    out.write(" | ".join(c.ljust(w) for c, w in zip(columns, widths)) + "\n")
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write(" | ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                  + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


def print_result(body: dict[str, Any], fmt: str, out: TextIO) -> None:
    columns = [c["name"] for c in body["columns"]]
    if fmt == "json":
        out.write(dumps(body) + "\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in body["rows"]:
            w.writerow(["" if v is None else (dumps(v) if isinstance(v, (list, dict)) else v) for v in r])
    else:
        print_table(columns, body["rows"], out)
        failed = [p for p in body.get("partitions", []) if p.get("failure_reason")]
        for p in failed:
            out.write(f"partition {p['store']}/{p['partition']} failed: {p['failure_reason']}: "
                      f"{p['failure_message']}\n")
        if body.get("position"):
            out.write(f"position: {json.dumps(body['position'], separators=(',', ':'))}\n")



# -- stopping a server ------------------------------------------------------------
_STOP = threading.Event()


def request_stop() -> None:
    """Ask a running ``serve``/``demo`` to shut down cleanly (what Ctrl-C does; tests call it)."""
    _STOP.set()


def wait_for_stop() -> None:
    """Block until ``request_stop``, SIGTERM or Ctrl-C (which raises KeyboardInterrupt here).

    SIGTERM is how supervisors (systemd, Docker, Kubernetes) stop a server: it
    gets the same clean shutdown as Ctrl-C (listeners closed, the pipeline's
    queries stopped, worker processes ended) instead of dying mid-write. A
    second SIGTERM while shutting down ends the process at once.
    """
    restore = _stop_on_sigterm()
    try:
        while not _STOP.wait(0.5):
            pass
    finally:
        restore()


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


def die(exc: BaseException) -> None:
    """An essential thread died: say why and end the process non-zero, so a supervisor restarts it.

    Raising in that thread would leave the process up with a port that answers nothing.
    """
    print(f"iqgate: the HTTP server stopped ({type(exc).__name__}: {exc}); exiting", file=sys.stderr, flush=True)
    os._exit(70)
