"""The in-process transport of the DB-API: statements run on a ``Gateway`` in this process.

No serialization at all: rows come from ``Result.rows()`` as Python values
(the engine's fast path skips DuckDB for plain key lookups), and the
connection's ``Session`` holds its SET settings exactly as the HTTP server
would for a remote client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from gateway.errors import Error, GatewayInternalError, ProgrammingError, translate

from .outcome import Outcome, PartitionInfo

if TYPE_CHECKING:
    from gateway.engine import Gateway
    from stores.position import Position

__all__ = ["InProcessTransport"]


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
        self._session = gateway.session()
        self._partial = partial
        self._wait_ms = wait_ms
        for name, value in (session or {}).items():
            self._apply_setting(name, value)

    def _apply_setting(self, name: str, value: Any) -> None:
        """Initial settings go through SET so they are validated exactly like a user's SET statement."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ProgrammingError(f"invalid session setting name {name!r} in connect(session=...)")
        literal = _sql_literal(value)
        self.execute(f"SET {name} = {literal}", None, None)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, bound: Position | None) -> Outcome:
        try:
            result = self._gateway.sql(
                sql,
                params=params,
                position=bound,
                partial=self._partial,
                wait_ms=self._wait_ms,
                session=self._session,
            )
            statement = getattr(result.statement, "value", result.statement)
            if statement == "set":
                return Outcome(str(statement), [], [], result.position, [], self.settings())
            rows = result.rows()
            columns = [(str(n), str(t)) for n, t in result.columns]
        except Exception as exc:  # noqa: BLE001 - every failure reaches the caller as a PEP 249 class
            raise translate_or_raise(exc) from exc
        return Outcome(
            statement=str(statement),
            columns=columns,
            rows=rows if isinstance(rows, list) else list(rows),
            position=result.position,
            partitions=[
                PartitionInfo(p.store, p.partition, _reason(p.failure_reason), p.failure_message, p.position)
                for p in result.partitions
            ],
        )

    def settings(self) -> dict[str, Any]:
        s = self._session
        for attr in ("settings", "as_dict", "to_dict"):
            v = getattr(s, attr, None)
            if v is not None:
                v = v() if callable(v) else v
                return dict(v)
        return {}

    def server_version(self) -> str:
        try:
            return metadata.version("iqgate")
        except metadata.PackageNotFoundError:
            return "0"

    def close(self) -> None:
        self._session = None


def _reason(reason: Any) -> str | None:
    if reason is None:
        return None
    return str(getattr(reason, "label", reason))


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        import json

        value = json.dumps(value)
    return "'" + value.replace("'", "''") + "'"


def translate_or_raise(exc: BaseException) -> Error:
    """The PEP 249 error for ``exc``: gateway errors as they are, planner/KIP-216 ones translated."""
    if isinstance(exc, Error):
        return exc
    mapped = translate(exc)
    if mapped is not None:
        return mapped
    return GatewayInternalError(f"{type(exc).__name__}: {exc}")
