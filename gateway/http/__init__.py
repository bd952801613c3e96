"""The HTTP face: a Flask app factory over one Gateway (serve it with ``gateway.server``).

``create_app(gateway, config)`` builds an app with no global state, so tests
and several worker processes can each build their own. ``access`` (a
``gateway.access.AccessContext``) says who may call and what each may read;
without one, the config's single token (or nobody) decides, as before users
existed.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from ..access.context import AccessContext
from ..engine.config import GatewayConfig
from ..engine.errors import (
    BadRequest,
    GatewayError,
    GatewayInternalError,
    MethodNotAllowed,
    RequestTooLarge,
    RouteNotFound,
)
from .auth import OPEN_PATHS
from .fast import FastPath
from .metrics import Metrics
from .page import PAGE_PATHS, register_page
from .renderers import error_response
from .routing_views import register_routing_views
from .views import register_views

__all__ = ["create_app"]


def create_app(gateway: Any, config: GatewayConfig | None = None, *, fast_path: bool = True,
               access: AccessContext | None = None) -> Flask:
    """The app for ``gateway``; ``config`` defaults to the gateway's own (limits, auth token); ``access``: the
    users, audit log and admission of this process (default: the config's token, no audit, no admission).

    ``fast_path`` (the default) answers the common ``POST /v1/sql`` and
    ``GET /v1/ping`` requests without Flask's request machinery
    (``gateway.http.fast``); False sends every request through Flask (the
    tests compare the two answers).
    """
    cfg = config or gateway.config
    access = access or AccessContext.of_token(cfg.auth_token)
    app = Flask("iqgate")
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    metrics = Metrics()
    app.extensions["iqgate"] = {"gateway": gateway, "config": cfg, "metrics": metrics, "access": access}

    @app.before_request
    def _start() -> None:
        g.t0 = time.perf_counter()
        g.principal = None  # the open paths answer without one (health: without store details, see views)
        if request.path not in OPEN_PATHS and request.path not in PAGE_PATHS:
            g.principal = access.bearer(request.headers.get("Authorization"), face="http",
                                        client=request.remote_addr)

    @app.after_request
    def _observe(resp: Response) -> Response:
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.observe(rule, resp.status_code, time.perf_counter() - g.get("t0", time.perf_counter()))
        return resp

    @app.errorhandler(GatewayError)
    def _gateway_error(exc: GatewayError) -> Response:
        if exc.partitions:
            metrics.partition_failures(p.get("failure_reason", "UNKNOWN") for p in exc.partitions)
        return error_response(exc, cfg.retry_after_s)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        err: GatewayError
        if code == 404:
            err = RouteNotFound(f"no endpoint {request.method} {request.path}; see /v1/openapi.json")
        elif code == 405:
            err = MethodNotAllowed(f"{request.method} is not allowed on {request.path}")
        elif code == 413:
            err = RequestTooLarge(f"the request body is larger than the limit of {cfg.max_request_bytes} bytes")
        elif 400 <= code < 500:
            err = BadRequest(exc.description or exc.name, http_status=code)
        else:
            err = GatewayInternalError(exc.description or exc.name, http_status=code)
        return error_response(err, cfg.retry_after_s)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        app.logger.exception("unexpected error on %s %s", request.method, request.path)
        return error_response(GatewayInternalError(f"{type(exc).__name__}: {exc}"), cfg.retry_after_s)

    register_views(app, gateway, cfg, metrics, access)
    register_page(app, gateway, cfg, access)
    register_routing_views(app, gateway, access)
    if fast_path:
        app.wsgi_app = FastPath(app, app.wsgi_app, gateway, cfg, metrics, access)  # type: ignore[method-assign]
    return app
