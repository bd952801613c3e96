"""The server's command-line options, shared by ``iqgate serve``, ``replica`` and ``demo``: limits, auth, sizes.

One parser of numbers and sizes, so a bad value is a usage error (exit 2)
with the flag named, never a traceback; one place that turns the flags into
the GatewayConfig every face enforces.
"""

from __future__ import annotations

import argparse
import math
import os
import urllib.parse
from pathlib import Path
from typing import Any

from ..engine.config import GatewayConfig
from ..serving.options import AccessOptions, FlightOptions, HttpOptions, PgOptions, RoutingOptions, ServeOptions

__all__ = ["server_args", "pg_args", "config_from_args", "positive_int", "non_negative_int", "byte_size",
           "serve_options", "kafka_args", "kafka_options", "routing_args", "routing_options", "UsageError",
           "access_options", "tls_files"]


class UsageError(Exception):
    """A command given flags that cannot work together (exit 2, one line, no traceback)."""


def int_at_least(least: int) -> Any:
    """An argparse type: an integer >= ``least``, so a bad number is a usage error (exit 2), not a traceback."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0: any free port), so ``--port 99999`` is a usage error and not bind()'s OverflowError."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 0-65535, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (a timeout), so ``-1``, ``nan`` or ``inf`` are usage errors, not socket errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host (a server of ours), checked before anything connects."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number or out of range
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080)")
    return text


def _size(text: str, least: int, least_text: str) -> int:
    units = {"": 1, "B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
    t = text.strip().upper().replace("IB", "B")
    num = t.rstrip("KMGTB")
    unit = t[len(num):]
    try:
        value = int(float(num) * units[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 512MB or 2GB") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is too small; give at least {least_text}")
    return value


def response_size(text: str) -> int:
    """``64KB``, ``256MB``: the most bytes one answer may have (at least 1 KB)."""
    return _size(text, 2**10, "1KB")


def byte_size(text: str) -> int:
    """``512MB``, ``2GB``, ``1048576``: a size in bytes (at least 16 MB)."""
    return _size(text, 16 * 2**20, "16MB")


def server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_number, default=8080)
    p.add_argument("--threads", type=positive_int, default=4,
                   help="HTTP worker threads (default 4: more only add GIL contention on small machines)")
    p.add_argument("--token", help="require Authorization: Bearer TOKEN (visible to other users of the machine: "
                                   "prefer --token-file or the IQGATE_TOKEN environment variable)")
    p.add_argument("--token-file", metavar="PATH", help="read the bearer token from this file")
    p.add_argument("--users-file", metavar="PATH",
                   help="users, roles and per-store grants (TOML, edited with `iqgate users`; re-read when it "
                        "changes or on SIGHUP): every face then asks each user for their own token or password. "
                        "Not with --token")
    p.add_argument("--audit-log", metavar="PATH",
                   help="one JSON line per statement and per failed login (rotating; '-' for stdout; with several "
                        "serving processes each writes PATH.<index>)")
    p.add_argument("--audit-mask", action="store_true",
                   help="write statements to the audit log with every literal masked (and without parameters)")
    p.add_argument("--max-memory", type=byte_size, metavar="SIZE",
                   help="every statement's memory budget, e.g. 512MB or 2GB (default: a tenth of the machine's "
                        "memory, at most 4 GB)")
    p.add_argument("--max-rows", type=positive_int, default=1_000_000, help="most rows one statement may return")
    p.add_argument("--max-response-size", type=response_size, metavar="SIZE",
                   help="most bytes one answer may have, e.g. 64MB (default 256MB)")
    p.add_argument("--statement-timeout-ms", type=positive_int, default=30_000)
    p.add_argument("--no-table-scans", action="store_true", help="refuse queries that must scan whole stores")
    p.add_argument("--max-subscriptions", type=positive_int, default=1_000,
                   help="live answers (SUBSCRIBE, EMIT CHANGES) the server runs at once (default 1000; each serving "
                        "process its share)")


def pg_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pg-port", type=port_number, help="also speak the PostgreSQL protocol on this port "
                   "(psql, DBeaver, Metabase, Grafana, …)")
    p.add_argument("--pg-host", default="127.0.0.1", help="bind address of the PG port (default 127.0.0.1)")
    p.add_argument("--pg-auth", choices=("scram-sha-256", "md5", "password"), default="scram-sha-256",
                   help="password method on the PG port when a token is set (the password is the token)")
    p.add_argument("--pg-max-connections", type=positive_int, default=64, help="PG connections served at once")
    p.add_argument("--flight-port", type=port_number, help="also speak Arrow Flight SQL on this port (ADBC, pandas, "
                   "polars, JDBC Flight SQL clients; 0: a free port)")
    p.add_argument("--flight-host", default="127.0.0.1", help="bind address of the Flight SQL port (default 127.0.0.1)")
    p.add_argument("--tls-cert", help="PEM certificate: the HTTP port speaks HTTPS with it (the query page too), the "
                                      "PG port accepts TLS (SSLRequest), and the Flight SQL port speaks only TLS "
                                      "(grpc+tls://)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(**config_kwargs(args))


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: --token-file, else $IQGATE_TOKEN, else --token (visible in the process list: avoid)."""
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from None
        if not token:
            raise UsageError(f"--token-file {args.token_file} is empty")
        return token
    return os.environ.get("IQGATE_TOKEN") or args.token or None


