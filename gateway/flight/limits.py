"""The Flight face's own bounds, beside the engine's statement budgets (``GatewayConfig``) that apply as well."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["FlightLimits"]


@dataclass(frozen=True)
class FlightLimits:
    """``max_pending``: answers GetFlightInfo started that no DoGet has taken yet (each holds its statement
    open), each for at most ``ticket_ttl_s``; ``max_sessions`` sessions with settings, each forgotten after
    ``session_idle_s`` idle; ``max_prepared`` prepared statements, each closed after ``prepared_idle_s`` idle;
    ``max_parameter_sets`` rows of parameters one DoPut may bind (each is one execution)."""

    max_pending: int = 256
    ticket_ttl_s: float = 60.0
    max_sessions: int = 10_000
    session_idle_s: float = 8 * 3600.0
    max_prepared: int = 10_000
    prepared_idle_s: float = 3600.0
    max_parameter_sets: int = 10_000

    @classmethod
    def of(cls, **overrides: Any) -> FlightLimits:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown Flight limit(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        out = replace(cls(), **overrides)
        for f in fields(cls):
            v = getattr(out, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                raise ValueError(f"Flight limit {f.name} must be a positive number, got {v!r}")
        return out
