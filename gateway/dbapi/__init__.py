"""PEP 249 (DB-API 2.0) access to the gateway: the client's DB-API, plus in-process connections.

The module is ``iqgate_client.dbapi`` (the client distribution, which imports
nothing of the server); it is re-exported here so ``gateway.dbapi`` and
``from gateway import connect`` keep working for users of the server package.
``connect(gateway=gw)`` runs statements on a ``Gateway`` in this process
through ``inprocess.InProcessTransport``; ``connect("http://host:port")``
talks to a server. Either way the cursor answers with the same values and the
same exception classes.

>>> import gateway.dbapi as dbapi
>>> dbapi.apilevel, dbapi.paramstyle, dbapi.threadsafety
('2.0', 'qmark', 2)
"""

from __future__ import annotations

from iqgate_client.dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Connection,
    Cursor,
    DatabaseError,
    DataError,
    Date,
    DateFromTicks,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PartitionInfo,
    ProgrammingError,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    Warning,  # noqa: A004 - the PEP 249 name
    apilevel,
    connect,
    paramstyle,
    threadsafety,
)

__all__ = [
    "apilevel", "threadsafety", "paramstyle", "connect",
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks", "TimestampFromTicks", "Binary",
    "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID",
    "Connection", "Cursor", "PartitionInfo",
]
