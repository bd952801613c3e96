"""The gateway's errors: the classes of the client package (the wire contract), and ``translate``.

The PEP 249 tree and the gateway's own classes (code, HTTP status,
retryable) live in ``iqgate_client.errors`` so that a remote client raises
exactly the classes the server does; this module re-exports them and maps
planner and KIP-216 exceptions onto them.
"""

from __future__ import annotations

from iqgate_client.errors import (
    BadRequest,
    ColumnNotYetAvailableError,
    DatabaseError,
    DataError,
    Error,
    ExecutionError,
    ForbiddenError,
    GatewayError,
    GatewayInternalError,
    IntegrityError,
    InterfaceError,
    InternalError,
    InvalidPartitionError,
    MethodNotAllowed,
    NoCommonPositionError,
    NotAcceptable,
    NotSupported,
    NotSupportedError,
    NotUpToBoundError,
    OperationalError,
    OutOfMemoryError,
    PartitionFailureError,
    ProgrammingError,
    RequestTooLarge,
    ResponseTooLarge,
    RouteNotFound,
    RowLimitExceeded,
    SqlError,
    StatementCancelled,
    StatementTimeout,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
    StreamRequired,
    StreamsNotStartedError,
    StreamsRebalancingError,
    StreamsStoppedError,
    SubscriptionError,
    TooManyStatements,
    Unauthorized,
    UnknownStoreError,
    UnknownTopicError,
    Warning,  # noqa: A004 - the PEP 249 name
    error_class_for_code,
)

from planner import errors as planner_errors
from stores.iqv2 import errors as streams_errors

__all__ = [
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "GatewayError", "SqlError", "UnknownStoreError", "UnknownTopicError", "NotSupported", "ExecutionError",
    "ForbiddenError", "PartitionFailureError", "NotUpToBoundError", "NoCommonPositionError", "StreamsNotStartedError",
    "StreamsRebalancingError", "StateStoreMigratedError", "StreamsStoppedError",
    "StateStoreNotAvailableError", "InvalidPartitionError", "RowLimitExceeded", "StatementTimeout", "StatementCancelled",
    "OutOfMemoryError", "ResponseTooLarge",
    "RequestTooLarge", "Unauthorized", "BadRequest", "NotAcceptable", "RouteNotFound",
    "MethodNotAllowed", "GatewayInternalError", "error_class_for_code", "translate", "ColumnNotYetAvailableError",
    "SubscriptionError", "StreamRequired", "TooManyStatements",
]


_STREAMS: tuple[tuple[type[BaseException], type[GatewayError]], ...] = (
    (streams_errors.StreamsNotStartedException, StreamsNotStartedError),
    (streams_errors.StreamsRebalancingException, StreamsRebalancingError),
    (streams_errors.StateStoreMigratedException, StateStoreMigratedError),
    (streams_errors.StateStoreNotAvailableException, StateStoreNotAvailableError),
    (streams_errors.UnknownStateStoreException, UnknownStoreError),
    (streams_errors.InvalidStateStorePartitionException, InvalidPartitionError),
    (streams_errors.StreamsStoppedException, StreamsStoppedError),
)


def translate(exc: BaseException) -> GatewayError | None:
    """The gateway error for a planner or KIP-216 exception (None when it is neither).

    Keeps the original message, the SQL position and the retryable flag the
    lower layer knew, so nothing is lost on the way to the client.
    """
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, planner_errors.PlanningError):
        code = getattr(exc, "code", "PLANNING_ERROR")
        cls: type[GatewayError]
        if isinstance(exc, planner_errors.UnknownStoreError):
            cls = UnknownStoreError
        elif isinstance(exc, planner_errors.UnsupportedSqlError):
            cls = NotSupported
        else:
            cls = SqlError
        return cls(exc.message, line=exc.line, col=exc.col, code=code)
    for src, dst in _STREAMS:
        if isinstance(exc, src):
            return dst(str(exc) or src.__name__, retryable=bool(getattr(exc, "retryable", dst.retryable)))
    if isinstance(exc, streams_errors.InvalidStateStoreException):
        return StateStoreNotAvailableError(str(exc) or type(exc).__name__,
                                           retryable=bool(getattr(exc, "retryable", False)))
    return None
