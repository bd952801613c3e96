"""The ``POST /v1/sql`` request body: parsed and checked before any SQL is planned.

Every field is checked for type and range here, with the field's name in the
message, so a client learns exactly what was wrong with its request instead
of a generic 400 (or, worse, a silently ignored field).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

import orjson

from stores.iqv2.position import Position, PositionError

from ..engine.config import as_position
from ..engine.errors import BadRequest, RequestTooLarge

__all__ = ["SqlRequest", "parse_sql_request", "parse_json"]

_FIELDS = frozenset({"sql", "params", "position", "partial", "wait_ms", "max_rows", "session"})
_LONG_DIGITS = re.compile(rb"[0-9]{19}")  # an integer orjson might not read as the integer it is
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")


class SqlRequest(NamedTuple):
    """A checked request body (a NamedTuple: built on every request, and a frozen dataclass costs ~1 us to build)."""

    sql: str
    params: list[Any] | dict[str, Any] | None = None
    position: Position | None = None
    partial: bool | None = None
    wait_ms: int | None = None
    max_rows: int | None = None
    session: dict[str, Any] | None = None


def parse_json(raw: bytes | str, what: str) -> Any:
    """JSON a client sent, or a BadRequest naming ``what`` and the problem (never a RecursionError: 100,000
    nested brackets are a few hundred kilobytes).

    orjson reads it when it can (a tenth of the stdlib's cost for a request body: issue 14); the standard
    library's json reads everything else, and says what is wrong. orjson would read an integer past 64 bits
    as a float, so a body with 19 digits in a row anywhere goes the stdlib way; so do what orjson refuses and
    the stdlib takes (NaN, a BOM, a lone surrogate escape): the answer is the stdlib's, as it always was.
    """
    if (_LONG_DIGITS if isinstance(raw, bytes) else _LONG_DIGITS_TEXT).search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "colno", None)
        msg = getattr(exc, "msg", str(exc))
        raise BadRequest(f"{what} is not valid JSON: {msg}", line=line, col=col) from None
    except RecursionError:
        raise BadRequest(f"{what} nests JSON too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts (4,300)
        raise BadRequest(f"{what} is not usable JSON: {str(exc).splitlines()[0]}") from None


def parse_sql_request(raw: bytes, max_bytes: int) -> SqlRequest:
    """Parse the JSON body; each problem is a BadRequest naming the field (or RequestTooLarge)."""
    if len(raw) > max_bytes:
        raise RequestTooLarge(f"the request body has {len(raw)} bytes; the limit is {max_bytes}")
    if not raw or raw.isspace():
        raise BadRequest('the request body is empty; send JSON such as {"sql": "SELECT ..."}')
    body = parse_json(raw, "the request body")
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    if not _FIELDS.issuperset(body):
        unknown = sorted(set(body) - _FIELDS)
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    sql = body.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise BadRequest('field "sql" is required and must be a non-empty string')
    params = body.get("params")
    if params is not None and not isinstance(params, (list, dict)):
        raise BadRequest(f'field "params" must be an array or an object, got {type(params).__name__}')
    if len(body) == (2 if "params" in body else 1):  # the common body: nothing else to check
        return SqlRequest(sql, params)
    try:
        position = as_position(body.get("position"))
    except (PositionError, TypeError) as exc:
        raise BadRequest(f'field "position": {exc}') from None
    partial = body.get("partial")
    if partial is not None and not isinstance(partial, bool):
        raise BadRequest(f'field "partial" must be true or false, got {partial!r}')
    session = body.get("session")
    if session is not None and not isinstance(session, dict):
        raise BadRequest(f'field "session" must be an object of settings, got {type(session).__name__}')
    return SqlRequest(sql, params, position, partial, _count(body, "wait_ms", 0), _count(body, "max_rows", 0),
                      session or None)


def _count(body: dict[str, Any], name: str, least: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise BadRequest(f'field "{name}" must be an integer >= {least}, got {v!r}')
    return v
