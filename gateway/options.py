"""The server's command-line options, shared by ``iqgate serve`` and ``iqgate demo``: limits, auth, sizes.

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

from .config import GatewayConfig

__all__ = ["server_args", "pg_args", "config_from_args", "positive_int", "non_negative_int", "byte_size"]


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


def byte_size(text: str) -> int:
    """``512MB``, ``2GB``, ``1048576``: a size in bytes (at least 16 MB)."""
    units = {"": 1, "B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
    t = text.strip().upper().replace("IB", "B")
    num = t.rstrip("KMGTB")
    unit = t[len(num):]
    try:
        value = int(float(num) * units[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 512MB or 2GB") from None
    if value < 16 * 2**20:
        raise argparse.ArgumentTypeError(f"{text!r} is too small; give at least 16MB")
    return value


def server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_number, default=8080)
    p.add_argument("--threads", type=positive_int, default=4,
                   help="HTTP worker threads (default 4: more only add GIL contention on small machines)")
    p.add_argument("--token", help="require Authorization: Bearer TOKEN (visible to other users of the machine: "
                                   "prefer --token-file or the IQGATE_TOKEN environment variable)")
    p.add_argument("--token-file", metavar="PATH", help="read the bearer token from this file")
    p.add_argument("--max-memory", type=byte_size, metavar="SIZE",
                   help="every statement's memory budget, e.g. 512MB or 2GB (default: a tenth of the machine's "
                        "memory, at most 4 GB)")
    p.add_argument("--max-rows", type=positive_int, default=1_000_000, help="most rows one statement may return")
    p.add_argument("--statement-timeout-ms", type=positive_int, default=30_000)
    p.add_argument("--no-table-scans", action="store_true", help="refuse queries that must scan whole stores")


def pg_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pg-port", type=port_number, help="also speak the PostgreSQL protocol on this port "
                   "(psql, DBeaver, Metabase, Grafana, …)")
    p.add_argument("--pg-host", default="127.0.0.1", help="bind address of the PG port (default 127.0.0.1)")
    p.add_argument("--pg-auth", choices=("scram-sha-256", "md5", "password"), default="scram-sha-256",
                   help="password method on the PG port when a token is set (the password is the token)")
    p.add_argument("--pg-max-connections", type=positive_int, default=64, help="PG connections served at once")
    p.add_argument("--tls-cert", help="PEM certificate: the PG port accepts TLS (SSLRequest) with it")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(**config_kwargs(args))


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: --token-file, else $IQGATE_TOKEN, else --token (visible in the process list: avoid)."""
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SystemExit(f"iqgate: cannot read --token-file {args.token_file}: {exc.strerror}") from None
        if not token:
            raise SystemExit(f"iqgate: --token-file {args.token_file} is empty")
        return token
    return os.environ.get("IQGATE_TOKEN") or args.token or None


def config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"auth_token": _token(args), "max_rows": args.max_rows,
                           "statement_timeout_ms": args.statement_timeout_ms, "table_scans": not args.no_table_scans}
    if args.max_memory is not None:
        out["max_memory_bytes"] = args.max_memory
    return out
