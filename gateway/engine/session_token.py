"""The HTTP session token: what a stateless face hands back so a monotonic session needs no Position from its client.

A PG or DB-API connection keeps its session (``Session.seen``); an HTTP
client has none, so every answer carries a token of the Positions that
client's answers were at, and the next request sends it back. The token is
the merged Position, encoded: forging one only makes the forger's own next
read wait for a Position, so it needs no signature.
"""

from __future__ import annotations

import base64
import binascii

from stores.iqv2.position import Position, PositionError

from .errors import BadRequest

__all__ = ["token_of", "seen_of", "TOKEN_PREFIX"]

TOKEN_PREFIX = "p1."
_MAX_TOKEN = 64 * 1024


def token_of(position: Position) -> str:
    raw = position.to_json().encode()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def seen_of(token: str | None, where: str = "the X-IQ-Session header") -> Position | None:
    """The Position a token stands for; None for no token; a BadRequest naming ``where`` for a bad one."""
    if token is None or not token.strip():
        return None
    text = token.strip()
    if len(text) > _MAX_TOKEN or not text.startswith(TOKEN_PREFIX):
        raise BadRequest(f"{where} is not a session token this server gave (tokens start with {TOKEN_PREFIX!r})")
    body = text[len(TOKEN_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        return Position.from_json(raw.decode())
    except (binascii.Error, UnicodeDecodeError, PositionError, ValueError) as exc:
        raise BadRequest(f"{where} is not a session token this server gave: {exc}") from None
