"""Users' bearer tokens: ``iqg_<token id>_<secret>``, random, shown once, stored only as a SCRAM verifier.

The token id is public (it is how a server finds the user a token claims to
be without trying every stored hash); the secret is 256 random bits, so the
verifier's PBKDF2 is there to keep the stored form one-way, not to slow down
guessing (nobody can guess 256 bits). The same verifier lets the token be
the user's PG password (SCRAM) when no password is set.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["new_token", "token_id_of", "TOKEN_RE"]

TOKEN_RE = re.compile(r"iqg_[0-9a-f]{8,32}_[A-Za-z0-9_-]{20,}")  # also what the audit log scrubs from any text


def new_token(taken: set[str] | frozenset[str] = frozenset()) -> tuple[str, str]:
    """A fresh ``(token, token_id)``; the id differs from every one in ``taken``."""
    while True:
        token_id = secrets.token_hex(4)
        if token_id not in taken:
            return f"iqg_{token_id}_{secrets.token_urlsafe(32)}", token_id


def token_id_of(token: str) -> str | None:
    """The id a token claims, or None when it is not shaped like one of ours."""
    if not TOKEN_RE.fullmatch(token):
        return None
    return token.split("_", 2)[1]
