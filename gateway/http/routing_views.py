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

from ..arrow_rows import StoreShapeMoved, collect
from ..errors import BadRequest, GatewayInternalError, StateStoreMigratedError
from ..routing.codec import CodecError, decode_request, encode_answer
from ..routing.membership import local_partitions
from ..scans import query_store
from .limits import parse_json
from .renderers import JSON, dumps

__all__ = ["register_routing_views"]


def _local(gateway: Any) -> Any:
    return getattr(gateway.source, "local", None) or gateway.source


def register_routing_views(app: Flask, gateway: Any) -> None:
    @app.get("/v1/partitions")
    def partitions() -> Response:
        src = _local(gateway)
        view = local_partitions(src)
        body = {"host": getattr(gateway.source, "self_url", None), "state": src.state.value,
                "partitions": [i.to_json() for i in view]}
        return Response(dumps(body), mimetype=JSON)

    @app.post("/v1/iq")
    def iq() -> Response:
        body = parse_json(request.get_data() or b"null", "POST /v1/iq: the request body")
        try:
            req = decode_request(body)
        except (CodecError, ValueError) as exc:
            raise BadRequest(f"POST /v1/iq: {exc}") from None
        src = _local(gateway)
        spec = src.catalog().get(req.store_name)
        try:
            _, answer = query_store(src, req)
        except GatewayInternalError as exc:
            if isinstance(exc.__cause__, KeyTypeError):  # a key of another type than the store's: the peer's fault
                raise BadRequest(f"POST /v1/iq: {exc.__cause__}") from None
            raise
        view = getattr(gateway.source, "local_view", None)
        infos = view().values() if view is not None else local_partitions(src)
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
        host = getattr(gateway.source, "self_url", None)
        return Response(dumps({"host": host, "answers": answers}), mimetype=JSON)
