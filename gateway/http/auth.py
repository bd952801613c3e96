"""The endpoints that answer without credentials; every other one asks ``AccessContext.bearer`` who is calling.

Users' tokens (a users file) and the single shared ``--token`` are both
checked by ``gateway.access`` in constant time, so a token cannot be
guessed byte by byte, and a refusal is written to the audit log.
"""

from __future__ import annotations

__all__ = ["OPEN_PATHS"]

# Load balancers probe health and tools fetch the API description without credentials.
OPEN_PATHS = frozenset({"/v1/health", "/v1/openapi.json"})
