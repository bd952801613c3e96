"""The one way a server starts and stops: ``serve``, ``demo`` and ``replica`` all come through ``run_server``.

In order: take the state directory's writer lock when this server writes
it (a pipeline host: one writer per state directory, a second server is
refused at once naming the first; read-only servers take none); check the
users file and the audit log (access_setup.py); bind the listening sockets
(a port in use is one clear error, before anything else starts); make the
state board, the accept board and
the activity slots; publish the host's state (``publisher.py``); start the
serving processes (``supervisor.py``), which answer from the files from
their first second; start the host (Spark, a replica's restoring: seconds);
wait for Ctrl-C or SIGTERM (or for no serving process to be left); then stop
the serving processes, then the host, and close the rest.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stores.app.writer_lock import WriterLock, WriterLockError

from .accept_board import AcceptBoard
from .access_setup import AccessSetupError, check_access
from .activity import Activity
from .hosts import Host
from .options import ServeOptions
from .pg_port import announce_pg
from .publisher import Crashes, Publisher
from .state_board import StateBoard
from .stopping import catch_sigterm, wait_for_stop
from .supervisor import ServingProcesses

__all__ = ["run_server", "ServerStartError", "Server", "listening_socket"]

_BACKLOG = 1024


class ServerStartError(Exception):
    """The server cannot start as asked (a port in use, an address that is not this machine's)."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, inheritable TCP socket (IPv6 when ``host`` is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ServerStartError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


@dataclass
class Server:
    """A running server, as ``run_server`` hands it to ``ready``: where it answers."""

    url: str
    pg: tuple[str, int] | None
    pids: list[int]


def run_server(host: Host, opts: ServeOptions, *, ready: Callable[[Server], None] | None = None,
               log: dict[str, Any] | None = None, application_id: str | None = None) -> int:
    """Serve ``host``'s stores until stopped (see the module doc); returns the exit code.

    ``ready`` is called once the host has started (the demo prints its example answers there); ``log`` and
    ``application_id`` let routing find peers on the log's heartbeat topic.
    """
    lock = _writer_lock(host)
    try:
        return _run(host, opts, ready, log, application_id)
    finally:
        if lock is not None:
            lock.release()


def _writer_lock(host: Host) -> WriterLock | None:
    """The state directory's writer lock, when this server writes it (a pipeline host; a replica's command takes
    its own before it opens anything); ServerStartError naming the holder when another process has it."""
    if host.mode != "hosted":
        return None
    try:
        return WriterLock(host.state_dir, "serve").acquire()
    except WriterLockError as exc:
        raise ServerStartError(str(exc)) from None


def _forward_sighup(procs: ServingProcesses) -> Callable[[], None]:
    """SIGHUP to the supervisor reaches every serving process (each re-reads the users file); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = signal.signal(signal.SIGHUP, lambda *_: procs.signal(signal.SIGHUP))
    return lambda: signal.signal(signal.SIGHUP, before)


def _run(host: Host, opts: ServeOptions, ready: Callable[[Server], None] | None, log: dict[str, Any] | None,
         application_id: str | None) -> int:
    n = 1 if opts.routing is not None and opts.routing.wanted else opts.workers
    try:
        check_access(opts, n)
    except AccessSetupError as exc:
        raise ServerStartError(str(exc)) from None
    http = listening_socket(opts.http.host, opts.http.port)
    try:
        pg = listening_socket(opts.pg.host, opts.pg.port) if opts.pg is not None else None
        if opts.flight is not None:  # gRPC binds it in serving process 1: a port in use is said here, at once
            listening_socket(opts.flight.host, opts.flight.port).close()
    except ServerStartError:
        http.close()
        raise
    restore = catch_sigterm()
    if n != opts.workers:
        print("iqgate: routing: serving with one process (routing keeps its peers' view in the process that "
              "routes)", file=sys.stderr, flush=True)
    board = StateBoard.create()
    activity = Activity.create(n)
    accept = AcceptBoard.create(n) if n > 1 else None
    crashes = Crashes()
    publisher = Publisher(board, host, crashes, f"{os.getpid()}-{int(time.time())}").start()
    host.on_change(publisher.notify)
    fds = [http.fileno(), board.fileno(), activity.fileno()] + ([pg.fileno()] if pg is not None else []) + \
        ([accept.fileno()] if accept is not None else [])
    spec = {"state_dir": str(host.state_dir), "mode": host.mode, "options": opts.to_json(),
            "http_fd": http.fileno(), "pg_fd": pg.fileno() if pg is not None else None, "board_fd": board.fileno(),
            "activity_fd": activity.fileno(), "accept_fd": accept.fileno() if accept is not None else None,
            "log": log, "application_id": application_id}
    procs = ServingProcesses(n, spec, tuple(fds), activity, crashes, opts.config.auth_token,
                             on_crash=publisher.notify, peer_token=opts.access.peer_token)
    bound_host, bound_port = http.getsockname()[:2]
    url = f"{opts.http.scheme}://{bound_host}:{bound_port}"
    unhook = _forward_sighup(procs)  # before any child exists: a SIGHUP must never end the supervisor
    try:
        procs.start()
        print(f"iqgate: serving {host.describe()} on {url} ({n} serving process{'es' if n > 1 else ''}: pids "
              f"{procs.pids}; this one, pid {os.getpid()}, supervises)", file=sys.stderr, flush=True)
        if pg is not None:
            announce_pg(*pg.getsockname()[:2], tls=bool(opts.pg and opts.pg.tls_cert),  # type: ignore[arg-type]
                        user="USER" if opts.access.users_file else "iqgate")
        if opts.flight is not None:
            f = opts.flight
            print(f"iqgate: Arrow Flight SQL on grpc{'+tls' if f.tls_cert else ''}://{f.host}:{f.port} "
                  "(served by serving process 1)", file=sys.stderr, flush=True)
        host.start()
        publisher.notify()
        if ready is not None:
            ready(Server(url, pg.getsockname()[:2] if pg is not None else None, procs.pids))
        wait_for_stop(give_up=lambda: not procs.alive)
        return 0 if procs.alive else 1
    finally:
        unhook()
        restore()
        procs.stop()
        try:
            host.close()
        finally:
            publisher.close()
            for s in (http, pg):
                if s is not None:
                    s.close()
            board.close()
            activity.close()
            if accept is not None:
                accept.close()
