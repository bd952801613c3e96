"""The statement engine: SQL text → plan → store reads → Arrow → DuckDB → a lazy Result.

Every face (HTTP, PG, DB-API, Flight SQL, the CLI) runs statements through
``Gateway`` here and only renders what it returns.
"""

from __future__ import annotations

from .config import GatewayConfig, Session
from .gateway import Gateway
from .result import PartitionOutcome, Result

__all__ = ["Gateway", "GatewayConfig", "Session", "Result", "PartitionOutcome"]
