"""The query page (``GET /``) and the result links it makes (``GET /v1/query?sql=…&format=csv``).

In the spirit of datasette: the stores with their kinds, keys, partitions and
positions, a SQL box (Ctrl-Enter), the answer as a table with its Position and
per-partition outcomes, EXPLAIN, errors inline with line and column, links to
the same result as JSON/CSV/Arrow, and a token prompt when the server has one.
Every asset is a file of this package served from here: iqgate often runs
where there is no internet, so nothing comes from a CDN. The page and its
assets need no token (they hold no data); every data request sends it.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from flask import Flask, Response, g, request

from ..access.context import AccessContext
from ..engine.config import GatewayConfig
from ..engine.errors import BadRequest, RouteNotFound
from ..engine.statement import Form
from .audited import audit_response, begin, response_limit
from .limits import parse_json, parse_sql_request
from .renderers import ARROW, CSV, JSON, NDJSON, RENDERERS, position_header

__all__ = ["register_page", "PAGE_PATHS"]

_ASSETS = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
#: paths served without the bearer token: the page and its assets (no data in them)
PAGE_PATHS = frozenset({"/", *(f"/page/{name}" for name in _ASSETS)})
_FORMATS = {"json": JSON, "csv": CSV, "arrow": ARROW, "ndjson": NDJSON}
_EXTENSIONS = {CSV: "csv", ARROW: "arrow"}
_SECURITY = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
             "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; "
                                        "connect-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'"}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def register_page(app: Flask, gateway: Any, cfg: GatewayConfig, access: AccessContext | None = None) -> None:
    access = access or AccessContext.of_token(cfg.auth_token)
    page = _asset("page.html")
    assets = {name: _asset(name) for name in _ASSETS}

    @app.get("/")
    def index() -> Response:
        return Response(page, mimetype="text/html", headers=_SECURITY)

    @app.get("/page/<name>")
    def asset(name: str) -> Response:
        if name not in assets:
            raise RouteNotFound(f"no page asset {name!r}")
        return Response(assets[name], headers={"Content-Type": _ASSETS[name], **_SECURITY})

    @app.get("/v1/query")
    def sql_link() -> Response:
        """The POST endpoint as a link: ``sql``, ``format`` (json, csv, arrow, ndjson), ``partial``, ``position``."""
        args = request.args
        fmt = args.get("format", "json")
        if fmt not in _FORMATS:
            raise BadRequest(f"format must be one of {', '.join(_FORMATS)}, got {fmt!r}")
        body: dict[str, Any] = {"sql": args.get("sql", "")}
        if args.get("partial") in ("true", "1"):
            body["partial"] = True
        if "position" in args:
            body["position"] = parse_json(args["position"], "position")
        req = parse_sql_request(json.dumps(body).encode(), cfg.max_request_bytes)
        media = _FORMATS[fmt]
        principal = g.principal
        audited = begin(access, principal, request.environ, req.sql, None)
        try:
            result = gateway.sql(req.sql, None, req.position, partial=req.partial,
                                 form=Form.ARROW if media == ARROW else Form.ROWS,
                                 cancelled=request.environ.get("waitress.client_disconnected"), principal=principal)
            resp = RENDERERS[media](result, response_limit(cfg, principal))
        except BaseException as exc:
            if audited is not None:
                audited.end(error=exc)
            raise
        resp.headers["X-IQ-Position"] = position_header(result)
        if media in _EXTENSIONS:
            resp.headers["Content-Disposition"] = f'attachment; filename="iqgate-result.{_EXTENSIONS[media]}"'
        resp.call_on_close(result.close)  # the answers stream: each closes when sent (or never read)
        return resp if audited is None else audit_response(resp, audited, result)
