"""Result values as JSON, one encoding for every JSON the gateway writes (HTTP bodies, NDJSON, the CLI).

Numbers stay numbers (NaN/Infinity become null: JSON has none), times and
dates ISO-8601 with their offset, DECIMAL as a string (no precision lost),
BLOB as base64, INTERVAL and UUID as text, sets and tuples as arrays,
LIST as arrays, STRUCT and MAP as objects (a MAP's date/time keys ISO-8601).
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import orjson

__all__ = ["json_default", "dumps", "dumps_bytes"]


def json_default(v: Any) -> Any:
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, timedelta | uuid.UUID):
        return str(v)
    if isinstance(v, set | frozenset | tuple):
        return list(v)
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {_key(k): _clean(x) for k, x in v.items()}
    return v


def _key(k: Any) -> Any:
    """A MAP's key as a JSON object key: dates and times ISO-8601, BLOBs base64 (JSON keys are text)."""
    if k is None or isinstance(k, str | int | float | bool):
        return k
    return json_default(k)


# one encoder for every call: json.dumps with any option builds a new JSONEncoder each time (~3 us a call)
_ENCODER = json.JSONEncoder(default=json_default, separators=(",", ":"), allow_nan=False)


def dumps(obj: Any) -> str:
    """Compact JSON; non-finite floats become null. See ``dumps_bytes``."""
    return dumps_bytes(obj).decode("utf-8")


def dumps_bytes(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes: orjson, or the standard library's json for what orjson does not write.

    Why orjson: its C encoder costs a tenth of the stdlib's Python-level
    ``JSONEncoder.encode`` for a point lookup's row, which is a share of the
    request worth having (issue 14). It writes text as UTF-8 (the stdlib
    wrote ``\\u00e9`` escapes: the same JSON) and NaN/Infinity as null, as
    ``_clean`` does. What it refuses (integers past 64 bits, a lone
    surrogate, MAP keys that are not text, times with a UTC offset) goes the
    stdlib way, which answers as it always did.
    """
    try:
        return orjson.dumps(obj, default=json_default)
    except TypeError:
        pass
    try:
        text = _ENCODER.encode(obj)
    except (ValueError, TypeError):  # a non-finite float, or a MAP key JSON cannot hold as is
        text = _ENCODER.encode(_clean(obj))
    return text.encode("ascii")  # the stdlib escapes every non-ASCII character
