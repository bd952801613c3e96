"""The hot endpoints without Flask's request machinery: ``POST /v1/sql`` answered as JSON, and ``GET /v1/ping``.

Why: a point lookup costs the engine ~60 us, while Flask's request and
response objects, context pushes, routing and hooks cost about twice that
again on every request (measured in-process: ping through Flask ~50 us,
/v1/sql ~200 us against ~60 us for ``Gateway.sql``). Under 8 concurrent
clients on a small machine that overhead is the latency (issue 14).

``FastPath`` is WSGI middleware in front of the Flask app's ``wsgi_app``.
It answers only the common shape of the two endpoints — exact method and
path, an Accept that means JSON (or none), a body with a Content-Length
within the limit — and hands everything else to Flask unchanged. What it
answers is what the Flask views answer, byte for byte (status line,
headers, body; tests/gateway/http/test_fast_path.py compares the two on
real servers): the same bearer check, request parsing
(``limits.parse_sql_request``), ``Gateway.sql`` call, renderer
(``renderers.json_body``), error bodies (``renderers.error_response``) and
metrics (the Flask rule name as the endpoint label).

A server may run it on its serving loop's own thread (``environ[INLINE_KEY]``,
gateway/serving/inline.py): then it answers only what ends in microseconds
without waiting — a ping, or a statement the point lane answers, asked with
a small body, no Position, wait, session or session token, by a caller whose
token needs no password hash and who has a statement slot free without
waiting for one — and raises ``NotInline`` for anything else, before it has
done anything a handler thread would do again (an admission slot taken is
given back, with no audit line).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Response

from ..access.admission import WouldWait
from ..access.context import AccessContext
from ..access.users import TokenNeedsHash
from ..engine.config import GatewayConfig
from ..engine.errors import GatewayError, GatewayInternalError, StreamRequired
from ..engine.statement import Form
from .audited import audit_response, begin, client_of, response_limit
from .limits import parse_sql_request
from .live import live_media, live_response
from .metrics import Metrics
from .renderers import JSON, error_response, json_body, position_header
from .session import SESSION_HEADER, next_token, seen_from

__all__ = ["FastPath", "JSON_ACCEPTS", "INLINE_KEY", "NotInline", "INLINE_MAX_REQUEST_BYTES"]

# Accept headers common clients send that need no parsing: they all mean JSON here.
JSON_ACCEPTS = frozenset({"*/*", "application/json", JSON})

_PING_BODY = b'{"ok":true}'
_PING_HEADERS = [("Content-Type", JSON), ("Content-Length", str(len(_PING_BODY)))]

INLINE_KEY = "iqgate.inline"  # environ: True when the serving loop runs the request on its own thread
INLINE_MAX_REQUEST_BYTES = 4096  # a larger body is parsed on a handler thread


class NotInline(Exception):
    """Raised (only with ``environ[INLINE_KEY]``) for a request the serving loop must hand to a handler thread."""


StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class FastPath:
    """WSGI middleware: the common ``/v1/sql`` and ``/v1/ping`` requests directly, all else through ``flask_wsgi``."""

    answers_inline = True  # it honours environ[INLINE_KEY] (the module doc)

    def __init__(self, app: Flask, flask_wsgi: WsgiApp, gateway: Any, cfg: GatewayConfig, metrics: Metrics,
                 access: AccessContext | None = None) -> None:
        self._app = app
        self._access = access or AccessContext.of_token(cfg.auth_token)
        self._flask = flask_wsgi
        self._gateway = gateway
        self._cfg = cfg
        self._metrics = metrics

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        method = environ.get("REQUEST_METHOD")
        inline = environ.get(INLINE_KEY, False)
        if path == "/v1/sql" and method == "POST":
            accept = environ.get("HTTP_ACCEPT")
            length = environ.get("CONTENT_LENGTH")
            if (not accept or accept in JSON_ACCEPTS) and length and length.isdigit() \
                    and int(length) <= (min(INLINE_MAX_REQUEST_BYTES, self._cfg.max_request_bytes) if inline
                                        else self._cfg.max_request_bytes):
                return self._sql(environ, start_response, int(length), inline)
        elif path == "/v1/ping" and method == "GET":
            return self._ping(environ, start_response, inline)
        if inline:
            raise NotInline(path)
        return self._flask(environ, start_response)

    # -- the endpoints ---------------------------------------------------------------
    def _ping(self, environ: dict[str, Any], start_response: StartResponse, inline: bool) -> Iterable[bytes]:
        t0 = time.perf_counter()
        try:
            self._access.bearer(environ.get("HTTP_AUTHORIZATION"), face="http", client=client_of(environ),
                                may_hash=not inline)
        except TokenNeedsHash:  # a token not verified yet: its PBKDF2 is a handler thread's
            raise NotInline("a token to verify") from None
        except Exception as exc:  # noqa: BLE001 - answered as the Flask app answers it
            return self._error(environ, start_response, "/v1/ping", exc, t0)
        start_response("200 OK", list(_PING_HEADERS))
        self._metrics.observe("/v1/ping", 200, time.perf_counter() - t0)
        return [_PING_BODY]

    def _sql(self, environ: dict[str, Any], start_response: StartResponse, length: int,
             inline: bool) -> Iterable[bytes]:
        t0 = time.perf_counter()
        cfg = self._cfg
        audited = None
        try:
            try:
                principal = self._access.bearer(environ.get("HTTP_AUTHORIZATION"), face="http",
                                                client=client_of(environ), may_hash=not inline)
            except TokenNeedsHash:  # a token not verified yet: its PBKDF2 is a handler thread's
                raise NotInline("a token to verify") from None
            req = parse_sql_request(environ["wsgi.input"].read(length) if length else b"", cfg.max_request_bytes)
            if inline and (req.position is not None or req.partial is not None or req.wait_ms or req.session
                           or environ.get("HTTP_X_IQ_SESSION")):
                raise NotInline("a request the point lane does not take")
            try:
                audited = begin(self._access, principal, environ, req.sql, req.params, may_wait=not inline)
            except WouldWait:  # the user's own limit is reached: waiting for a slot is a handler thread's
                raise NotInline("admission would wait") from None
            seen = seen_from(environ.get("HTTP_X_IQ_SESSION"))
            try:
                if inline:  # the lane or nothing: the general way may plan, wait or scan
                    answer = self._gateway.point(req.sql, req.params, max_rows=req.max_rows, principal=principal)
                    if answer is None:
                        if audited is not None:
                            audited.withdraw()
                        raise NotInline("the point lane does not answer it")
                    result = answer
                else:
                    result = self._gateway.sql(req.sql, req.params, req.position, partial=req.partial,
                                               wait_ms=req.wait_ms, session=req.session, max_rows=req.max_rows,
                                               form=Form.ROWS,
                                               cancelled=environ.get("waitress.client_disconnected"),
                                               principal=principal, seen=seen)
            except StreamRequired:  # a SUBSCRIBE asked with Accept */* (or none): its changes as NDJSON (live.py)
                media = live_media(environ.get("HTTP_ACCEPT"), JSON)
                if media is None:
                    raise
                resp = live_response(self._gateway, req, environ, media, principal=principal)
                if audited is not None:
                    audited.end(response_bytes=0)
                    audited = None
                self._metrics.observe("/v1/sql", resp.status_code, time.perf_counter() - t0)
                return resp(environ, start_response)
            failed = [p.failure_reason for p in result.partitions if p.failure_reason]
            if failed:
                self._metrics.partition_failures(failed)
            try:
                body = json_body(result, response_limit(cfg, principal))
                position = position_header(result)
                token = next_token(req.session, seen, result.position)
            except BaseException:
                result.close()
                raise
        except NotInline:
            raise
        except Exception as exc:  # noqa: BLE001 - answered as the Flask app answers it
            if audited is not None:
                audited.end(error=exc)
            return self._error(environ, start_response, "/v1/sql", exc, t0)
        if isinstance(body, str):  # the whole answer (a point lookup): no response object at all
            result.close()
            data = body.encode()
            if audited is not None:
                audited.end(result=result, response_bytes=len(data))
            headers = [("Content-Type", JSON), ("Content-Length", str(len(data))), ("X-IQ-Position", position)]
            if token is not None:
                headers.append((SESSION_HEADER, token))
            start_response("200 OK", headers)
            self._metrics.observe("/v1/sql", 200, time.perf_counter() - t0)
            return [data]
        resp = Response(body, content_type=JSON)  # streamed: exactly as the Flask view sends it
        resp.headers["X-IQ-Position"] = position
        if token is not None:
            resp.headers[SESSION_HEADER] = token
        resp.call_on_close(result.close)
        if audited is not None:
            audit_response(resp, audited, result)
        self._metrics.observe("/v1/sql", resp.status_code, time.perf_counter() - t0)
        return resp(environ, start_response)

    def _error(self, environ: dict[str, Any], start_response: StartResponse, rule: str, exc: Exception,
               t0: float) -> Iterable[bytes]:
        """The one error shape, as the Flask app's error handlers build it (and log it, when unexpected)."""
        if isinstance(exc, GatewayError):
            if exc.partitions:
                self._metrics.partition_failures(p.get("failure_reason", "UNKNOWN") for p in exc.partitions)
            err = exc
        else:
            self._app.logger.exception("unexpected error on %s %s", environ.get("REQUEST_METHOD"),
                                       environ.get("PATH_INFO"), exc_info=exc)
            err = GatewayInternalError(f"{type(exc).__name__}: {exc}")
        resp = error_response(err, self._cfg.retry_after_s)
        self._metrics.observe(rule, resp.status_code, time.perf_counter() - t0)
        return resp(environ, start_response)
