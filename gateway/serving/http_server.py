"""Serving the Flask app with waitress (a production WSGI server; Flask's own is ~6x slower here).

``ServerThread`` runs one in a background thread on 127.0.0.1 and an
ephemeral port: what the tests, the benchmark and ``iqgate demo`` use.

Waitress is configured to use ``poll()`` (its default ``select()`` cannot
watch a descriptor numbered 1,024 or more: with many stores open, the serving
thread died), to look ahead on idle connections so a client that disconnects
mid-request is noticed (``waitress.client_disconnected``, which cancels the
statement), and without its per-request "Task queue depth" warnings.

Responses are sent by the serving loop, in one ``send`` for headers and
body (``send_bytes``: a handler thread flushes only past ``SEND_BYTES``).
With waitress's default (1 byte) each handler thread sent the headers and
then the body itself: two system calls per request, each one handing the GIL
to a thread waiting for it. Measured on 2 cores, ``serve`` defaults, 8
clients (wrk): point lookups 3.7-4.9k → 4.8-8.1k req/s, p50 1.3-2.2 →
1.1-1.5 ms. The price: a client that pipelines HTTP/1.1 requests gets a
small response when the request behind it is answered, not before (no
client of ours pipelines; browsers and HTTP libraries do not). A small
answer in one piece with its Content-Length (a point lookup, the ping, an
error) is the exception: its handler thread sends it at once, in one send
(whole_answer.py: one thread hand-off fewer per request). If the
serving loop dies anyway, ``on_failure`` is called: the CLI logs why and
exits non-zero, so a supervisor restarts it instead of a port that answers
nothing staying open.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from waitress.server import create_server

from .accept_board import AcceptBoard
from .inline import answers_inline
from .live_streams import install_stream_hooks

__all__ = ["ServerThread", "freeze_startup_heap", "tune_process_for_serving", "keep_pandas_out", "lean_allocators",
           "serving_cpu", "SWITCH_INTERVAL_S"]

log = logging.getLogger(__name__)
logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "Task queue depth is N" on every busy moment

SWITCH_INTERVAL_S = 0.001
SEND_BYTES = 1 << 16
RECHECK_S = 0.05  # with an accept board: how long a loop that holds off waits before looking again


class ServerThread:
    """A waitress server in a daemon thread; ``url`` is known once constructed (the socket is bound)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, threads: int = 8, *,
                 on_failure: Callable[[BaseException], None] | None = None, sock: Any = None,
                 cpu: int | None = None, board: AcceptBoard | None = None, connection_limit: int = 1000,
                 tls: Any = None, inline: bool = True) -> None:
        """``sock``: an already listening socket to accept from (shared by ``--workers`` processes).

        ``cpu``: run the serving loop and its handler threads on that one CPU
        (``--workers``: one CPU per serving process). Why: a request hops
        between the loop and a handler thread (and the GIL with it); threads
        of one process on one core keep their caches, where the scheduler
        otherwise moves them between cores on every wake-up. Measured on 2
        cores with 2 workers: about 1.5x the point lookups/s and half the
        p50. Only these threads are pinned: the rest of the process (a hosted
        pipeline's Spark, the statement guard) runs anywhere.

        ``board``: with ``sock`` shared by several serving processes, accept
        only while no other process has fewer connections (accept_board.py).
        ``connection_limit``: open connections at most (live answers hold one each).

        ``tls``: an ``ssl.SSLContext`` (``tls_channel.tls_context``): the port
        speaks HTTPS, terminated in this process (tls_channel.py).

        ``inline``: the serving loop answers pings and point lookups itself
        where ``app`` says which it must not (inline.py); False hands every
        request to a handler thread (what benchmarks compare it with).
        """
        where: dict[str, Any] = {"sockets": [sock]} if sock is not None else {"host": host, "port": port}
        self.cpu = cpu
        with _on_cpu(cpu), warnings.catch_warnings():  # the handler threads inherit the caller's affinity
            warnings.filterwarnings("ignore", "send_bytes", DeprecationWarning)  # in every waitress 3.x (setup.py)
            self._server = create_server(app, threads=threads, ident="iqgate", channel_timeout=60,
                                         connection_limit=connection_limit, clear_untrusted_proxy_headers=True,
                                         asyncore_use_poll=True, channel_request_lookahead=1,
                                         send_bytes=SEND_BYTES, **where)
        if board is not None:
            _accept_fairly(self._server, board)
        # live answers (live_streams.py); pings and point lookups on the serving loop itself (inline.py)
        self._streams = install_stream_hooks(self._server, threads, inline=inline and answers_inline(app))
        self.tls = tls is not None
        if tls is not None:
            from .tls_channel import tls_channel

            self._server.channel_class = tls_channel(tls, self._server.channel_class)  # type: ignore[union-attr]
        if sock is not None:
            host = sock.getsockname()[0]
        self.host = host
        self.port = int(self._server.effective_port)  # type: ignore[union-attr]
        self._closing = False
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="iqgate-http", daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def inline_counts(self) -> Any:
        """Requests the serving loop answered itself and those it handed on (inline.py); None where it answers
        none (an app that does not say which it must not)."""
        return getattr(self._server, "inline_counts", None)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        if self.cpu is not None:
            _pin_this_thread({self.cpu})
        try:
            self._server.run()
        except BaseException as exc:  # noqa: BLE001 - the loop ended: on purpose (closing) or not
            if self._closing:
                return
            self.failure = exc
            log.critical("the HTTP serving loop on %s died: %s: %s", self.url, type(exc).__name__, exc)
            if self._on_failure is not None:
                self._on_failure(exc)
            else:
                raise
        else:
            if not self._closing:
                self.failure = RuntimeError("the HTTP serving loop returned")
                log.critical("the HTTP serving loop on %s stopped on its own", self.url)
                if self._on_failure is not None:
                    self._on_failure(self.failure)

    def start(self) -> ServerThread:
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        """Let requests in flight finish, then close the sockets and end the loop.

        A handler thread pulls the loop's trigger when its response is ready;
        closing the server first closed that trigger under it (EBADF).
        """
        self._closing = True
        self._streams.closing.set()  # live answers end (with their resume point) instead of holding the shutdown
        self._server.task_dispatcher.shutdown(cancel_pending=False, timeout=timeout_s)  # type: ignore[union-attr]
        self._server.close()
        self._thread.join(timeout_s)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _accept_fairly(server: Any, board: AcceptBoard) -> None:
    """Make waitress's loop watch the listening socket only while ``board`` says this process is the least loaded.

    The loop asks its listener ``readable()`` before every poll; the count is
    the loop's map (its connections, plus the listener and its trigger: the
    same two in every process). A process that holds off polls again within
    ``RECHECK_S`` (not waitress's 1 s): the others may have taken connections
    meanwhile and be holding off in turn.
    """
    server.adj.asyncore_loop_timeout = RECHECK_S  # read by the loop's poll (seconds; a float is fine)
    readable = server.readable
    connections = server._map  # noqa: SLF001 - the loop's own map of sockets

    def fair_readable() -> bool:
        return bool(readable()) and board.may_accept(len(connections))

    server.readable = fair_readable


