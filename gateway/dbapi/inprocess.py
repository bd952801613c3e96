"""The in-process transport of the DB-API: statements run on a ``Gateway`` in this process.

No serialization at all: rows come from ``Result.rows()`` as Python values
(the engine's fast path skips DuckDB for plain key lookups), and the
connection's ``Session`` holds its SET settings exactly as the remote
transport keeps them for a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from iqgate_client.dbapi.outcome import Outcome
from iqgate_client.dbapi.types import native_fix_for

from gateway.errors import Error, GatewayInternalError, translate

if TYPE_CHECKING:
    from iqgate_client.position import Position

    from gateway.engine import Gateway

__all__ = ["InProcessTransport", "as_dbapi_error"]


class InProcessTransport:
    """Runs SQL on ``gateway`` with a session of its own (one per DB-API connection)."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        session: Mapping[str, Any] | None = None,
        partial: bool | None = None,
        wait_ms: int | None = None,
    ) -> None:
        self._gateway = gateway
        try:
            # Validated by the Session exactly like a SET statement would be.
            self._session: Any = gateway.session(**dict(session or {}))
        except Exception as exc:  # noqa: BLE001 - a bad setting is the caller's error, reported as PEP 249
            raise as_dbapi_error(exc) from exc
        self._partial = partial
        self._wait_ms = wait_ms

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, bound: Position | None) -> Outcome:
        try:
            result = self._gateway.sql(
                sql, params=params, position=bound, partial=self._partial, wait_ms=self._wait_ms,
                session=self._session,
            )
            statement = result.statement.value
            if statement == "set":
                return Outcome(statement, [], [], result.position, [], dict(result.settings))
            rows = result.rows()
            columns = [(str(n), str(t)) for n, t in result.columns]
            fixes = [native_fix_for(t) for _, t in columns]
            if any(fixes):
                rows = [
                    tuple(f(v) if f is not None and v is not None else v for f, v in zip(fixes, r, strict=False))
                    for r in rows
                ]
            result.close()  # rows are Python values now: give the DuckDB cursor back
        except Exception as exc:  # noqa: BLE001 - every failure reaches the caller as a PEP 249 class
            raise as_dbapi_error(exc) from exc
        return Outcome(
            statement=statement,
            columns=columns,
            rows=rows if isinstance(rows, list) else list(rows),
            position=result.position,
            partitions=result.partitions,
        )

    def settings(self) -> dict[str, Any]:
        return dict(self._session.settings) if self._session is not None else {}

    def server_version(self) -> str:
        try:
            return metadata.version("iqgate")
        except metadata.PackageNotFoundError:
            return "0"

    def close(self) -> None:
        self._session = None


def as_dbapi_error(exc: BaseException) -> Error:
    """The PEP 249 error for ``exc``: gateway errors as they are, planner/KIP-216 ones translated.

    Anything else is a bug below the DB-API; it still surfaces as a PEP 249
    class (InternalError) so ``except dbapi.Error`` holds, chained to the cause.
    """
    if isinstance(exc, Error):
        return exc
    mapped = translate(exc)
    if mapped is not None:
        return mapped
    if isinstance(exc, TypeError):
        from gateway.errors import InterfaceError

        return InterfaceError(str(exc))
    return GatewayInternalError(f"{type(exc).__name__}: {exc}")
