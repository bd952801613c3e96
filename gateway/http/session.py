"""The ``X-IQ-Session`` header: a monotonic session over stateless HTTP (issue 47).

A request may carry the token the previous answer gave; with
``"session": {"consistency": "monotonic"}`` its answer is never older than
the Positions the token stands for, and every answer to such a request
carries the token to send next (``engine/session_token.py``).
"""

from __future__ import annotations

from typing import Any

from stores.iqv2.position import Position

from ..engine.session_token import seen_of, token_of

__all__ = ["SESSION_HEADER", "seen_from", "next_token"]

SESSION_HEADER = "X-IQ-Session"


def seen_from(header: str | None) -> Position | None:
    """The Position of the request's session token (None without one); a bad token is the client's error."""
    return None if header is None else seen_of(header, f"the {SESSION_HEADER} header")


def _monotonic(session: dict[str, Any] | None) -> bool:
    if not session:
        return False
    for name, value in session.items():
        if isinstance(name, str) and name.strip().lower() == "consistency":
            return isinstance(value, str) and value.strip().lower() == "monotonic"
    return False


def next_token(session: dict[str, Any] | None, seen: Position | None, position: Position) -> str | None:
    """The token the answer carries: for a monotonic session, or a request that sent one; else None."""
    if seen is None and not _monotonic(session):
        return None
    return token_of(position if seen is None else seen.merge(position))
