"""What a source record is, checked the same way for every source a producer writes to (EventLog, Kafka).

A record is ``(key, value, timestamp)`` or ``(key, value, timestamp, headers)``
(or a mapping with those keys): the key a string or an integer (it chooses the
partition; a list or a mapping is written as its compact JSON text, as Kafka's JSON key format carries an
ARRAY or STRUCT key), the value a mapping of field → value (JSON) or None (a tombstone),
the timestamp epoch ms or a datetime (None: now), the headers (optional, as
Kafka's record headers) a list of ``(name, value)`` pairs or a mapping, names
text and values bytes, text (UTF-8) or None; names may repeat and order is kept.
Checking everything before writing anything is what lets a producer say
"nothing was written" truthfully.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from ..iqv2.timeutil import MAX_MS, MIN_MS, now_ms, to_epoch_ms

__all__ = ["InvalidRecordError", "unpack_record", "check_record", "value_json", "record_headers", "Headers",
           "MAX_HEADERS", "MAX_VALUE_DEPTH"]

Headers = tuple[tuple[str, bytes | None], ...]
MAX_HEADERS = 1000  # per record: a bound on what one record may carry
# How deep a value may nest (the value object is level 1). Sources parse values with Python's json on Spark's
# workers, under their recursion limit (1,000 frames, some taken by the worker): a record nested near that
# depth failed every micro-batch that read it, so the pipeline could never get past it.
MAX_VALUE_DEPTH = 256


class InvalidRecordError(ValueError):
    """A record that cannot be appended (bad key, value, timestamp or partition)."""


def unpack_record(rec: Any, i: int) -> tuple[Any, Any, Any]:
    """``(key, value, timestamp)`` of a tuple or a mapping; record ``i`` is named in the error."""
    if isinstance(rec, Mapping):
        unknown = set(rec) - {"key", "value", "timestamp", "headers"}
        if unknown or "key" not in rec:
            raise InvalidRecordError(f"record {i}: expected keys key, value, timestamp, headers; got {sorted(rec)}")
        return json_key(rec["key"], i), rec.get("value"), rec.get("timestamp")
    if isinstance(rec, (tuple, list)) and len(rec) in (2, 3, 4):
        return json_key(rec[0], i), rec[1], rec[2] if len(rec) >= 3 else None
    raise InvalidRecordError(f"record {i}: expected (key, value, timestamp) or (key, value, timestamp, headers) "
                             f"or a mapping, got {rec!r}")


def json_key(key: Any, i: int) -> Any:
    """A list or mapping key → its compact JSON text (an ARRAY or STRUCT key); any other key as it is."""
    if isinstance(key, (list, tuple, Mapping)):
        try:
            return json.dumps(dict(key) if isinstance(key, Mapping) else list(key), separators=(",", ":"),
                              ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidRecordError(f"record {i}: the key is not JSON-serializable: {exc}") from None
    return key


def record_headers(rec: Any, where: str) -> Headers:
    """The checked headers of a record (see the module doc): ``((name, bytes or None), …)``, () when none."""
    raw = rec.get("headers") if isinstance(rec, Mapping) else (rec[3] if isinstance(rec, (tuple, list))
                                                                and len(rec) == 4 else None)
    if raw is None:
        return ()
    pairs = list(raw.items()) if isinstance(raw, Mapping) else raw
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, (list, tuple)):
        raise InvalidRecordError(f"{where}: headers must be a list of (name, value) pairs or a mapping, "
                                 f"got {type(raw).__name__}")
    if len(pairs) > MAX_HEADERS:
        raise InvalidRecordError(f"{where}: {len(pairs)} headers; a record carries at most {MAX_HEADERS}")
    out = []
    for j, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise InvalidRecordError(f"{where}: header {j} must be a (name, value) pair with a text name, "
                                     f"got {pair!r}")
        name, v = pair
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif isinstance(v, (bytearray, memoryview)):
            v = bytes(v)
        elif v is not None and not isinstance(v, bytes):
            raise InvalidRecordError(f"{where}: header {name!r}: the value must be bytes, text or None, "
                                     f"got {type(v).__name__}")
        out.append((name, v))
    return tuple(out)


def check_record(key: Any, value: Any, ts: Any, where: str) -> tuple[Any, dict[str, Any] | None, int]:
    """The record in canonical form (JSON-ready value, epoch-ms timestamp) or InvalidRecordError."""
    if key is not None and (isinstance(key, float) or not isinstance(key, (str, int))):
        raise InvalidRecordError(f"{where}: key must be a string or an integer, got {type(key).__name__}")
    if value is not None and not isinstance(value, Mapping):
        raise InvalidRecordError(f"{where}: value must be a mapping of field -> value or None, "
                                 f"got {type(value).__name__}")
    if isinstance(key, int) and not isinstance(key, bool) and not MIN_MS <= key <= MAX_MS:
        raise InvalidRecordError(f"{where}: key {key} does not fit in 64 bits (an integer key is a Kafka long)")
    try:
        t = now_ms() if ts is None else to_epoch_ms(ts, "timestamp")
    except TypeError as exc:
        raise InvalidRecordError(f"{where}: {exc}") from None
    if not 0 <= t <= MAX_MS:  # as Kafka's ProducerRecord: "Timestamp should always be non-negative or null"
        raise InvalidRecordError(f"{where}: timestamp must be non-negative epoch milliseconds that fit in 64 bits, "
                                 f"got {t}")
    if value is not None:
        value = {str(k): _jsonable(v) for k, v in value.items()}
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidRecordError(f"{where}: value is not JSON-serializable: {exc}") from None
        except RecursionError:
            text = None
        if (text is None or text.count("[") + text.count("{") > MAX_VALUE_DEPTH) \
                and nests_deeper(value, MAX_VALUE_DEPTH):  # the bracket count first: few values nest at all
            raise InvalidRecordError(f"{where}: value nests more than {MAX_VALUE_DEPTH} levels deep (the value "
                                     "object is the first)") from None
    return key, value, t


def nests_deeper(value: Any, levels: int) -> bool:
    """Whether containers (mappings, lists) in ``value`` go more than ``levels`` deep; iterative, and it stops
    there (a cycle below that depth cannot keep it walking)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v.values() if isinstance(v, Mapping) else v if isinstance(v, (list, tuple)) else None
        if children is None:
            continue
        if d > levels:
            return True
        stack.extend((c, d + 1) for c in children if isinstance(c, (Mapping, list, tuple)))
    return False


def value_json(value: dict[str, Any] | None) -> bytes | None:
    """The bytes of a checked value as sources carry it (compact JSON; None stays a tombstone)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _jsonable(v: Any) -> Any:
    """Datetimes become ISO strings, which the sources parse into TIMESTAMP/DATE fields."""
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return v
