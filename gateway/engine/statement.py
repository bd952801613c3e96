"""One statement as the engine runs it: text, parameters, bound, budget, session, and the form the caller wants.

Everything a face hands ``Gateway.sql`` is gathered here once, checked once
(a bad ``wait_ms`` or ``max_rows`` is the caller's error, named), and then
travels as one value through planning, reading and answering, instead of a
dozen arguments passed down every call.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.systables import SystemContext
from stores.iqv2.position import Position, PositionError

from ..access.principal import Principal
from .cancel import Cancellation
from .config import GatewayConfig, Session, as_position
from .errors import BadRequest

__all__ = ["Form", "Budget", "Statement"]

_LANE_LEVELS = frozenset({"snapshot", "monotonic", "eventual"})


class Form(enum.Enum):
    """How the caller will read the answer: a hint, never a promise.

    A Result is lazy (``result.py``): whatever it is read as decides the work
    done. The hint lets the engine start the right work at once where that
    pays: ``ROWS`` (a face rendering rows: JSON, NDJSON, CSV, PG, the DB-API)
    fetches the first chunk of rows in ``sql()`` so an error in it keeps its
    status code; ``ARROW`` (Arrow IPC, Flight) starts DuckDB's Arrow export;
    ``ANY`` (the Python API) binds the statement and waits to be read.
    """

    ANY = "any"
    ROWS = "rows"
    ARROW = "arrow"


@dataclass(frozen=True, slots=True)
class Budget:
    """What one statement may spend: rows in its answer, time from arrival (planning counts), waiting for a bound."""

    max_rows: int
    timeout_ms: int
    wait_ms: int
    memory_bytes: int | None = None  # the statement's memory budget (None: the gateway's own)

    @staticmethod
    def of(config: GatewayConfig, settings: Mapping[str, Any], max_rows: int | None, wait_ms: int | None) -> Budget:
        """The server's ceilings, tightened by the session's settings and the request's own limits."""
        rows = min(config.max_rows, _setting(settings, "max_rows", config.max_rows),
                   max_rows if max_rows is not None else config.max_rows)
        if rows < 0:
            raise BadRequest(f"max_rows must be >= 0, got {max_rows}")
        timeout = min(config.statement_timeout_ms, _setting(settings, "statement_timeout_ms",
                                                             config.statement_timeout_ms))
        wait = wait_ms if wait_ms is not None else _setting(settings, "wait_for_bound_ms", 0)
        if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
            raise BadRequest(f"wait_ms must be a non-negative integer, got {wait!r}")
        return Budget(rows, timeout, min(wait, config.max_wait_ms, timeout), config.max_memory_bytes)


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement and everything that governs how it runs (built by ``Statement.of``)."""

    text: str
    params: Sequence[Any] | Mapping[str, Any] | None
    position: Position | None          # the request's own bound, merged with the text's AS OF and the session's
    partial: bool | None               # None: the session's (or the server's) partial_results
    wait_ms: int | None
    max_rows: int | None
    session: Session | Mapping[str, Any] | None
    settings: Mapping[str, Any]        # the session's settings in force (validated)
    form: Form
    cancelled: Callable[[], bool] | None  # polled: an HTTP client that went away
    cancel: Cancellation | None           # pushed: a PG CancelRequest
    context: SystemContext | None         # who asks, as the catalogs report it (the PG port: schema public)
    principal: Principal | None = None    # the user asking: what they may read, their limits (None: everything)

    @staticmethod
    def of(text: Any, params: Any, position: Any, *, partial: bool | None, wait_ms: int | None, max_rows: int | None,
           session: Session | Mapping[str, Any] | None, settings: Mapping[str, Any], form: Form,
           cancelled: Callable[[], bool] | None, cancel: Cancellation | None,
           context: SystemContext | None, principal: Principal | None = None) -> Statement:
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("the SQL text is empty")
        return Statement(text, params, bound_from(position), partial, wait_ms, max_rows, session, settings, form,
                         cancelled, cancel, context, principal)

    @property
    def plain(self) -> bool:
        """No wait and no session setting the point lane does not honour: what the point lane takes (it never
        waits; it reads one store partition, which is one moment whatever the consistency, and a monotonic
        session's last Position is in ``position``; bounded staleness is the general way's)."""
        return lane_takes(self.wait_ms, self.settings)

    def budget(self, config: GatewayConfig) -> Budget:
        return Budget.of(config, self.settings, self.max_rows, self.wait_ms)

    def partial_results(self, config: GatewayConfig) -> bool:
        if self.partial is not None:
            return self.partial
        return bool(self.settings.get("partial_results", config.partial_results))


def lane_takes(wait_ms: int | None, settings: Mapping[str, Any]) -> bool:
    """``Statement.plain`` of a statement with this wait and these settings (``Gateway.point`` asks it without
    building a Statement: ~2 us of a ~35 us lookup over HTTP)."""
    if wait_ms:
        return False
    return not settings or (len(settings) == 1 and settings.get("consistency") in _LANE_LEVELS)


def bound_from(value: Any) -> Position | None:
    """A position bound from what callers pass (a Position, a map, its JSON text); a bad one is a BadRequest."""
    try:
        return as_position(value)
    except (PositionError, TypeError, ValueError) as exc:
        raise BadRequest(f"invalid position bound: {exc}") from exc


def _setting(settings: Mapping[str, Any], name: str, default: int) -> int:
    """A numeric session setting; unset and 0 ("no limit" in SESSION_SETTINGS) give ``default``."""
    v = settings.get(name)
    return default if not v else int(v)
