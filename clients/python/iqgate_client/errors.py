"""The errors every iqgate face raises: the PEP 249 tree plus one class per failure a caller can act on.

They are the wire contract between server and clients: each class carries its
HTTP status and a stable ``code``, the server raises exactly these classes
(``gateway.errors`` re-exports them), and ``GatewayError.from_error_body``
rebuilds the class a server sent, so a client catching ``OperationalError``
or checking ``.retryable`` behaves the same in-process and over HTTP.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "GatewayError", "SqlError", "UnknownStoreError", "UnknownTopicError", "NotSupported", "ExecutionError",
    "ForbiddenError", "PartitionFailureError", "NotUpToBoundError", "NoCommonPositionError", "StreamsNotStartedError",
    "StreamsRebalancingError", "StateStoreMigratedError", "StreamsStoppedError",
    "StateStoreNotAvailableError", "InvalidPartitionError", "RowLimitExceeded", "StatementTimeout", "StatementCancelled",
    "OutOfMemoryError", "ResponseTooLarge", "RequestTooLarge", "Unauthorized", "BadRequest", "NotAcceptable", "RouteNotFound",
    "MethodNotAllowed", "GatewayInternalError", "error_class_for_code", "ColumnNotYetAvailableError",
    "TooManyStatements", "SubscriptionError", "StreamRequired", "SUBSCRIPTION_CODES",
]


# -- PEP 249 ----------------------------------------------------------------
class Warning(Exception):  # noqa: A001 - the PEP 249 name
    """Important warnings (PEP 249)."""


class Error(Exception):
    """Base of every error the gateway raises (PEP 249)."""


class InterfaceError(Error):
    """Misuse of the client interface rather than of the database."""


class DatabaseError(Error):
    """Errors related to the database."""


class DataError(DatabaseError):
    """Problems with the processed data (conversions, out-of-range values)."""


class OperationalError(DatabaseError):
    """Errors of the database's operation, mostly not the programmer's fault (states, timeouts)."""


class IntegrityError(DatabaseError):
    """Relational integrity affected (never raised: the gateway does not write)."""


class InternalError(DatabaseError):
    """The gateway itself is in an inconsistent state."""


class ProgrammingError(DatabaseError):
    """Bad SQL, unknown tables or columns, wrong parameters."""


class NotSupportedError(DatabaseError):
    """A method or statement the gateway does not support."""


# -- the gateway's classes ----------------------------------------------------
class GatewayError(Error):
    """Base of the gateway's own errors: code, HTTP status, retryable, position in the SQL, partitions.

    ``partitions`` lists dicts ``{"store", "partition", "failure_reason",
    "failure_message", "retryable"}`` so a caller sees which store partition
    failed and whether retrying can help, without parsing the message.
    """

    code: str = "GATEWAY_ERROR"
    http_status: int = 500
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        col: int | None = None,
        partitions: list[dict[str, Any]] | None = None,
        code: str | None = None,
        retryable: bool | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.partitions = list(partitions or [])
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        if http_status is not None:
            self.http_status = http_status

    def __str__(self) -> str:
        where = f" (line {self.line}, column {self.col})" if self.line is not None else ""
        return f"{self.code}: {self.message}{where}"

    def to_error_body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "retryable": self.retryable,
                "line": self.line,
                "col": self.col,
                "partitions": self.partitions,
            }
        }

    @staticmethod
    def from_error_body(status: int, body: Any) -> GatewayError:
        """Rebuild the error a server sent, as the class the server raised (remote DB-API client)."""
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict):
            return GatewayInternalError(
                f"the server answered HTTP {status} without an error body: {str(body)[:200]!r}",
                http_status=status,
            )
        code = str(err.get("code") or "GATEWAY_ERROR")
        cls = error_class_for_code(code, status)
        if cls is SubscriptionError:
            from .position import Position, PositionError

            def _pos(raw: Any) -> Any:
                try:
                    return Position.from_map(raw) if isinstance(raw, dict) else None
                except PositionError:
                    return None

            return SubscriptionError(str(err.get("message") or ""), code=code, http_status=status,
                                     retryable=bool(err.get("retryable", code in _RETRYABLE_SUBSCRIPTION)),
                                     line=err.get("line"), col=err.get("col"), partitions=err.get("partitions") or [],
                                     resume_from=_pos(err.get("resume_from")), oldest=_pos(err.get("oldest")))
        return cls(
            str(err.get("message") or ""),
            line=err.get("line"),
            col=err.get("col"),
            partitions=err.get("partitions") or [],
            code=code,
            retryable=bool(err.get("retryable", cls.retryable)),
            http_status=status,
        )


class SqlError(GatewayError, ProgrammingError):
    """The planner refused the SQL; ``code`` is the planner's (SQL_SYNTAX_ERROR, UNKNOWN_COLUMN, ...)."""

    code = "SQL_ERROR"
    http_status = 400


