"""What a user may see of the server's status: health and metrics name stores, so they show only the caller's.

``/v1/health`` answers without credentials (load balancers probe it): with a
users file, such a caller sees the server's state and health but no store,
partition or statement; a caller who sends a valid token sees their own
stores. Statements of crashed serving processes (``crashes``) are other
users' text: they stay for callers with the ``system`` grant.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..access.context import AccessContext
from ..access.principal import Principal

__all__ = ["visible_status", "optional_principal", "NOBODY"]

NOBODY = Principal("(unauthenticated)")  # no grant at all: what an anonymous health probe of a users file sees


def optional_principal(access: AccessContext, header: str | None) -> Principal | None:
    """The caller of an open endpoint: None (everything) without a users file; with one, the token's user or
    NOBODY (an open endpoint never refuses, and a wrong token there is not a login)."""
    if access.users.mode != "file":
        return None
    if header:
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            found = access.users.authenticate_token(given.strip())
            if found is not None:
                return found
    return NOBODY


def visible_status(status: Mapping[str, Any], principal: Principal | None,
                   readable: Collection[str]) -> dict[str, Any]:
    """``status`` (a source's, see views.source_status) with only the stores in ``readable``."""
    out = dict(status)
    if principal is None or principal.everything:
        return out
    for key in ("stores", "positions", "changelogs"):
        value = out.get(key)
        if isinstance(value, Mapping):
            out[key] = {n: v for n, v in value.items() if n in readable}
    parts = out.get("partitions")
    if isinstance(parts, list):
        out["partitions"] = [p for p in parts if isinstance(p, Mapping) and p.get("store") in readable]
    crashes = out.get("crashes")
    if isinstance(crashes, Mapping) and not principal.can_read_system():
        out["crashes"] = {"count": crashes.get("count"),
                          "recent": [{k: v for k, v in c.items() if k != "statements"}
                                     for c in crashes.get("recent") or () if isinstance(c, Mapping)]}
    return out
