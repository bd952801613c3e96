"""The PG port of a serving process: built from its typed options, announced in one line."""

from __future__ import annotations

import socket
import sys
from typing import Any

from ..pg.server import PgServer
from .options import PgOptions

__all__ = ["pg_server", "announce_pg"]


def pg_server(gw: Any, opts: PgOptions, token: str | None, sock: socket.socket | None = None,
              access: Any = None) -> PgServer:
    """The PG port on ``opts`` (its token is the HTTP one: one credential per server; ``access``: the process's
    users, audit log and admission, shared with HTTP); ``sock``: the supervisor's listening socket, inherited.
    A bad certificate or a port in use is an OSError/ValueError naming it."""
    return PgServer(gw, opts.host, opts.port, token=token, auth_method=opts.auth, tls_cert=opts.tls_cert,
                    tls_key=opts.tls_key, max_connections=opts.max_connections, sock=sock, access=access)


def announce_pg(host: str, port: int, tls: bool, user: str = "iqgate") -> None:
    note = " (TLS available)" if tls else ""
    print(f"iqgate: PostgreSQL protocol on {host}:{port}{note}: psql -h {host} -p {port} -U {user} iqgate",
          file=sys.stderr, flush=True)
