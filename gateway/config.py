"""Server-wide limits and defaults of a gateway (per-connection settings live in a Session).

One frozen value shared by the engine and the HTTP app, so the limits a
session may tighten (rows, statement time, table scans) are enforced in one
place whichever face the query came through.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["GatewayConfig"]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """``max_rows``/``statement_timeout_ms``/``max_wait_ms`` are ceilings: a request may ask for less, never more.

    ``table_scans=False`` refuses queries with nothing to push down; a session
    cannot turn scans back on. ``auth_token`` (when set) is required as
    ``Authorization: Bearer <token>`` on every HTTP endpoint but health.
    """

    max_rows: int = 1_000_000
    statement_timeout_ms: int = 30_000
    max_wait_ms: int = 30_000
    max_request_bytes: int = 1_000_000
    table_scans: bool = True
    partial_results: bool = False
    auth_token: str | None = None
    ndjson_batch_rows: int = 1_000
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        for name in ("max_rows", "statement_timeout_ms", "max_wait_ms", "max_request_bytes", "ndjson_batch_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"GatewayConfig.{name} must be a positive integer, got {v!r}")
        if self.retry_after_s < 0:
            raise ValueError(f"GatewayConfig.retry_after_s must be >= 0, got {self.retry_after_s!r}")
        if self.auth_token is not None and not self.auth_token:
            raise ValueError("GatewayConfig.auth_token must be a non-empty string or None")

    @classmethod
    def of(cls, config: GatewayConfig | None = None, **overrides: Any) -> GatewayConfig:
        """A config from keyword overrides, naming any unknown key (typos must not be silently ignored)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown gateway setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        base = config or cls()
        return replace(base, **overrides) if overrides else base
