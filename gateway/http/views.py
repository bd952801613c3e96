"""The endpoints: SQL, store catalog, health, metrics, OpenAPI, and a no-op ping (the benchmark's baseline)."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, g, request

from stores.iqv2.state import State

from ..access.context import AccessContext
from ..engine.config import GatewayConfig
from ..engine.errors import NotAcceptable, StreamRequired
from ..engine.statement import Form
from ..engine.types import duck_type
from .audited import audit_response, begin, response_limit
from .fast import JSON_ACCEPTS
from .limits import parse_sql_request
from .live import SSE, live_media, live_response
from .metrics import Metrics, subscription_lines
from .openapi import openapi_document
from .renderers import (
    ARROW,
    JSON,
    MEDIA_TYPES,
    RENDERERS,
    dumps,
    position_header,
)
from .session import SESSION_HEADER, next_token, seen_from
from .visible import optional_principal, visible_status

__all__ = ["register_views", "negotiate", "source_status"]



def negotiate(accept: Any) -> str:
    """The media type to answer with; JSON when the client accepts anything (or says nothing)."""
    if not accept:
        return JSON
    best = accept.best_match(MEDIA_TYPES, default=None)
    if best is None:
        raise NotAcceptable(f"cannot answer with any of {accept}; supported: {', '.join(MEDIA_TYPES)}")
    return best


def source_status(gateway: Any) -> dict[str, Any]:
    """The source's health beside its KIP-696 state (``StreamsApp.status`` / ``StateDirReader.status``)."""
    status = gateway.status()
    if status is not None:
        return status
    state = gateway.state
    ok = "healthy" if state is State.RUNNING else "starting"
    return {"state": state.value, "health": {"status": ok, "reason": None, "since": None, "retry_s": None},
            "stores": {}}


def register_views(app: Flask, gateway: Any, cfg: GatewayConfig, metrics: Metrics,
                   access: AccessContext | None = None) -> None:
    access = access or AccessContext.of_token(cfg.auth_token)

    @app.post("/v1/sql")
    def sql() -> Response:
        accept = request.headers.get("Accept")
        if accept and SSE in accept:  # server-sent events: live answers only (live.py)
            return live_response(gateway, parse_sql_request(request.get_data(), cfg.max_request_bytes),
                                 request.environ, SSE, principal=g.principal)
        media = JSON if not accept or accept in JSON_ACCEPTS else negotiate(request.accept_mimetypes)
        req = parse_sql_request(request.get_data(), cfg.max_request_bytes)
        principal = g.principal
        audited = begin(access, principal, request.environ, req.sql, req.params)
        seen = seen_from(request.headers.get(SESSION_HEADER))
        try:
            result = gateway.sql(req.sql, req.params, req.position, partial=req.partial, wait_ms=req.wait_ms,
                                 session=req.session, max_rows=req.max_rows,
                                 form=Form.ARROW if media == ARROW else Form.ROWS,
                                 cancelled=request.environ.get("waitress.client_disconnected"), principal=principal,
                                 seen=seen)
        except StreamRequired:  # a SUBSCRIBE: streamed when the client takes NDJSON (or anything)
            live = live_media(accept, media)
            if live is None:
                raise
            if audited is not None:
                audited.end(response_bytes=0)
            return live_response(gateway, req, request.environ, live, principal=principal)
        except BaseException as exc:
            if audited is not None:
                audited.end(error=exc)
            raise
        try:
            failed = [p.failure_reason for p in result.partitions if p.failure_reason]
            if failed:
                metrics.partition_failures(failed)
            resp = RENDERERS[media](result, response_limit(cfg, principal))
        except BaseException as exc:
            result.close()
            if audited is not None:
                audited.end(error=exc)
            raise
        resp.headers["X-IQ-Position"] = position_header(result)
        token = next_token(req.session, seen, result.position)
        if token is not None:
            resp.headers[SESSION_HEADER] = token
        resp.call_on_close(result.close)  # also when the body was never read (the answers close when sent)
        return resp if audited is None else audit_response(resp, audited, result)

    @app.get("/v1/stores")
    def stores() -> Response:
        principal = g.principal
        positions = gateway.store_positions(principal)
        statuses = source_status(gateway)["stores"]
        history = gateway.capabilities.history
        out = []
        for name, spec in sorted(gateway.catalog_for(principal).items()):
            out.append({
                "name": name,
                "kind": spec.kind.value,
                "key": spec.key.name,
                "key_columns": [c.name for c in spec.key_columns()],
                "columns": [{"name": c.name, "type": duck_type(c.type), "nullable": c.nullable}
                            for c in spec.columns()],
                "partitions": spec.partitions,
                "source_topics": list(spec.source_topics),
                "window_size_ms": spec.window_size_ms,
                "window_advance_ms": spec.window_advance_ms,
                "gap_ms": spec.gap_ms,
                "history_retention_ms": spec.history_retention_ms,
                "positions": {str(p): (None if pos is None else pos.to_json_map())
                              for p, pos in sorted(positions.get(name, {}).items())},
                "status": statuses[name].to_json() if name in statuses else None,
                # issue 20 item 4: {"partial": true, "since": …} when rebuilt from what the source still held
                "history": history(name) if history is not None else None,
            })
        return Response(dumps({"stores": out}), mimetype=JSON)

    @app.get("/v1/health")
    def health() -> Response:
        status = source_status(gateway)
        principal = optional_principal(access, request.headers.get("Authorization"))
        if principal is not None:
            status = visible_status(status, principal, gateway.catalog_for(principal))
        state = State(status["state"])
        h = status["health"]
        body = {"state": state.value, "healthy": h["status"] == "healthy", **h,
                "stores": {n: s.to_json() for n, s in sorted(status["stores"].items())}}
        # replicas and routing (issue 17): lags per store partition; on a replica, which changelog (generation)
        # each store follows and the one it restores beside it. A server's serving processes (issues 43, 52): what
        # it serves (mode), how old this process's view of the supervisor's state is, crashes of serving processes
        # in the last minutes; a read-only server: the files' writer and each store's Position and age.
        for extra in ("mode", "state_since", "view_age_ms", "process", "crashes", "writer", "positions", "instance", "host",
                      "partitions", "peers", "changelogs"):
            if extra in status:
                body[extra] = status[extra]
        body["subscriptions"] = gateway.subscriptions()  # live answers of this serving process (issue 46)
        # 200 while the client runs, degraded included: its reads answer (the body says what is wrong)
        resp = Response(dumps(body), status=200 if state is State.RUNNING else 503, mimetype=JSON)
        if state in (State.CREATED, State.REBALANCING):
            resp.headers["Retry-After"] = str(cfg.retry_after_s)
        return resp

    @app.get("/metrics")
    def prometheus() -> Response:
        principal = g.principal
        status = visible_status(source_status(gateway), principal, gateway.catalog_for(principal))
        text = metrics.render(gateway.store_positions(principal), gateway.state.value, status,
                              gateway.statements_interrupted) + subscription_lines(gateway.subscriptions())
        return Response(text, mimetype="text/plain", headers={"Content-Type": "text/plain; version=0.0.4"})

    @app.get("/v1/openapi.json")
    def openapi() -> Response:
        return Response(dumps(openapi_document()), mimetype=JSON)

    @app.get("/v1/ping")
    def ping() -> Response:
        return Response('{"ok":true}', mimetype=JSON)
