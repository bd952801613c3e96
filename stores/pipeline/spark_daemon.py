"""Spark's Python worker daemon (``pyspark.daemon``), quiet when the JVM hangs up on a worker first.

Why: when a task stops reading its Python worker's output before the end
(a ``LIMIT`` satisfied early, a task cancelled as a query stops), the
worker's last flush meets a closed socket. PySpark's daemon then prints a
``BrokenPipeError`` traceback to its stderr, which Spark copies to the
driver's console: in ``iqgate demo`` three lines of traceback appeared
among its messages in about one run of two, though nothing had failed (the
JVM had what it asked for). Here a worker whose JVM side is gone ends as
PySpark ends a worker that is not reused — quietly — and every other error
is PySpark's own, printed as before.

Spark starts this module instead of ``pyspark.daemon`` when
``spark.python.daemon.module`` names it (``session.py`` sets it for local
sessions whose workers run this interpreter, so they can import it).
"""

from __future__ import annotations

import socket
from typing import Any

from pyspark import daemon

__all__ = ["worker", "main"]

_pyspark_worker = daemon.worker

HUNG_UP = (BrokenPipeError, ConnectionResetError)


def worker(sock: socket.socket, authenticated: bool) -> Any:
    """``pyspark.daemon.worker``, with a worker whose JVM side closed the socket ended without a traceback.

    A non-zero code makes the daemon's forked child stop reusing this worker
    and exit once the socket is closed, which is what the JVM expects of a
    worker it hung up on.
    """
    try:
        return _pyspark_worker(sock, authenticated)
    except HUNG_UP:
        return 1


def main() -> None:
    """Run PySpark's daemon with ``worker`` in place of its own (the daemon looks it up on every fork)."""
    daemon.worker = worker
    daemon.manager()


if __name__ == "__main__":
    main()
