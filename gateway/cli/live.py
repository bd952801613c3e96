"""``iqgate sql 'SUBSCRIBE …'``: a live answer's changes printed as they come, until Ctrl-C.

From a server it is read as NDJSON (the format ``POST /v1/sql`` streams, README "Live answers"); from a state
directory (``--state-dir``) through ``Gateway.subscribe`` in this process. Either way each message is one line:
``table`` (the default) as ``op  position  col=value …`` with a header naming the columns, ``json`` as the NDJSON
object itself, ``csv`` as ``op,position,col…`` rows. An end the server gives (too slow, too many subscriptions,
the server stopping) is the command's error, with the Position to resume from in it.
"""

from __future__ import annotations

import argparse
import csv
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, TextIO

from ..engine.errors import GatewayError, SubscriptionError
from ..engine.json_values import dumps
from .console import _cell

__all__ = ["stream_changes", "print_changes"]


def stream_changes(args: argparse.Namespace, text: str, params: list[Any] | None) -> Iterator[dict[str, Any]]:
    """The subscription's messages as the NDJSON objects (the first: its columns line)."""
    try:
        position = json.loads(args.position) if args.position else None
    except ValueError as exc:
        from .options import UsageError

        raise UsageError(f"--position is not JSON: {exc}") from None
    if args.state_dir:
        return _local(args.state_dir, text, params, position)
    return _remote(args.url, text, params, position, args.token)


def _local(state_dir: str, text: str, params: list[Any] | None, position: Any) -> Iterator[dict[str, Any]]:
    from ..engine.gateway import Gateway

    gw = Gateway.open(state_dir)
    try:
        sub = gw.subscribe(text, params, position)
        try:
            yield {"columns": [{"name": n, "type": t} for n, t in sub.columns], "identity": list(sub.identity)}
            for c in sub:
                msg: dict[str, Any] = {"op": c.op, "position": c.position.to_json_map()}
                if c.row is not None:
                    msg["row"] = json.loads(dumps(list(c.row)))
                if c.columns is not None:
                    msg["columns"] = [{"name": n, "type": t} for n, t in c.columns]
                yield msg
        finally:
            sub.close()
    finally:
        gw.close()


def _remote(url: str, text: str, params: list[Any] | None, position: Any, token: str | None
            ) -> Iterator[dict[str, Any]]:
    payload: dict[str, Any] = {"sql": text}
    if params is not None:
        payload["params"] = params
    if position is not None:
        payload["position"] = position
    headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/sql", data=json.dumps(payload).encode(), headers=headers,
                                 method="POST")
    try:
        resp = urllib.request.urlopen(req)  # noqa: S310 - http(s) only (options.http_url); no timeout: it is live
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        raise GatewayError.from_error_body(err.code, body) from None
    except urllib.error.URLError as err:
        raise ConnectionError(f"cannot reach the iqgate server at {url}: {err.reason}") from None
    with resp:
        for line in resp:
            if not line.strip():
                continue
            msg = json.loads(line)
            if isinstance(msg.get("error"), dict):
                raise GatewayError.from_error_body(409, msg)
            yield msg
    raise ConnectionError("the server closed the subscription without saying why")


def print_changes(messages: Iterator[dict[str, Any]], fmt: str, out: TextIO) -> int:
    """Print each message as it comes (flushed: a pipe reader sees it at once)."""
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    names: list[str] = []
    try:
        for msg in messages:
            if msg.get("op") == "reset" and msg.get("columns"):  # a rebuilt store: its rows' columns from now on
                names = [c["name"] for c in msg["columns"]]
            if "columns" in msg and "op" not in msg:
                names = [c["name"] for c in msg["columns"]]
                if writer is not None:
                    writer.writerow(["op", "position", *names])
                elif fmt == "json":
                    out.write(dumps(msg) + "\n")
                else:
                    out.write("op        position  " + "  ".join(names) + "\n")
            elif fmt == "json":
                out.write(dumps(msg) + "\n")
            else:
                pos = json.dumps(msg.get("position") or {}, separators=(",", ":"))
                row = msg.get("row")
                if writer is not None:
                    writer.writerow([msg["op"], pos, *(["" if v is None else v for v in row] if row else [])])
                elif row is None:
                    out.write(f"{msg['op']:<9} {pos}\n")
                else:
                    cells = "  ".join(f"{n}={_cell(v)}" for n, v in zip(names, row))
                    out.write(f"{msg['op']:<9} {pos}  {cells}\n")
            out.flush()
    except SubscriptionError as exc:
        if exc.resume_from is not None:
            raise SubscriptionError(f"{exc.message} (resume with SUBSCRIBE … WITH (SNAPSHOT = false) AS OF POSITION "
                                    f"'{json.dumps(exc.resume_from.to_json_map(), separators=(',', ':'))}')",
                                    code=exc.code, resume_from=exc.resume_from) from None
        raise
    except KeyboardInterrupt:
        return 0
    return 0
