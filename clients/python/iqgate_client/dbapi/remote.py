"""The HTTP transport of the DB-API: ``POST /v1/sql`` over a pooled keep-alive urllib3 connection.

The server keeps no per-client state (several worker processes may answer one
client), so session settings live here: a ``SET`` is sent to the server,
which validates it and answers with the new settings; later requests carry
them as ``"session"``. Errors come back in the one error shape and are rebuilt
as the exact class the server raised (``GatewayError.from_error_body``).

JSON values are decoded by column type (``types.decoder_for``): timestamps,
dates, times and decimals travel as strings, bytes as base64.

A SUBSCRIBE (the server answers STREAM_REQUIRED to a JSON request) is asked
again as NDJSON and read line by line as the cursor fetches (``_subscribe``):
no read timeout (a quiet subscription without progress messages may say
nothing for long), closed when the cursor is.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

import urllib3

from ..errors import SUBSCRIPTION_CODES, GatewayError, InterfaceError, OperationalError
from ..position import Position, PositionError
from .outcome import LIVE_COLUMNS, Outcome, PartitionInfo
from .types import decoder_for

__all__ = ["RemoteTransport", "encode_param"]


def encode_param(value: Any) -> Any:
    """A parameter as JSON: datetimes/dates/times as ISO-8601, decimals as strings, bytes as base64."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return [encode_param(v) for v in value]
    raise InterfaceError(f"cannot send a parameter of type {type(value).__name__} ({value!r}) to the gateway")


def _encode_params(params: Sequence[Any] | Mapping[str, Any] | None) -> Any:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return {str(k): encode_param(v) for k, v in params.items()}
    return [encode_param(v) for v in params]


def _client_version() -> str:
    try:
        return metadata.version("iqgate-client")
    except metadata.PackageNotFoundError:
        return "0"


