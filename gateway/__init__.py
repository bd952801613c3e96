"""iqgate's gateway: SQL over IQv2 state stores, through one engine and several thin faces.

>>> from gateway import Gateway, connect     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .engine.config import GatewayConfig, Session
from .engine.errors import GatewayError
from .engine.gateway import Gateway
from .engine.result import PartitionOutcome, Result

__all__ = ["Gateway", "GatewayConfig", "Session", "Result", "PartitionOutcome", "GatewayError", "connect"]


def __getattr__(name: str) -> Any:
    """``connect`` lives in the DB-API module; loaded on first use so the engine does not depend on it."""
    if name == "connect":
        from .dbapi import connect

        globals()["connect"] = connect
        return connect
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