def serving_cpu(index: int) -> int | None:
    """The CPU serving process ``index`` runs its HTTP threads on: the index-th CPU this process may use
    (round robin), or None where there is one CPU or no affinity to set (see ``ServerThread``'s ``cpu``)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    return cpus[index % len(cpus)] if len(cpus) > 1 else None


def _pin_this_thread(cpus: set[int]) -> bool:
    """Restrict the calling thread (Linux: pid 0 is the calling thread) to ``cpus``; False where that cannot be."""
    try:
        os.sched_setaffinity(0, cpus)
    except (AttributeError, OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def _on_cpu(cpu: int | None) -> Iterator[None]:
    """Run the block with the calling thread on ``cpu`` (threads it starts inherit that), then restore it."""
    if cpu is None:
        yield
        return
    try:
        before = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        yield
        return
    pinned = _pin_this_thread({cpu})
    try:
        yield
    finally:
        if pinned:
            _pin_this_thread(before)


def keep_pandas_out() -> None:
    """Refuse ``import pandas`` in a read-only serving process: nothing there needs it, and it costs ~50 MB.

    pyarrow imports pandas lazily the first time it builds an array from
    Python values, and DuckDB the first time it scans a Python object, only
    to ask "is this a DataFrame?": both take an ImportError as "pandas is not
    installed". Processes that host Spark (which uses pandas) never call this.
    """
    import importlib.abc

    class _NoPandas(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name == "pandas" or name.startswith("pandas."):
                raise ImportError("pandas is not loaded in a read-only iqgate serving process")

    if "pandas" not in sys.modules and not any(type(f).__name__ == "_NoPandas" for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


MALLOC_ARENAS = 2  # glibc's default is 8 per core: each thread that ever allocated under contention keeps one


def lean_allocators() -> None:
    """Allocate Arrow buffers with the C library's malloc (not pyarrow's mimalloc) in at most ``MALLOC_ARENAS``
    arenas, in a read-only serving worker.

    Why: both allocators keep what a thread freed for that thread's next
    allocations, so a worker whose handler threads take turns streaming
    scans held every thread's high-water mark at once. On 1M keys
    (bench_memory's load: 20,000 lookups, two scans every 500) the worker
    peaked at 211 MB as it was, 190 MB with malloc for Arrow, 181 MB with
    two arenas as well (issue 14 item 2: ≤ 200 MB). malloc hands large
    buffers back to the OS when they are freed. Processes that host Spark
    keep the defaults: the write path is measured on them (issue 22).
    Buffers allocated before this keep their pool.
    """
    import ctypes

    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    try:
        ctypes.CDLL(None).mallopt(-8, MALLOC_ARENAS)  # M_ARENA_MAX (malloc.h); arenas made later obey it
    except (AttributeError, OSError):  # pragma: no cover - not glibc
        pass


def tune_process_for_serving() -> None:
    """Shorten the GIL switch interval for a process whose job is answering requests.

    A request thread that releases the GIL (a SQLite read, a socket write)
    waits for it again until the running thread's switch interval ends: 5 ms
    by default, which under 8 concurrent clients turned sub-millisecond
    lookups into 5 ms ones. 1 ms trades a little throughput of long
    statements for latency of short ones. Process-wide, so only the server
    commands (and the benchmark that stands in for them) call it.

    It also freezes the heap built so far (``freeze_startup_heap``).
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    freeze_startup_heap()


def freeze_startup_heap() -> None:
    """Move every object alive now (modules, the catalog, library state) out of the cyclic GC's reach.

    A full collection walks every tracked object of the process, and requests
    that allocate many objects (planning an IN list of thousands of keys:
    tuples per key) trigger them: with a large heap, planning 1,000 keys cost
    several times ten times 100 keys (issue 14 item 5). Objects that live as
    long as the server are never garbage, so after ``gc.freeze`` collections
    only walk what requests made. Call it once the server is set up.
    """
    gc.collect()
    gc.freeze()