def config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    token = _token(args)
    if getattr(args, "users_file", None) and token:
        where = ("--token-file" if args.token_file else "--token" if args.token and not os.environ.get("IQGATE_TOKEN")
                 else "IQGATE_TOKEN")
        raise UsageError(f"--users-file and {where} do not go together: with a users file every user has their own "
                         "token (`iqgate users --file PATH add NAME`); drop the single token")
    out: dict[str, Any] = {"auth_token": token, "max_rows": args.max_rows,
                           "statement_timeout_ms": args.statement_timeout_ms, "table_scans": not args.no_table_scans}
    if args.max_memory is not None:
        out["max_memory_bytes"] = args.max_memory
    if getattr(args, "max_response_size", None) is not None:
        out["max_response_bytes"] = args.max_response_size
    if getattr(args, "max_subscriptions", None) is not None:
        out["max_subscriptions"] = args.max_subscriptions
    return out


def kafka_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]", help=what)
    p.add_argument("--kafka-option", action="append", default=[], metavar="NAME=VALUE",
                   help="a librdkafka client setting, e.g. security.protocol=SASL_SSL (repeatable)")


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka-option name=value`` (repeatable): librdkafka client settings such as security.protocol, sasl.*."""
    out = {}
    for item in getattr(args, "kafka_option", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--kafka-option must be name=value, got {item!r}")
        out[name.strip()] = value
    return out


def routing_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peers", default="", metavar="URL[,URL]",
                   help="other iqgate servers of the same application (pipeline host, replicas): partitions this "
                        "server cannot answer as asked are answered by them")
    p.add_argument("--advertised-url", type=http_url, metavar="URL",
                   help="how peers and clients reach this server (default http://HOST:PORT)")
    p.add_argument("--max-lag", type=non_negative_int, metavar="RECORDS",
                   help="answer from a copy only if its changelog offset lag is at most this (default: any lag; "
                        "a statement's position bound is the exact way to bound staleness)")
    p.add_argument("--heartbeat-ms", type=non_negative_int, default=500, help="how often peers are polled")
    p.add_argument("--heartbeat-topic", action="store_true",
                   help="also find peers through the topic <application_id>-iqgate-heartbeats on the log (Kafka or "
                        "the event log): every server publishes its URL there")
    p.add_argument("--peer-token-file", metavar="PATH",
                   help="with --users-file: the token this server presents to its peers (a user of the peers' users "
                        "file, granted '*' and 'system'); also $IQGATE_PEER_TOKEN. Without a users file the server's "
                        "--token is its credential")


def routing_options(args: argparse.Namespace, *, always: bool = False) -> RoutingOptions | None:
    peers = tuple(u.strip() for u in (getattr(args, "peers", "") or "").split(",") if u.strip())
    for u in peers:
        if not u.startswith(("http://", "https://")):
            raise UsageError(f"--peers: {u!r} is not an http:// or https:// URL")
    opts = RoutingOptions(peers=peers, advertised_url=getattr(args, "advertised_url", None),
                          max_lag=getattr(args, "max_lag", None), heartbeat_ms=getattr(args, "heartbeat_ms", 500),
                          heartbeat_topic=bool(getattr(args, "heartbeat_topic", False)),
                          catch_up_wait_ms=getattr(args, "catch_up_wait_ms", 0) or 0, always=always)
    return opts if opts.wanted else None


def tls_files(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``--tls-cert``/``--tls-key``, both or neither, loaded once here so a bad pair is a usage error."""
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if bool(cert) != bool(key):
        raise UsageError("TLS needs both --tls-cert and --tls-key")
    if cert:
        from ..serving.tls_channel import tls_context

        try:
            tls_context(cert, key)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return cert, key


