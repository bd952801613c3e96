"""The PEP 249 connection: a transport plus the per-connection consistency state.

The connection owns what must persist across statements: the position bound
given at connect time, the merged position of every result it has seen (the
consistency token; with ``monotonic=True`` it is sent as the bound of each
request, so reads on one connection never go back in time, even across
gateway workers), and the session settings (kept by the transport).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from .. import errors as _errors
from ..errors import InterfaceError
from ..position import Position
from .cursor import Cursor
from .outcome import Outcome, Transport

__all__ = ["Connection"]


class Connection:
    """PEP 249 connection. commit() and rollback() are no-ops: the gateway only reads."""

    # PEP 249 optional extension: the exception classes as connection attributes.
    Warning = _errors.Warning
    Error = _errors.Error
    InterfaceError = _errors.InterfaceError
    DatabaseError = _errors.DatabaseError
    DataError = _errors.DataError
    OperationalError = _errors.OperationalError
    IntegrityError = _errors.IntegrityError
    InternalError = _errors.InternalError
    ProgrammingError = _errors.ProgrammingError
    NotSupportedError = _errors.NotSupportedError

    def __init__(self, transport: Transport, *, position: Position | None = None, monotonic: bool = False) -> None:
        self._transport: Transport | None = transport
        self._bound = position if position is not None else Position.empty()
        self._monotonic = bool(monotonic)
        self._position = Position.empty()
        self._lock = threading.Lock()
        self._cursors: weakref.WeakSet[Cursor] = weakref.WeakSet()

    # -- state ----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._transport is None

    def _live(self) -> Transport:
        if self._transport is None:
            raise InterfaceError("the connection is closed")
        return self._transport

    @property
    def position(self) -> Position:
        """The merged position over every result this connection has read (empty before the first)."""
        return self._position

    @property
    def monotonic(self) -> bool:
        return self._monotonic

    @property
    def settings(self) -> dict[str, Any]:
        """The session settings in force (changed with ``SET name = value``)."""
        return self._live().settings()

    @property
    def server_version(self) -> str:
        return self._live().server_version()

    # -- PEP 249 ----------------------------------------------------------------------
    def cursor(self) -> Cursor:
        self._live()
        cur = Cursor(self)
        self._cursors.add(cur)
        return cur

    def commit(self) -> None:
        """Nothing to commit (reads only), but a closed connection still refuses, as PEP 249 expects."""
        self._live()

    def rollback(self) -> None:
        """No-op: SQLAlchemy's pool calls it whenever a connection goes back to the pool."""
        self._live()

    def close(self) -> None:
        """Close the transport and every cursor. A second close raises InterfaceError (the dbapi20 suite asks)."""
        transport = self._live()
        self._transport = None
        for cur in list(self._cursors):
            cur.close()
        transport.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.closed:
            self.close()

    def __repr__(self) -> str:
        return f"<iqgate Connection {'closed' if self.closed else 'open'} position={self._position}>"

    # -- for cursors ------------------------------------------------------------------------
    def _run(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Outcome:
        transport = self._live()
        bound = self._bound.merge(self._position) if self._monotonic else self._bound
        outcome = transport.execute(sql, params, bound if not bound.is_empty() else None)
        pos = outcome.position
        if pos != self._position:  # the common case (nothing new) skips rebuilding the position
            with self._lock:
                self._position = self._position.merge(pos)
        return outcome

    def _forget(self, cursor: Cursor) -> None:
        self._cursors.discard(cursor)
