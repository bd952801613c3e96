"""The endpoints servers use between themselves (issue 17): what I host, and answer this IQv2 request locally.

``GET /v1/partitions`` is the heartbeat: role, Position and lag of every
store partition this server has. ``POST /v1/iq`` runs one IQv2 request on
this server's own copies only (never forwarded again, so two servers cannot
bounce a request between them) and returns each partition's answer with
the rows of the store relation.

Both answer only about the stores the caller may read; ``/v1/iq`` also
checks the user the request is forwarded for (``ON_BEHALF_OF``): a store
either may not read does not exist, as on every other face.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, g, request

from stores.catalog.schema import KeyTypeError
from stores.iqv2.result import StateQueryResult

from ..access.context import AccessContext, error_code
from ..access.principal import Principal
from ..engine.arrow_rows import StoreShapeMoved, collect
from ..engine.errors import BadRequest, GatewayInternalError, StateStoreMigratedError, Unauthorized, UnknownStoreError
from ..engine.scans import query_store
from ..routing import ON_BEHALF_OF, host_of, local_of, local_view
from ..routing.codec import CodecError, decode_request, encode_answer
from .audited import client_of
from .limits import parse_json
from .renderers import JSON, dumps

__all__ = ["register_routing_views"]


def _forwarded_for(access: AccessContext) -> Principal | None:
    """The user a peer forwards this request for (None: the caller asks for itself)."""
    name = request.headers.get(ON_BEHALF_OF)
    if not name:
        return None
    found = access.users.principal(name)
    if found is None:
        access.login_failed(name, "peer", request.remote_addr, "the forwarded user is not a user of this server")
        raise Unauthorized(f"POST /v1/iq: the request is forwarded for {name!r}, who is not a user of this server "
                           "(peers must share the users file)")
    return found


def register_routing_views(app: Flask, gateway: Any, access: AccessContext | None = None) -> None:
    access = access or AccessContext.of_token(gateway.config.auth_token)

    @app.get("/v1/partitions")
    def partitions() -> Response:
        src = local_of(gateway.source)
        principal = g.principal
        view = local_view(gateway.source, gateway.catalog_for(principal) if principal is not None else None)
        body = {"host": host_of(gateway.source), "state": src.state.value,
                "partitions": [i.to_json() for i in view]}
        return Response(dumps(body), mimetype=JSON)

    @app.post("/v1/iq")
    def iq() -> Response:
        t0 = time.perf_counter()
        body = parse_json(request.get_data() or b"null", "POST /v1/iq: the request body")
        try:
            req = decode_request(body)
        except (CodecError, ValueError) as exc:
            raise BadRequest(f"POST /v1/iq: {exc}") from None
        caller: Principal | None = g.principal
        forwarded = _forwarded_for(access)
        user = forwarded or caller
        what = f"IQv2 {type(req.query).__name__} on store {req.store_name}"
        try:
            for who in (caller, forwarded):
                if who is not None and req.store_name not in gateway.catalog_for(who):
                    raise UnknownStoreError(f"Cannot get state store {req.store_name} because no such store is "
                                            "registered in the topology.")
            out = _answer(gateway, req)
        except BaseException as exc:
            if access.audit is not None and user is not None:
                access.audit.statement(user=user.name, face="peer", client=client_of(request.environ), sql=what,
                                       status="error", error_code=error_code(exc),
                                       duration_ms=(time.perf_counter() - t0) * 1000)
            raise
        if access.audit is not None and user is not None:
            access.audit.statement(user=user.name, face="peer", client=client_of(request.environ), sql=what,
                                   stores=[req.store_name], rows=sum(len(a.get("rows") or ()) for a in out),
                                   duration_ms=(time.perf_counter() - t0) * 1000)
        return Response(dumps({"host": host_of(gateway.source), "answers": out}), mimetype=JSON)


def _answer(gateway: Any, req: Any) -> list[dict[str, Any]]:
    """Each partition's answer to ``req`` from this server's own copies, with the rows of the store relation."""
    src = local_of(gateway.source)
    spec = src.catalog().get(req.store_name)
    try:
        _, answer = query_store(src, req)
    except GatewayInternalError as exc:
        if isinstance(exc.__cause__, KeyTypeError):  # a key of another type than the store's: the peer's fault
            raise BadRequest(f"POST /v1/iq: {exc.__cause__}") from None
        raise
    infos = local_view(gateway.source, (req.store_name,))
    roles = {i.partition: i.role for i in infos if i.store == req.store_name}
    answers = []
    for p, qr in answer.partition_results.items():
        rows = None
        if qr.is_success and spec is not None:
            try:
                scan = collect(spec, [(req, StateQueryResult.of({p: qr}))], None, None)
            except StoreShapeMoved as exc:  # swapped to a rebuilt generation since the catalog was read
                raise StateStoreMigratedError(f"{exc}: retry") from exc
            rows = [list(r[:-2]) for r in scan.rows]
        out = encode_answer(p, qr, rows)
        out["active"] = roles.get(p) == "active"
        answers.append(out)
    return answers