def pg_options(args: argparse.Namespace) -> PgOptions | None:
    if getattr(args, "pg_port", None) is None:
        return None
    if getattr(args, "users_file", None) and args.pg_auth == "md5":
        raise UsageError("--pg-auth md5 needs the password itself, which a users file never stores (only SCRAM "
                         "verifiers): use scram-sha-256 (the default), or password over TLS")
    cert, key = tls_files(args)
    return PgOptions(host=args.pg_host, port=args.pg_port, auth=args.pg_auth, max_connections=args.pg_max_connections,
                     tls_cert=cert, tls_key=key)


def _peer_token(args: argparse.Namespace) -> str | None:
    path = getattr(args, "peer_token_file", None)
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read --peer-token-file {path}: {exc.strerror}") from None
        if not token:
            raise UsageError(f"--peer-token-file {path} is empty")
        return token
    return os.environ.get("IQGATE_PEER_TOKEN") or None


def access_options(args: argparse.Namespace, routing: RoutingOptions | None) -> AccessOptions:
    """``--users-file``, ``--audit-log``, ``--audit-mask`` and the peer credential, checked."""
    users = getattr(args, "users_file", None)
    peer = _peer_token(args)
    if users:
        from ..access import Users, UsersFileError

        try:
            Users.load(users)
        except UsersFileError as exc:
            raise UsageError(f"--users-file: {exc}") from None
        if routing is not None and (routing.peers or routing.heartbeat_topic) and not peer:
            raise UsageError("with --users-file, peers need this server's own credential: give --peer-token-file "
                             "PATH (or $IQGATE_PEER_TOKEN), the token of a user of the peers' users file granted "
                             "'*' and 'system'")
    elif peer and getattr(args, "peer_token_file", None):
        raise UsageError("--peer-token-file goes with --users-file (without one, the server's --token is its "
                         "credential towards its peers)")
    return AccessOptions(users_file=users, audit_log=getattr(args, "audit_log", None),
                         audit_mask=bool(getattr(args, "audit_mask", False)), peer_token=peer if users else None)


def flight_options(args: argparse.Namespace) -> FlightOptions | None:
    """The Flight SQL port; a port of 0 is chosen here, once, so a serving process started again serves the same."""
    if getattr(args, "flight_port", None) is None:
        return None
    port = args.flight_port
    if port == 0:
        import socket

        with socket.socket() as s:
            s.bind((args.flight_host, 0))
            port = s.getsockname()[1]
    return FlightOptions(host=args.flight_host, port=port, tls_cert=args.tls_cert, tls_key=args.tls_key)


def serve_options(args: argparse.Namespace, *, workers: int, routing: RoutingOptions | None = None) -> ServeOptions:
    """The typed options of ``serve``, ``demo`` and ``replica`` (every bad flag a UsageError naming it)."""
    cert, key = tls_files(args)
    return ServeOptions(http=HttpOptions(host=args.host, port=args.port, threads=args.threads, tls_cert=cert,
                                         tls_key=key),
                        workers=workers, pin_cpus=not getattr(args, "no_pin_cpus", False),
                        config=config_from_args(args), pg=pg_options(args), flight=flight_options(args),
                        routing=routing,
                        access=access_options(args, routing))
