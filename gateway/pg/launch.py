"""Starting the PG port beside HTTP from the command line (``serve`` and ``demo``): one place, one message."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .server import PgServer

__all__ = ["pg_server", "start_pg"]


def pg_server(gw: Any, args: argparse.Namespace) -> Any:
    """The PG port when ``--pg-port`` is given (its token is the HTTP one: one credential per server)."""
    if getattr(args, "pg_port", None) is None:
        if getattr(args, "tls_cert", None) or getattr(args, "tls_key", None):
            raise SystemExit("iqgate: --tls-cert/--tls-key secure the PG port; add --pg-port")
        return None
    try:
        return PgServer(gw, args.pg_host, args.pg_port, token=gw.config.auth_token, auth_method=args.pg_auth,
                        tls_cert=args.tls_cert, tls_key=args.tls_key, max_connections=args.pg_max_connections)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"iqgate: cannot serve the PG port on {args.pg_host}:{args.pg_port}: {exc}") from None


def start_pg(pg: Any) -> None:
    if pg is not None:
        pg.start()
        tls = " (TLS available)" if pg.tls is not None else ""
        print(f"iqgate: PostgreSQL protocol on {pg.host}:{pg.port}{tls}: psql -h {pg.host} -p {pg.port} -U iqgate iqgate",
              file=sys.stderr, flush=True)