class UnknownStoreError(GatewayError, ProgrammingError):
    code = "UNKNOWN_STORE"
    http_status = 404


class UnknownTopicError(GatewayError, ProgrammingError):
    """A position bound that names no input topic of the stores a statement reads (a typo would silently
    bound nothing: read-your-writes lost without a word)."""

    code = "UNKNOWN_TOPIC"
    http_status = 400


class NotSupported(GatewayError, NotSupportedError):
    code = "NOT_SUPPORTED"
    http_status = 400


class ExecutionError(GatewayError, DataError):
    """DuckDB failed while running the residual SQL on good input shape (casts, overflow, division)."""

    code = "EXECUTION_ERROR"
    http_status = 400


class ForbiddenError(GatewayError, ProgrammingError):
    """DuckDB refused file, network or extension access (the planner normally refuses first)."""

    code = "FORBIDDEN"
    http_status = 403


class PartitionFailureError(GatewayError, OperationalError):
    """Store partitions the query needed failed; ``partitions`` says which, why and if a retry helps."""

    code = "PARTITION_FAILURE"
    http_status = 409


class NotUpToBoundError(PartitionFailureError):
    """Every failure is NOT_UP_TO_BOUND: the stores have not caught up with the requested position yet."""

    code = "NOT_UP_TO_BOUND"
    http_status = 503
    retryable = True


class NoCommonPositionError(PartitionFailureError):
    """The stores a statement reads were not at one common Position within its wait (issue 47): one is
    stopped, rebuilding or too far behind. ``partitions`` names each store partition and where it was."""

    code = "NO_COMMON_POSITION"
    http_status = 503
    retryable = True


class StreamsNotStartedError(GatewayError, OperationalError):
    code = "STREAMS_NOT_STARTED"
    http_status = 503
    retryable = True


class StreamsRebalancingError(GatewayError, OperationalError):
    code = "STREAMS_REBALANCING"
    http_status = 503
    retryable = True


class StateStoreMigratedError(GatewayError, OperationalError):
    code = "STATE_STORE_MIGRATED"
    http_status = 503
    retryable = True


class ColumnNotYetAvailableError(GatewayError, OperationalError):
    """A column only the new version of a store being rebuilt (a pipeline upgrade) has; it arrives at the swap.

    Retryable: the message says how far the rebuild is (records reached of the target, ETA).
    """

    code = "COLUMN_NOT_YET_AVAILABLE"
    http_status = 503
    retryable = True


class StreamsStoppedError(GatewayError, OperationalError):
    code = "STREAMS_STOPPED"
    http_status = 503


class StateStoreNotAvailableError(GatewayError, OperationalError):
    code = "STATE_STORE_NOT_AVAILABLE"
    http_status = 503


class InvalidPartitionError(GatewayError, ProgrammingError):
    code = "INVALID_PARTITION"
    http_status = 400


class RowLimitExceeded(GatewayError, OperationalError):
    code = "ROW_LIMIT_EXCEEDED"
    http_status = 422


class StatementTimeout(GatewayError, OperationalError):
    code = "STATEMENT_TIMEOUT"
    http_status = 504


class OutOfMemoryError(GatewayError, OperationalError):
    """A statement over its memory budget (the server's --max-memory); the server itself stays healthy."""

    code = "OUT_OF_MEMORY"
    http_status = 507


class StatementCancelled(GatewayError, OperationalError):
    """The client cancelled the statement while it ran (HTTP disconnect, a PostgreSQL CancelRequest)."""

    code = "STATEMENT_CANCELLED"
    http_status = 499


class ResponseTooLarge(GatewayError, OperationalError):
    """The answer would be larger than the server's response-size limit (bytes, beside max_rows)."""

    code = "RESPONSE_TOO_LARGE"
    http_status = 422


class TooManyStatements(GatewayError, OperationalError):
    """The user already runs their share of the server's statements (their limit, or a fair share under load)."""

    code = "TOO_MANY_STATEMENTS"
    http_status = 429
    retryable = True


#: the codes a live answer (SUBSCRIBE / EMIT CHANGES) ends or is refused with, and their HTTP status
SUBSCRIPTION_CODES: dict[str, int] = {
    "SUBSCRIPTION_TOO_OLD": 410,         # the resume point is older than what can be replayed (``oldest``)
    "SUBSCRIBER_TOO_SLOW": 409,          # the client fell further behind than its buffer (``resume_from``)
    "INVALID_RESUME_POSITION": 400,      # not a Position this store passed through
    "RESUME_POSITION_AHEAD": 503,        # a rebuilt generation this server does not serve yet
    "SUBSCRIPTION_UNAVAILABLE": 503,     # the store has no changelog to follow here
    "SUBSCRIPTION_CLOSED": 503,          # the server is closing its live answers (``resume_from``)
    "TOO_MANY_SUBSCRIPTIONS": 429,       # the server's limit of concurrent subscriptions
}
_RETRYABLE_SUBSCRIPTION = frozenset({"SUBSCRIBER_TOO_SLOW", "RESUME_POSITION_AHEAD", "SUBSCRIPTION_UNAVAILABLE",
                                     "SUBSCRIPTION_CLOSED", "TOO_MANY_SUBSCRIPTIONS"})


