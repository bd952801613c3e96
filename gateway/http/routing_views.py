"""The endpoints servers use between themselves (issue 17): what I host, and answer this IQv2 request locally.

``GET /v1/partitions`` is the heartbeat: role, Position and lag of every
store partition this server has. ``POST /v1/iq`` runs one IQv2 request on
this server's own copies only (never forwarded again, so two servers cannot
bounce a request between them) and returns each partition's answer with
the rows of the store relation.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, request

from stores.catalog.schema import KeyTypeError
from stores.iqv2.result import StateQueryResult

from ..engine.arrow_rows import StoreShapeMoved, collect
from ..engine.errors import BadRequest, GatewayInternalError, StateStoreMigratedError
from ..engine.scans import query_store
from ..routing import host_of, local_of, local_view
from ..routing.codec import CodecError, decode_request, encode_answer
from .limits import parse_json
from .renderers import JSON, dumps

__all__ = ["register_routing_views"]


def register_routing_views(app: Flask, gateway: Any) -> None:
    @app.get("/v1/partitions")
    def partitions() -> Response:
        src = local_of(gateway.source)
        view = local_view(gateway.source)
        body = {"host": host_of(gateway.source), "state": src.state.value,
                "partitions": [i.to_json() for i in view]}
        return Response(dumps(body), mimetype=JSON)

    @app.post("/v1/iq")
    def iq() -> Response:
        body = parse_json(request.get_data() or b"null", "POST /v1/iq: the request body")
        try:
            req = decode_request(body)
        except (CodecError, ValueError) as exc:
            raise BadRequest(f"POST /v1/iq: {exc}") from None
        src = local_of(gateway.source)
        spec = src.catalog().get(req.store_name)
        try:
            _, answer = query_store(src, req)
        except GatewayInternalError as exc:
            if isinstance(exc.__cause__, KeyTypeError):  # a key of another type than the store's: the peer's fault
                raise BadRequest(f"POST /v1/iq: {exc.__cause__}") from None
            raise
        infos = local_view(gateway.source)
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
        return Response(dumps({"host": host_of(gateway.source), "answers": answers}), mimetype=JSON)
