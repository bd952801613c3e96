"""Everything this face takes from the rest of iqgate, imported in this one module.

The face runs every statement through the one engine (``Gateway.sql``) and
reads nothing else of it; when the engine's modules move, only these
imports change. They name the modules the objects live in rather than
``gateway`` itself: the package's lazy ``connect`` makes ``import gateway``
count as importing the DB-API face, and the faces stay independent.
"""

from __future__ import annotations

from gateway.engine.cancel import Cancellation
from gateway.engine.config import Session
from gateway.engine.errors import (
    BadRequest,
    GatewayError,
    GatewayInternalError,
    NotSupported,
    RequestTooLarge,
    ResponseTooLarge,
    SqlError,
    StatementCancelled,
    translate,
)
from gateway.engine.gateway import Gateway
from gateway.engine.result import PartitionOutcome, Result
from planner.systables import SystemContext

__all__ = ["Gateway", "GatewayError", "PartitionOutcome", "Result", "Session", "Cancellation", "BadRequest",
           "GatewayInternalError", "NotSupported", "RequestTooLarge", "ResponseTooLarge", "SqlError", "StatementCancelled", "translate", "SystemContext",
           "version"]


def version() -> str:
    """iqgate's version, as the installed distribution says."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("iqgate")
    except PackageNotFoundError:
        return "unknown"
