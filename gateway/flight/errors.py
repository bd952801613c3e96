"""Gateway errors as Flight statuses: the gRPC code a client can act on, the iqgate code in every message.

The mapping: retryable errors and partition failures (NOT_UP_TO_BOUND,
STREAMS_REBALANCING …) are UNAVAILABLE, a statement out of time is
DEADLINE_EXCEEDED, a cancelled one CANCELLED, a missing credential
UNAUTHENTICATED, refused access PERMISSION_DENIED, the server's own bugs
INTERNAL, and everything the request itself got wrong (SQL errors with their
line and column, limits, bad headers, bad parameters) INVALID_ARGUMENT. The
message is ``CODE: message (line L, column C)`` and the trailer ``x-iq-error``
carries the whole error as JSON (code, message, retryable, line, col,
partitions): ADBC shows trailers as the error's details.

pyarrow sends the first group through its FlightError classes. It has none
for INVALID_ARGUMENT, NOT_FOUND or UNIMPLEMENTED: those come from raising
ArrowInvalid, KeyError or NotImplementedError, and pyarrow appends the
Python traceback of such an exception to the message the client reads. The
classes below refuse to be formatted as a traceback (their ``__cause__``
cannot be read), and Arrow then names only the class: the client reads
``… Detail: Python exception: InvalidArgument``, never a server stack.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from .internals import GatewayError, GatewayInternalError, translate

__all__ = ["InvalidArgument", "NotFound", "Unimplemented", "flight_error", "mapped_errors", "refusal"]

log = logging.getLogger("iqgate.flight")

ERROR_TRAILER = "x-iq-error"


class _Untraced:
    """An exception whose traceback cannot be formatted (see the module docstring), so Arrow names its class."""

    @property
    def __cause__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("an iqgate Flight status is not formatted as a traceback")

    @__cause__.setter
    def __cause__(self, value: Any) -> None:
        pass


class InvalidArgument(_Untraced, pa.ArrowInvalid):
    """INVALID_ARGUMENT."""


class NotFound(_Untraced, pa.ArrowKeyError):
    """NOT_FOUND (a ticket or prepared statement handle the server does not know)."""


class Unimplemented(_Untraced, pa.ArrowNotImplementedError):
    """UNIMPLEMENTED (Flight SQL commands iqgate does not serve: transactions, Substrait)."""


def _status_class(err: GatewayError) -> type[Exception]:
    status = err.http_status
    if err.retryable or status in (503, 409):
        return fl.FlightUnavailableError
    if status == 401:
        return fl.FlightUnauthenticatedError
    if status == 403:
        return fl.FlightUnauthorizedError
    if status == 504:
        return fl.FlightTimedOutError
    if status == 499:
        return fl.FlightCancelledError
    if status >= 500 and status != 507:
        return fl.FlightInternalError
    return InvalidArgument  # 4xx: the request (SQL, parameters, headers, limits) is what must change


def flight_error(err: GatewayError, context: Any = None) -> Exception:
    """The exception to raise from a Flight handler for ``err``; with ``context``, the ``x-iq-error`` trailer."""
    if context is not None:
        try:
            context.add_trailer(ERROR_TRAILER, json.dumps(err.to_error_body()["error"], default=str))
        except Exception:  # noqa: BLE001 - a trailer that cannot be added must not hide the error itself
            pass
    return _status_class(err)(str(err))


def refusal(code: str, message: str, *, status: type[Exception] = InvalidArgument, context: Any = None) -> Exception:
    """An error of this face's own (a bad header, an unknown handle), in the engine's shape: ``CODE: message``
    and, with ``context``, the ``x-iq-error`` trailer."""
    err = GatewayError(message, code=code, http_status=_HTTP.get(status, 400))
    if context is not None:
        flight_error(err, context)
    return status(str(err))


_HTTP: dict[type[Exception], int] = {InvalidArgument: 400, NotFound: 404, Unimplemented: 501,
                                    fl.FlightUnauthenticatedError: 401, fl.FlightUnauthorizedError: 403,
                                    fl.FlightUnavailableError: 503}


@contextmanager
def mapped_errors(context: Any, what: str) -> Iterator[None]:
    """Run a handler's body: gateway errors become their Flight status, a bug INTERNAL (logged with its stack
    for the operator; the client reads the exception's type and message only)."""
    try:
        yield
    except (fl.FlightError, InvalidArgument, NotFound, Unimplemented):
        raise
    except GatewayError as exc:
        raise flight_error(exc, context) from None
    except Exception as exc:  # noqa: BLE001 - the client gets a status, never a stack
        mapped = translate(exc)
        if mapped is None:
            log.error("Flight %s failed", what, exc_info=exc)
            mapped = GatewayInternalError(f"{type(exc).__name__}: {exc}")
        raise flight_error(mapped, context) from None
