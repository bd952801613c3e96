"""A statement's access on the HTTP face: its user's response budget, and its audit line once the answer was sent.

The audit line of a streamed answer can only be written when the last byte
went out (or the client went away): the body is wrapped to count the bytes
and to notice how it ended, and the line is written when the WSGI server
closes the response. An error found after the status line went out ends
JSON and NDJSON answers in-band (``renderers``): the wrapper recognizes
those pieces by their fixed start, so the audit says "error" with the code
the client read, never "ok" for a cut-short answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from flask import Response

from ..access.context import AccessContext, AuditedStatement, error_code
from ..access.principal import Principal
from ..engine.config import GatewayConfig

__all__ = ["response_limit", "audit_response", "client_of", "begin"]

# the in-band error pieces of renderers.json_body and render_ndjson (data pieces start with "[" or ",")
_INBAND = re.compile(rb'^(?:\],"statement":"[a-z_]+",|\{)"error":\{"code":"([A-Z_]+)"')


def response_limit(cfg: GatewayConfig, principal: Principal | None) -> int:
    """The most bytes this user's answer may have: the server's limit, or theirs when lower."""
    mine = principal.limits.max_response_bytes if principal is not None else None
    return cfg.max_response_bytes if mine is None else min(mine, cfg.max_response_bytes)


def client_of(environ: dict[str, Any]) -> str | None:
    addr = environ.get("REMOTE_ADDR")
    return str(addr) if addr else None


def begin(access: AccessContext, principal: Principal, environ: dict[str, Any], sql: Any,
          params: Any, may_wait: bool = True) -> AuditedStatement | None:
    """The statement admitted and its audit opened, or None when this server audits and admits nothing."""
    if access.plain:
        return None
    return access.begin(principal, face="http", client=client_of(environ), sql=sql, params=params,
                        may_wait=may_wait)


def audit_response(resp: Response, audited: AuditedStatement, result: Any) -> Response:
    """``resp`` counting its bytes; ``audited`` ends (line written, slot released) when the response is closed."""
    state: dict[str, Any] = {"bytes": 0, "code": None}
    body = resp.iter_encoded()

    def counted(pieces: Iterable[bytes]) -> Iterator[bytes]:
        try:
            for piece in pieces:
                state["bytes"] += len(piece)
                if piece[:2] in (b'],', b'{"') and state["code"] is None:
                    found = _INBAND.match(piece)
                    if found is not None:
                        state["code"] = found.group(1).decode()
                yield piece
        except GeneratorExit:  # the client went away before the end
            state["code"] = state["code"] or "CLIENT_GONE"
            raise
        except BaseException as exc:
            state["code"] = error_code(exc)
            raise

    resp.response = counted(body)
    resp.call_on_close(lambda: audited.end(result=result, code=state["code"], response_bytes=state["bytes"]))
    return resp
