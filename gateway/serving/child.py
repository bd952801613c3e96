"""A serving process: ``python -m gateway.serving.child``, started by its server's supervisor.

It reads its spec from the environment (``supervisor.SPEC_ENV``: what it
serves, its inherited sockets and boards, its options), answers from the
state dir's files under the state its supervisor publishes (follower.py),
serves HTTP (or HTTPS: tls_channel.py) on the shared listening socket (the
least loaded process accepts: accept_board.py) and, as the first serving
process, the PG port; its faces share one access (access_setup.py: users,
audit log, admission); and it ends with its supervisor. It hosts nothing
and writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from ..engine.gateway import Gateway
from ..http import create_app
from .accept_board import AcceptBoard
from .access_setup import access_context, reload_on_sighup
from .activity import Activity
from .follower import Follower
from .hosting import raise_open_files_limit
from .http_server import ServerThread, keep_pandas_out, lean_allocators, serving_cpu, tune_process_for_serving
from .options import ServeOptions
from .pg_port import pg_server
from .routing_setup import routed, start_routing, stop_routing
from .state_board import StateBoard
from .stopping import request_stop, wait_for_stop
from .supervisor import PEER_TOKEN_ENV, SPEC_ENV, TOKEN_ENV, die_with_parent
from .tls_channel import tls_context

__all__ = ["main"]


def main() -> int:
    spec: dict[str, Any] = json.loads(os.environ[SPEC_ENV])
    index = int(spec["index"])
    opts = ServeOptions.from_json(spec["options"], os.environ.get(TOKEN_ENV) or None,
                                  os.environ.get(PEER_TOKEN_ENV) or None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the supervisor stops us (SIGTERM)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the users are loaded (reload_on_sighup)
    die_with_parent(request_stop)
    access = access_context(opts, index, int(spec.get("count") or 1))
    reload_on_sighup(access, say=index == 0)
    raise_open_files_limit()
    keep_pandas_out()  # nothing here needs pandas (~50 MB a process)
    lean_allocators()
    from stores.app.reader import StateDirReader

    board = StateBoard.attach(spec["board_fd"])
    activity = Activity.attach(spec["activity_fd"], index)
    reader = StateDirReader(Path(spec["state_dir"]))
    source: Any = Follower(reader, board, spec["mode"], index)
    http_sock = socket.socket(fileno=spec["http_fd"])
    url = f"{opts.http.scheme}://{http_sock.getsockname()[0]}:{http_sock.getsockname()[1]}"
    if opts.routing is not None and opts.routing.wanted:
        source = routed(source, opts.routing, opts.peer_credential, url)
    # --max-subscriptions is the server's: each serving process runs its share of the live answers
    share = -(-opts.config.max_subscriptions // max(1, opts.workers))
    gw = Gateway(source, config=dataclasses.replace(opts.config, max_subscriptions=share), activity=activity)
    tune_process_for_serving()
    accept = AcceptBoard.attach(spec["accept_fd"], index) if spec.get("accept_fd") is not None else None
    cpu = serving_cpu(index) if opts.pin_cpus and opts.workers > 1 else None
    tls = tls_context(opts.http.tls_cert, opts.http.tls_key) if opts.http.tls_cert and opts.http.tls_key else None
    server = ServerThread(create_app(gw, access=access), threads=opts.http.threads, on_failure=_die, sock=http_sock,
                          cpu=cpu, board=accept, connection_limit=1000 + share, tls=tls).start()
    pg = flight = None
    if index == 0 and opts.pg is not None and spec.get("pg_fd") is not None:
        pg = pg_server(gw, opts.pg, opts.config.auth_token, socket.socket(fileno=spec["pg_fd"]), access).start()
    if index == 0 and opts.flight is not None:  # gRPC binds its own socket (the same port after a restart)
        from ..flight import start_flight

        f = opts.flight
        flight = start_flight(gw, host=f.host, port=f.port, token=opts.config.auth_token, tls_cert=f.tls_cert,
                              tls_key=f.tls_key, access=access)
    start_routing(gw.source, opts.routing, spec.get("log"), spec.get("application_id"))
    try:
        wait_for_stop()
    finally:
        stop_routing(gw.source)
        if flight is not None:
            flight.close()
        if pg is not None:
            pg.close()
        server.close()
        gw.close()
        getattr(source, "local", source).close()  # a routed source closes what it wraps
        board.close()
        access.close()
    return 0


def _die(exc: BaseException) -> None:
    """The serving loop died: end this process non-zero; the supervisor starts a new one."""
    print(f"iqgate: a serving process's HTTP loop stopped ({type(exc).__name__}: {exc}); exiting", file=sys.stderr,
          flush=True)
    os._exit(70)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: DuckDB's bindings print leak reports from daemon threads