class RemoteTransport:
    """One gateway base URL, one urllib3 pool (keep-alive), client-side session settings."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        session: Mapping[str, Any] | None = None,
        partial: bool | None = None,
        wait_ms: int | None = None,
        max_rows: int | None = None,
        headers: Mapping[str, str] | None = None,
        pool_maxsize: int = 4,
        ca_certs: str | None = None,
    ) -> None:
        """``ca_certs``: a PEM file of the certificates an ``https://`` server's must chain to (a self-signed
        server's own certificate); by default the system's trust store (or ``$SSL_CERT_FILE``)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InterfaceError(f"the gateway URL must be http://host:port or https://host:port, got {url!r}")
        self.base_url = url.rstrip("/")
        self._sql_url = self.base_url + "/v1/sql"
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"iqgate-client/{_client_version()}",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._headers.update(headers or {})
        self._session: dict[str, Any] = dict(session or {})
        self._extra: dict[str, Any] = {
            k: v for k, v in (("partial", partial), ("wait_ms", wait_ms), ("max_rows", max_rows)) if v is not None
        }
        self._server_version: str | None = None
        self._connect_timeout = connect_timeout
        self._pool: urllib3.PoolManager | None = urllib3.PoolManager(
            num_pools=2,
            maxsize=pool_maxsize,
            timeout=urllib3.Timeout(connect=connect_timeout, read=timeout),
            # Reads are idempotent, but a statement that reached the server may be slow: retry only connects.
            retries=urllib3.Retry(total=2, connect=2, read=0, status=0, redirect=0, raise_on_status=False),
            **({"ca_certs": ca_certs} if ca_certs else {}),
        )

    # -- Transport ---------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, bound: Position | None) -> Outcome:
        body: dict[str, Any] = {"sql": sql, **self._extra}
        if params is not None:
            body["params"] = _encode_params(params)
        if bound is not None and not bound.is_empty():
            body["position"] = bound.to_json_map()
        if self._session:
            body["session"] = self._session
        status, headers, payload = self._post(body)
        if status == 406 and isinstance(payload, dict) and (payload.get("error") or {}).get("code") == "STREAM_REQUIRED":
            return self._subscribe(body)
        if status >= 400:
            err = GatewayError.from_error_body(status, payload)
            retry_after = headers.get("Retry-After")
            err.retry_after = float(retry_after) if retry_after and retry_after.isdigit() else None  # type: ignore[attr-defined]
            raise err
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            # an error found after the rows began to stream ends the JSON answer in-band (status 200 went out)
            err = GatewayError.from_error_body(status, payload)
            err.http_status = type(err).http_status  # type: ignore[misc]
            raise err
        if self._server_version is None:
            self._server_version = headers.get("X-IQ-Version") or ""
        outcome = self._outcome(payload)
        if outcome.statement == "set" and isinstance(outcome.settings, Mapping):
            self._session = dict(outcome.settings)
        return outcome

    def settings(self) -> dict[str, Any]:
        return dict(self._session)

    # -- live answers ------------------------------------------------------------------------
    def _subscribe(self, body: dict[str, Any]) -> Outcome:
        """The request again as NDJSON: the columns line now, the changes as the cursor fetches them."""
        if self._pool is None:
            raise InterfaceError("the connection is closed")
        data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
        headers = dict(self._headers, Accept="application/x-ndjson")
        try:
            resp = self._pool.request("POST", self._sql_url, body=data, headers=headers, preload_content=False,
                                      timeout=urllib3.Timeout(connect=self._connect_timeout, read=None))
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise OperationalError(f"cannot reach the gateway at {self.base_url}: {reason}") from None
        batches = _line_batches(resp)
        try:
            if resp.status >= 400:
                raw = resp.read()
                try:
                    raise GatewayError.from_error_body(resp.status, json.loads(raw))
                except ValueError:
                    raise OperationalError(f"the gateway answered HTTP {resp.status}: {raw[:200]!r}") from None
            first = next(batches, None)
            if not first:
                raise OperationalError("the gateway closed the subscription before its first line")
            head = json.loads(first[0])
            batches = itertools.chain([first[1:]], batches)
            if isinstance(head.get("error"), dict):
                raise GatewayError.from_error_body(503, head)
            columns = [(str(c["name"]), str(c["type"])) for c in head["columns"]]
        except BaseException:
            resp.release_conn()
            resp.close()
            raise
        decoders = [decoder_for(t) for _, t in columns]
        state: dict[str, Any] = {"at": Position.from_map(head["position"]) if head.get("position") else None}

        def close() -> None:
            resp.close()  # the server sees the client go and ends the subscription at once

        return Outcome(statement="subscribe", columns=LIVE_COLUMNS + columns, rows=[],
                       position=state["at"] or Position.empty(), more=_live_chunks(batches, decoders, state, close),
                       close=close, resume=lambda: state["at"])

    def server_version(self) -> str:
        """The server's X-IQ-Version header once a request was answered, else this client's version."""
        return self._server_version or _client_version()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.clear()
            self._pool = None

    # -- HTTP ----------------------------------------------------------------------------
    def _post(self, body: dict[str, Any]) -> tuple[int, Any, Any]:
        if self._pool is None:
            raise InterfaceError("the connection is closed")
        try:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InterfaceError(f"the request cannot be encoded as JSON: {exc}") from None
        try:
            resp = self._pool.request("POST", self._sql_url, body=data, headers=self._headers)
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise OperationalError(f"cannot reach the gateway at {self.base_url}: {reason}") from None
        raw = resp.data
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            if resp.status < 400:
                raise OperationalError(
                    f"the gateway at {self.base_url} answered HTTP {resp.status} with a body that is not JSON:"
                    f" {raw[:200]!r}"
                ) from None
            payload = raw.decode("utf-8", "replace")
        return resp.status, resp.headers, payload

    def _outcome(self, payload: Any) -> Outcome:
        if not isinstance(payload, dict) or ("columns" not in payload and payload.get("statement") != "set"):
            raise OperationalError(f"the gateway's answer is not a result: {str(payload)[:200]!r}")
        columns = [(str(c["name"]), str(c["type"])) for c in payload.get("columns") or []]
        decoders = [decoder_for(t) for _, t in columns]
        raw_rows = payload.get("rows") or []
        if any(decoders):
            rows = [
                tuple(d(v) if d is not None and v is not None else v for d, v in zip(decoders, r, strict=False))
                for r in raw_rows
            ]
        else:
            rows = [tuple(r) for r in raw_rows]
        try:
            position = Position.from_map(payload.get("position") or {})
            partitions = [
                PartitionInfo(
                    str(p.get("store")),
                    int(p.get("partition")),
                    p.get("failure_reason"),
                    p.get("failure_message"),
                    Position.from_map(p["position"]) if p.get("position") else None,
                )
                for p in payload.get("partitions") or []
            ]
        except (PositionError, TypeError, ValueError, AttributeError) as exc:
            raise OperationalError(f"the gateway's answer has a malformed position or partition list: {exc}") from None
        return Outcome(
            statement=str(payload.get("statement") or "select"),
            columns=columns,
            rows=rows,
            position=position,
            partitions=partitions,
            settings=payload.get("settings"),
        )


def _line_batches(resp: Any) -> Iterator[list[bytes]]:
    """The response's lines as they arrive, the ones that came together in one list (never waiting for more)."""
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            if buf.strip():
                yield [buf]
            return
        buf += chunk
        if b"\n" in buf:
            *lines, buf = buf.split(b"\n")
            yield [line for line in lines if line.strip()]


def _live_chunks(batches: Iterator[list[bytes]], decoders: list[Any], state: dict[str, Any],
                 close: Any) -> Iterator[list[tuple[Any, ...]]]:
    """Rows ``(op, position JSON, *row)`` of the NDJSON messages, those that arrived together as one chunk; the
    error line that ends the stream is raised as the class the server raised (its ``resume_from`` kept)."""
    width = len(decoders)
    try:
        for lines in batches:
            rows = []
            for line in lines:
                msg = json.loads(line)
                if isinstance(msg.get("error"), dict):
                    if rows:
                        yield rows
                    err = GatewayError.from_error_body(503, msg)
                    err.http_status = SUBSCRIPTION_CODES.get(err.code, type(err).http_status)  # type: ignore[misc]
                    raise err
                position = msg.get("position") or {}
                row = msg.get("row")
                if row is None:
                    values: tuple[Any, ...] = (None,) * width
                else:
                    values = tuple(d(v) if d is not None and v is not None else v for d, v in zip(decoders, row))
                if msg.get("op") == "progress":
                    state["at"] = Position.from_map(position)
                rows.append((msg.get("op"), json.dumps(position, separators=(",", ":")), *values))
            if rows:
                yield rows
        raise OperationalError("the gateway ended the subscription without saying why (the connection closed)")
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise OperationalError(f"the subscription's connection broke: {exc}") from None
    finally:
        close()