class SubscriptionError(GatewayError, OperationalError):
    """A live answer that could not start or had to end; ``code`` is one of ``SUBSCRIPTION_CODES``.

    Never a silent end: ``resume_from`` is the Position the subscriber holds the whole answer at (subscribe again
    ``AS OF POSITION`` it ``WITH (SNAPSHOT = false)`` to continue exactly there; None: subscribe again with a
    snapshot); ``oldest`` (SUBSCRIPTION_TOO_OLD) the oldest Position a subscription can resume from now. Both are
    Positions as the server sent them (``to_json_map()``), or None.
    """

    code = "SUBSCRIPTION_UNAVAILABLE"
    http_status = 503

    def __init__(self, message: str, *, resume_from: Any = None, oldest: Any = None, **kw: Any) -> None:
        code = kw.get("code") or self.code
        kw.setdefault("http_status", SUBSCRIPTION_CODES.get(code, 503))
        kw.setdefault("retryable", code in _RETRYABLE_SUBSCRIPTION)
        super().__init__(message, **kw)
        self.resume_from = resume_from
        self.oldest = oldest

    def to_error_body(self) -> dict[str, Any]:
        body = super().to_error_body()
        body["error"]["resume_from"] = None if self.resume_from is None else self.resume_from.to_json_map()
        body["error"]["oldest"] = None if self.oldest is None else self.oldest.to_json_map()
        return body


class StreamRequired(GatewayError, NotSupportedError):
    """The statement is a live answer (SUBSCRIBE, EMIT CHANGES) and the way it was sent can only carry a finite
    one: the message says which ways stream it (``Gateway.subscribe``, HTTP NDJSON or SSE, PG COPY or a cursor,
    the DB-API's ``cursor.execute``)."""

    code = "STREAM_REQUIRED"
    http_status = 406


class RequestTooLarge(GatewayError, InterfaceError):
    code = "REQUEST_TOO_LARGE"
    http_status = 413


class Unauthorized(GatewayError, OperationalError):
    code = "UNAUTHORIZED"
    http_status = 401


class BadRequest(GatewayError, InterfaceError):
    """The request itself is malformed (not JSON, wrong field types) before any SQL is looked at."""

    code = "BAD_REQUEST"
    http_status = 400


class NotAcceptable(GatewayError, InterfaceError):
    code = "NOT_ACCEPTABLE"
    http_status = 406


class RouteNotFound(GatewayError, InterfaceError):
    code = "NOT_FOUND"
    http_status = 404


class MethodNotAllowed(GatewayError, InterfaceError):
    code = "METHOD_NOT_ALLOWED"
    http_status = 405


class GatewayInternalError(GatewayError, InternalError):
    code = "INTERNAL"
    http_status = 500


_BY_CODE: dict[str, type[GatewayError]] = {
    c.code: c
    for c in (
        SqlError, UnknownStoreError, NotSupported, ExecutionError, ForbiddenError, PartitionFailureError,
        NotUpToBoundError, NoCommonPositionError, StreamsNotStartedError, StreamsRebalancingError, StateStoreMigratedError,
        StreamsStoppedError, StateStoreNotAvailableError, InvalidPartitionError, RowLimitExceeded,
        StatementTimeout, StatementCancelled, RequestTooLarge, Unauthorized, BadRequest, NotAcceptable, RouteNotFound,
        MethodNotAllowed, GatewayInternalError, UnknownTopicError, OutOfMemoryError, ResponseTooLarge,
        ColumnNotYetAvailableError, TooManyStatements, StreamRequired,
    )
}
_BY_CODE.update({code: SubscriptionError for code in SUBSCRIPTION_CODES})

# Planner codes that are not their own class: all are programming errors in the SQL.
_SQL_CODES = frozenset({
    "PLANNING_ERROR", "SQL_SYNTAX_ERROR", "UNKNOWN_COLUMN", "TYPE_MISMATCH", "READ_ONLY",
    "FORBIDDEN_FUNCTION", "TABLE_SCAN_DISABLED", "INVALID_POSITION", "INVALID_SETTING", "PARAMETER_ERROR",
    "STATEMENT_TOO_LARGE",
})


def error_class_for_code(code: str, status: int = 500) -> type[GatewayError]:
    """The class for a wire ``code``; unknown codes fall back on the status so new server codes still map."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code in _SQL_CODES:
        return SqlError
    if code == "UNSUPPORTED":
        return NotSupported
    if status == 404:
        return UnknownStoreError
    if status == 503:
        return PartitionFailureError
    if 400 <= status < 500:
        return SqlError
    return GatewayInternalError
