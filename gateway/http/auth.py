"""Optional bearer-token authentication.

A shared token is enough for a gateway that sits next to its pipeline; the
comparison is constant-time so the token cannot be guessed byte by byte.
"""

from __future__ import annotations

import hmac

from ..engine.errors import Unauthorized

__all__ = ["check_bearer", "OPEN_PATHS"]

# Load balancers probe health and tools fetch the API description without credentials.
OPEN_PATHS = frozenset({"/v1/health", "/v1/openapi.json"})


def check_bearer(header: str | None, token: str | None) -> None:
    """Raise Unauthorized unless ``header`` is ``Bearer <token>`` (no-op when no token is configured)."""
    if token is None:
        return
    if not header:
        raise Unauthorized("this server requires an Authorization: Bearer <token> header")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized("the bearer token is not valid")
