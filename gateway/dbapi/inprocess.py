"""The in-process transport of the DB-API: statements run on a ``Gateway`` in this process.

No serialization at all: rows come from ``Result.rows()`` as Python values
(the engine's fast path skips DuckDB for plain key lookups), and the
connection's ``Session`` holds its SET settings exactly as the remote
transport keeps them for a server.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from iqgate_client.dbapi.outcome import LIVE_COLUMNS, Outcome
from iqgate_client.dbapi.types import native_fix_for
from iqgate_client.position import Position as ClientPosition

from gateway.engine.errors import Error, GatewayInternalError, StreamRequired, translate
from gateway.engine.statement import Form

if TYPE_CHECKING:
    from iqgate_client.position import Position

    from gateway.engine.gateway import Gateway

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
            try:
                result = self._gateway.sql(
                    sql, params=params, position=bound, partial=self._partial, wait_ms=self._wait_ms,
                    session=self._session, form=Form.ROWS,
                )
            except StreamRequired:  # SUBSCRIBE: a live answer the cursor's fetches block on
                return self._subscribe(sql, params)
            statement = result.statement.value
            position = _client_position(result.position)
            if statement == "set":
                return Outcome(statement, [], [], position, [], dict(result.settings))
            columns, fixes = _shape(result.columns)
            first, rest = result.first_chunk()
            if rest is None:  # the whole answer is in hand (and the result closed)
                return Outcome(statement=statement, columns=columns, rows=_fixed(first, fixes),
                               position=position, partitions=result.partitions)
        except Exception as exc:  # noqa: BLE001 - every failure reaches the caller as a PEP 249 class
            raise as_dbapi_error(exc) from exc
        # more than a chunk: the cursor pulls the rest as it fetches (memory: a chunk, issue 14)
        return Outcome(statement=statement, columns=columns, rows=_fixed(first, fixes), position=position,
                       partitions=result.partitions, more=_rest(rest, fixes, result), close=result.close)

    def _subscribe(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Outcome:
        sub = self._gateway.subscribe(sql, params, session=self._session)
        columns, fixes = _shape(LIVE_COLUMNS + list(sub.columns))

        def resume() -> ClientPosition | None:
            return None if sub.position is None else _client_position(sub.position)

        return Outcome(statement="subscribe", columns=columns, rows=[],
                       position=_client_position(sub.position) if sub.position is not None else ClientPosition.empty(),
                       more=_live_rows(sub, fixes), close=sub.close, resume=resume)

    def settings(self) -> dict[str, Any]:
        return dict(self._session.settings) if self._session is not None else {}

    def server_version(self) -> str:
        try:
            return metadata.version("iqgate")
        except metadata.PackageNotFoundError:
            return "0"

    def close(self) -> None:
        self._session = None


def _shape(columns: Sequence[tuple[Any, Any]]) -> tuple[list[tuple[str, str]], tuple[Any, ...]]:
    """(the columns as the cursor describes them, each one's native fix): a statement's shape repeats on every
    call, and building them per call cost a fifth of the cursor's overhead (issue 14)."""
    named, fixes = _shape_of(tuple(columns))
    return list(named), fixes


@functools.lru_cache(maxsize=4096)
def _shape_of(columns: tuple[tuple[Any, Any], ...]) -> tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]:
    named = tuple((str(n), str(t)) for n, t in columns)
    return named, tuple(native_fix_for(t) for _, t in named)


@functools.lru_cache(maxsize=4096)
def _client_position(position: Any) -> ClientPosition:
    """The client's Position for the engine's, as ``Outcome`` promises (the remote transport's kind).

    Why cached: a store's position repeats on every read until its next
    batch, and the connection compares each result's position with its own:
    client with client is one dict comparison, client with engine JSON maps.
    """
    return ClientPosition.from_map(position)


def _fixed(rows: list[tuple[Any, ...]], fixes: Sequence[Any]) -> list[tuple[Any, ...]]:
    if not any(fixes):
        return rows if isinstance(rows, list) else list(rows)
    return [tuple(f(v) if f is not None and v is not None else v for f, v in zip(fixes, r, strict=False))
            for r in rows]


def _rest(chunks: Iterator[list[tuple[Any, ...]]], fixes: Sequence[Any], result: Any) -> Iterator[list[tuple[Any, ...]]]:
    """The chunks after the first, as PEP 249 errors when the engine fails while they stream."""
    try:
        for chunk in chunks:
            yield _fixed(chunk, fixes)
    except Exception as exc:  # noqa: BLE001 - a fetch raises a PEP 249 class
        raise as_dbapi_error(exc) from exc
    finally:
        result.close()


def _live_rows(sub: Any, fixes: Sequence[Any]) -> Iterator[list[tuple[Any, ...]]]:
    """A live answer's rows ``(op, position JSON, *row)``, a chunk of what is ready at a time, waiting for it."""
    from gateway.engine.live.changes import flat_rows

    try:
        while True:
            yield _fixed(flat_rows(sub.take(1024, None), sub.columns), fixes)
    except Exception as exc:  # noqa: BLE001 - a fetch raises a PEP 249 class
        raise as_dbapi_error(exc) from exc
    finally:
        sub.close()


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
        from gateway.engine.errors import InterfaceError

        return InterfaceError(str(exc))
    return GatewayInternalError(f"{type(exc).__name__}: {exc}")
