"""``iqgate sql`` and ``iqgate explain``: a statement against a server, or straight against a state directory."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from ..engine.errors import GatewayError
from ..engine.json_values import dumps
from .console import print_result
from .live import print_changes, stream_changes
from .options import UsageError, http_url, non_negative_int, positive_seconds

__all__ = ["add_sql_parsers", "cmd_sql", "cmd_explain", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8080"


# -- running SQL: against a server or a state directory -----------------------------------------
def _post(url: str, payload: dict[str, Any], token: str | None, timeout_s: float) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/sql", data=json.dumps(payload).encode(), headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        raise GatewayError.from_error_body(err.code, body) from None
    except urllib.error.URLError as err:
        raise ConnectionError(f"cannot reach the iqgate server at {url}: {err.reason}") from None


def _run_sql(args: argparse.Namespace, text: str) -> dict[str, Any]:
    params = [_param(p) for p in args.param] or None
    try:
        position = json.loads(args.position) if args.position else None
    except ValueError as exc:
        raise UsageError(f"--position is not JSON: {exc}") from None
    if args.state_dir:
        from ..engine.gateway import Gateway

        gw = Gateway.open(args.state_dir)
        try:
            res = gw.sql(text, params, position, partial=args.partial or None, wait_ms=args.wait_ms)
            body = {"columns": [{"name": n, "type": t} for n, t in res.columns], "rows": res.rows(),
                    "row_count": res.row_count, "position": res.position.to_json_map(),
                    "partitions": [p.to_json() for p in res.partitions], "statement": res.statement.value}
            return json.loads(dumps(body))
        finally:
            gw.close()
    payload: dict[str, Any] = {"sql": text}
    if params is not None:
        payload["params"] = params
    if position is not None:
        payload["position"] = position
    if args.partial:
        payload["partial"] = True
    if args.wait_ms is not None:
        payload["wait_ms"] = args.wait_ms
    return _post(args.url, payload, args.token, args.timeout)


def _param(text: str) -> Any:
    """``--param`` values are JSON when they parse as JSON (numbers, true, null), else strings."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_sql(args: argparse.Namespace) -> int:
    try:
        body = _run_sql(args, args.sql)
    except GatewayError as exc:
        if exc.code != "STREAM_REQUIRED":
            raise
        # a SUBSCRIBE: its changes, printed as they come, until Ctrl-C (or the subscription ends, saying why)
        return print_changes(stream_changes(args, args.sql, [_param(p) for p in args.param] or None), args.format,
                             sys.stdout)
    print_result(body, args.format, sys.stdout)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    text = args.sql if args.sql.lstrip().upper().startswith("EXPLAIN") else f"EXPLAIN {args.sql}"
    body = _run_sql(args, text)
    for row in body["rows"]:
        print(row[0])
    return 0


def _sql_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql", help="the statement")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", type=http_url, default=DEFAULT_URL, help=f"iqgate server (default {DEFAULT_URL})")
    where.add_argument("--state-dir", help="read this state directory directly (read-only) instead of a server")
    p.add_argument("--param", action="append", default=[], help="a positional parameter (JSON or text); repeatable")
    p.add_argument("--position", help='position bound as JSON, e.g. {"orders": {"0": 41}}')
    p.add_argument("--partial", action="store_true", help="return data beside failed partitions")
    p.add_argument("--wait-ms", type=non_negative_int, help="wait up to this long for the stores to reach --position")
    p.add_argument("--token", help="bearer token of the server")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, help="HTTP timeout in seconds")



def add_sql_parsers(sub: Any) -> None:
    sql = sub.add_parser("sql", help="run a statement and print the result")
    _sql_args(sql)
    sql.add_argument("--format", choices=("table", "json", "csv"), default="table")
    sql.set_defaults(fn=cmd_sql)

    explain = sub.add_parser("explain", help="show the IQv2 requests and the residual SQL of a statement")
    _sql_args(explain)
    explain.set_defaults(fn=cmd_explain)
