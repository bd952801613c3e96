"""Server-wide limits and defaults of a gateway (per-connection settings live in a Session).

One frozen value shared by the engine and the HTTP app, so the limits a
session may tighten (rows, statement time, table scans) are enforced in one
place whichever face the query came through.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from stores.iqv2.position import Position, PositionBound

__all__ = ["GatewayConfig", "Session", "as_position", "default_max_memory"]


def default_max_memory() -> int:
    """A tenth of the machine's memory, between 256 MB and 4 GB: room for BI aggregates, never the machine."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 * 2**30
    return int(min(4 * 2**30, max(256 * 2**20, total // 10)))


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """``max_rows``/``statement_timeout_ms``/``max_wait_ms`` are ceilings: a request may ask for less, never more.

    ``table_scans=False`` refuses queries with nothing to push down; a session
    cannot turn scans back on. ``auth_token`` (when set) is required as
    ``Authorization: Bearer <token>`` on every HTTP endpoint but health.
    ``max_memory_bytes`` is every statement's memory budget (DuckDB's
    memory_limit, and the growth of the process a statement may cause);
    ``max_response_bytes`` caps an answer's size beside ``max_rows``;
    ``max_waiters`` is how many statements may wait for a position bound at
    once (the rest are answered NOT_UP_TO_BOUND at once, so waiting requests
    cannot hold every worker thread). ``arrow_scans`` reads range scans as
    Arrow streams of ``scan_batch_rows`` rows (``gateway/arrow_scans.py``);
    off, they are read as Python rows (the path before issue 14).
    ``max_subscriptions`` is how many live answers (SUBSCRIBE, EMIT CHANGES)
    this gateway runs at once (the rest are refused TOO_MANY_SUBSCRIPTIONS);
    ``subscription_buffer_bytes`` how far (in decoded changes) one may fall
    behind its store before it ends SUBSCRIBER_TOO_SLOW.
    ``consistency_wait_ms`` is how long a statement may wait, when it sets no
    wait of its own, for its stores to reach one Position (snapshot) or the
    session's last Position (monotonic): ``moment.py``. 5 s: a store behind
    must finish a micro-batch, which takes seconds on a loaded machine.
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
    max_memory_bytes: int = field(default_factory=lambda: default_max_memory())
    max_response_bytes: int = 256 * 2**20
    max_waiters: int = 2
    arrow_scans: bool = True
    scan_batch_rows: int = 16_384
    max_subscriptions: int = 1_000
    subscription_buffer_bytes: int = 4 * 2**20
    consistency_wait_ms: int = 5_000

    def __post_init__(self) -> None:
        for name in ("max_rows", "statement_timeout_ms", "max_wait_ms", "max_request_bytes", "ndjson_batch_rows",
                     "max_memory_bytes", "max_response_bytes", "max_waiters", "scan_batch_rows", "max_subscriptions",
                     "subscription_buffer_bytes", "consistency_wait_ms"):
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


def as_position(value: Any) -> Position | None:
    """A position bound from what callers pass: a Position (the server's or the client's), ``{topic: {partition: offset}}``, or its JSON text."""
    if value is None or isinstance(value, Position):
        return value
    if isinstance(value, PositionBound):
        return value.position
    if isinstance(value, str):
        return Position.from_json(value) if value.strip() else None
    if isinstance(value, Mapping):
        return Position.from_map(value)
    if hasattr(value, "to_json_map"):  # iqgate_client.position.Position
        return Position.from_map(value.to_json_map())
    raise TypeError(f"a position is a map {{topic: {{partition: offset}}}} or its JSON text, got {type(value).__name__}")


class Session:
    """One connection's SET settings (planner.SESSION_SETTINGS names them).

    Settings are validated by planning a ``SET`` statement, so a setting sent
    over HTTP, passed to ``connect(session=...)`` or typed as SQL is checked by
    exactly the same code.
    """

    def __init__(self, gateway: Any = None) -> None:
        self._gateway = gateway
        self._settings: dict[str, Any] = {}
        self._seen = Position.empty()  # the Positions of this session's answers, merged (consistency monotonic)

    @property
    def seen(self) -> Position:
        """Every Position this session's answers were at, merged: with ``consistency = 'monotonic'`` no answer
        may be older (the PG port's connection, a DB-API connection, ``Gateway.session()``)."""
        return self._seen

    def observe(self, position: Position | None) -> None:
        if position is not None and not position.is_empty():
            self._seen = self._seen.merge(position)

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def is_default(self) -> bool:
        """No setting changed (what ``Gateway.sql`` checks before its point lane), without copying them."""
        return not self._settings

    def as_dict(self) -> dict[str, Any]:
        return self.settings

    def set(self, name: str, value: Any) -> None:
        self.apply(Session.validated({name: value}))

    def apply(self, settings: Mapping[str, Any]) -> None:
        for k, v in settings.items():
            if v is None:
                self._settings.pop(k, None)
            else:
                self._settings[k] = v

    def sql(self, text: str, params: Any = None, position: Any = None, **kw: Any) -> Any:
        if self._gateway is None:
            raise RuntimeError("this session is not attached to a gateway")
        return self._gateway.sql(text, params, position, session=self, **kw)

    @staticmethod
    def validated(settings: Mapping[str, Any]) -> dict[str, Any]:
        """The settings in the planner's canonical form; a bad name or value raises SqlError (INVALID_SETTING)."""
        from planner.settings import validate_setting

        from .errors import BadRequest, translate

        out: dict[str, Any] = {}
        for name, value in settings.items():
            if not isinstance(name, str):
                raise BadRequest(f"invalid session setting name {name!r}")
            try:
                key, val = validate_setting(name, value)
            except Exception as exc:  # noqa: BLE001 - planner errors become gateway errors
                mapped = translate(exc)
                raise (mapped or BadRequest(f"invalid session setting {name}: {exc}")) from exc
            out[key] = val
        return out

    def __repr__(self) -> str:
        return f"Session({self._settings})"
