"""PEP 249 (DB-API 2.0) access to an iqgate server over HTTP (or to a Gateway in this process).

>>> import iqgate_client.dbapi as dbapi
>>> dbapi.apilevel, dbapi.paramstyle, dbapi.threadsafety
('2.0', 'qmark', 2)

``connect("http://host:port")`` talks to a gateway server (``POST /v1/sql``);
``connect(gateway=gw)`` runs statements on a ``Gateway`` in this process
(that needs the server package, ``iqgate``, which a pure client never imports).
Either way the cursor answers with the same values and the same exception
classes, and ``cursor.position`` / ``connection.position`` carry the IQv2
consistency token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,  # noqa: A004 - the PEP 249 name
)
from ..position import Position, PositionError
from .connection import Connection
from .cursor import Cursor
from .outcome import PartitionInfo
from .types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

__all__ = [
    # globals
    "apilevel", "threadsafety", "paramstyle", "connect",
    # exceptions
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    # constructors
    "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks", "TimestampFromTicks", "Binary",
    # type objects
    "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID",
    # classes
    "Connection", "Cursor", "PartitionInfo",
]

#: PEP 249: "String constant stating the supported DB API level."
apilevel = "2.0"

#: PEP 249: "Threads may share the module and connections." A connection's state (position,
#: settings) is updated under a lock; cursors must not be shared between threads.
threadsafety = 2

#: PEP 249: "Question mark style, e.g. ...WHERE name=?"
paramstyle = "qmark"


def _as_position(position: Any) -> Position | None:
    if position is None or isinstance(position, Position):
        return position
    try:
        if hasattr(position, "to_json_map"):  # the server's Position
            return Position.from_map(position)
        if isinstance(position, str):
            return Position.from_json(position)
        if isinstance(position, Mapping):
            return Position.from_map(position)
    except PositionError as exc:
        raise InterfaceError(f"connect(position=...): {exc}") from None
    raise InterfaceError(
        f"connect(position=...) takes a Position, a {{topic: {{partition: offset}}}} map or its JSON,"
        f" got {type(position).__name__}"
    )


def connect(
    url: str | None = None,
    *,
    gateway: Any = None,
    token: str | None = None,
    position: Position | Mapping[str, Any] | str | None = None,
    monotonic: bool = False,
    session: Mapping[str, Any] | None = None,
    partial: bool | None = None,
    wait_ms: int | None = None,
    timeout: float = 30.0,
    **http_options: Any,
) -> Connection:
    """Open a connection: remote (``url``) or in-process (``gateway``), exactly one of them.

    Args:
        url: ``http://host:port`` (or https) of a gateway server.
        gateway: a ``gateway.Gateway`` to run statements on in this process.
        token: bearer token for a server started with an auth token.
        position: a position bound every statement must be up to (read-your-writes).
        monotonic: also bound each statement by the merged position of this connection's earlier
            results, so reads never go back in time (even across server workers).
        session: initial session settings, as ``SET name = value`` would make them.
        partial: return data with per-partition failures beside it instead of an error.
        wait_ms: wait up to this long for a bound before failing with NOT_UP_TO_BOUND.
        timeout: HTTP read timeout in seconds (remote only).
        http_options: ``ca_certs`` (a PEM file to trust for an ``https://`` server with a self-signed
            certificate), ``headers``, ``connect_timeout``, ``pool_maxsize``.

    Returns:
        A PEP 249 ``Connection``.
    """
    if (url is None) == (gateway is None):
        raise InterfaceError("connect() needs exactly one of a server URL (connect('http://host:port'))"
                             " or an in-process gateway (connect(gateway=gw))")
    bound = _as_position(position)
    if session is not None and not isinstance(session, Mapping):
        raise InterfaceError(f"connect(session=...) must be a mapping of setting -> value, got {type(session).__name__}")
    if gateway is not None:
        if http_options or token is not None:
            raise InterfaceError(
                "connect(gateway=...) runs in this process: HTTP options"
                f" {sorted([*http_options, *(['token'] if token is not None else [])])} do not apply"
            )
        from gateway.dbapi.inprocess import InProcessTransport  # the server: only when handed its Gateway

        transport: Any = InProcessTransport(gateway, session=session, partial=partial, wait_ms=wait_ms)
    else:
        if not isinstance(url, str):
            raise InterfaceError(f"connect(url) must be a string, got {type(url).__name__}")
        from .remote import RemoteTransport

        try:
            transport = RemoteTransport(
                url, token=token, timeout=timeout, session=session, partial=partial, wait_ms=wait_ms,
                **http_options,
            )
        except TypeError as exc:
            raise InterfaceError(f"connect(): {exc}") from None
    return Connection(transport, position=bound, monotonic=monotonic)
