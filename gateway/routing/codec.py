"""IQv2 requests and per-partition answers on the wire between iqgate servers (``POST /v1/iq``).

Why not pickle: a peer's bytes are untrusted input; here only the IQv2 query
classes and plain values can be decoded. A request travels as JSON with
tagged values (tuples, datetimes, enums); a successful partition answer
travels as the rows of the store relation (``arrow_rows``' raw store
values: numbers, strings, booleans, epoch ms), so the receiving gateway
merges them with its local rows without knowing each query's result shape.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from stores.iqv2 import query as q
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, QueryResult

__all__ = ["encode_request", "decode_request", "encode_answer", "decode_answer", "ShapedRows", "CodecError"]

_QUERIES: dict[str, type] = {
    name: getattr(q, name) for name in q.__all__ if isinstance(getattr(q, name), type)
    and dataclasses.is_dataclass(getattr(q, name))
}
_ENUMS: dict[str, type[enum.Enum]] = {"ResultOrder": q.ResultOrder}


class CodecError(ValueError):
    """A request or answer from a peer that does not decode (names what was wrong)."""


class ShapedRows:
    """A partition's rows as the store relation has them (``arrow_rows.collect`` appends _partition/_position)."""

    __slots__ = ("shaped_rows",)

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.shaped_rows = rows


def _enc(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, datetime):
        return {"$dt": v.isoformat()}
    if isinstance(v, Decimal):
        return {"$dec": str(v)}
    if isinstance(v, date):
        return {"$date": v.isoformat()}
    if isinstance(v, enum.Enum) and type(v).__name__ in _ENUMS:
        return {"$enum": type(v).__name__, "v": v.name}
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, (frozenset, set)):
        return {"$set": [_enc(x) for x in sorted(v, key=repr)]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if dataclasses.is_dataclass(v) and type(v).__name__ in _QUERIES:
        return {"$query": type(v).__name__,
                "fields": {f.name: _enc(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    raise CodecError(f"cannot send a {type(v).__name__} value to a peer: {v!r}")


def _dec(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, Mapping):
        raise CodecError(f"unexpected value {v!r}")
    try:
        if "$dt" in v:
            return datetime.fromisoformat(v["$dt"])
        if "$date" in v:
            return date.fromisoformat(v["$date"])
        if "$dec" in v:
            return Decimal(v["$dec"])
        if "$enum" in v:
            return _ENUMS[v["$enum"]][v["v"]]
        if "$tuple" in v:
            return tuple(_dec(x) for x in v["$tuple"])
        if "$set" in v:
            return frozenset(_dec(x) for x in v["$set"])
        if "$query" in v:
            cls = _QUERIES[v["$query"]]
            return cls(**{k: _dec(x) for k, x in v["fields"].items()})
    except (KeyError, TypeError, ValueError, InvalidOperation) as exc:
        raise CodecError(f"cannot decode {str(v)[:200]}: {type(exc).__name__}: {exc}") from None
    raise CodecError(f"unknown tagged value {str(v)[:200]}")


_SCALARS = (bool, int, float, str, Decimal, date)  # datetime is a date
_TIMES = frozenset({"time_from", "time_to", "as_of_timestamp", "from_timestamp", "to_timestamp"})
_ORDERS = frozenset({"result_order", "key_order"})
_OPTIONAL = frozenset({"lower", "upper"})  # open range ends; WindowRangeQuery's key and the times by their class


def _is_key(v: Any) -> bool:
    """A store key as a peer sends one: a scalar, or a tuple of scalars (a composite key)."""
    if isinstance(v, tuple):
        return bool(v) and all(isinstance(x, _SCALARS) for x in v)
    return isinstance(v, _SCALARS)


def _check_query(query: Any) -> None:
    """Each field of a decoded query of the type its class gives it, or CodecError naming the field.

    Why: the classes are plain dataclasses, so ``_dec`` would build a KeyQuery with a set for a key or a
    number for its order, and the store would fail on it as an internal error (a 500) instead of a 400.
    """
    name = type(query).__name__
    for f in dataclasses.fields(query):
        v = getattr(query, f.name)
        optional = v is None and (f.name in _OPTIONAL or f.default is None)
        if f.name in _ORDERS:
            ok = isinstance(v, q.ResultOrder)
        elif f.name == "skip_cache":
            ok = isinstance(v, bool)
        elif f.name in _TIMES:
            ok = optional or (isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63)
        elif f.name == "keys":
            ok = isinstance(v, tuple) and bool(v) and all(_is_key(k) for k in v)
        else:  # key, lower, upper
            ok = optional or _is_key(v)
        if not ok:
            raise CodecError(f"{name}.{f.name} cannot be {str(v)[:100]!r} ({type(v).__name__})")


def encode_request(request: StateQueryRequest) -> dict[str, Any]:
    bound = request.position_bound
    return {
        "store": request.store_name,
        "query": _enc(request.query),
        "partitions": None if request.partitions is None else sorted(request.partitions),
        "bound": None if bound.is_unbounded() else bound.position.to_json_map(),
        "require_active": request.active_required,
        "execution_info": request.execution_info_enabled,
        "snapshot": None if request.snapshot is None else request.snapshot.to_json_map(),
    }


def decode_request(body: Any) -> StateQueryRequest:
    if not isinstance(body, Mapping) or not isinstance(body.get("store"), str):
        raise CodecError("an IQv2 request is a JSON object with store, query, partitions, bound, require_active")
    query = _dec(body.get("query"))
    if type(query).__name__ not in _QUERIES:
        raise CodecError(f"query must be one of {sorted(_QUERIES)}")
    _check_query(query)
    r = StateQueryRequest.in_store(body["store"]).with_query(query)
    parts = body.get("partitions")
    if parts is not None:
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise CodecError("partitions must be a list of integers or null")
        r = r.with_partitions(parts)
    if body.get("bound") is not None:
        try:
            r = r.with_position_bound(PositionBound.at(Position.from_map(body["bound"])))
        except (TypeError, ValueError) as exc:
            raise CodecError(f"bound is not a position: {exc}") from None
    if body.get("snapshot") is not None:  # as of exactly this Position (a statement brought to one moment)
        try:
            r = r.with_snapshot(Position.from_map(body["snapshot"]))
        except (TypeError, ValueError) as exc:
            raise CodecError(f"snapshot is not a position: {exc}") from None
    if body.get("require_active"):
        r = r.require_active()
    if body.get("execution_info"):
        r = r.enable_execution_info()
    return r


def encode_answer(p: int, qr: QueryResult, rows: list[tuple[Any, ...]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"partition": p, "position": None if qr.position is None else qr.position.to_json_map(),
                           "execution_info": list(qr.execution_info)}
    if qr.is_failure:
        out["failure_reason"] = qr.failure_reason.label
        out["failure_message"] = qr.failure_message
    else:
        out["rows"] = _tag_decimals(rows or [])
    return out


def _tag_decimals(rows: list[Any]) -> list[Any]:
    """DECIMAL cells as ``{"$dec": text}`` (exact; JSON numbers would be floats); columns found on the first row."""
    cols = [i for i, v in enumerate(rows[0]) if isinstance(v, Decimal)] if rows else []
    if not cols:
        return rows
    out = []
    for r in rows:
        r = list(r)
        for i in cols:
            if r[i] is not None:
                r[i] = {"$dec": str(r[i])}
        out.append(r)
    return out


def _untag(v: Any) -> Any:
    if isinstance(v, Mapping) and "$dec" in v:
        try:
            return Decimal(v["$dec"])
        except (InvalidOperation, TypeError, ValueError):
            raise CodecError(f"a DECIMAL cell {str(v)[:100]} does not decode") from None
    return v


def decode_answer(raw: Any, host: str, active: bool) -> tuple[int, QueryResult]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("partition"), int):
        raise CodecError(f"a partition answer is a JSON object with partition; got {str(raw)[:200]}")
    pos = None if raw.get("position") is None else Position.from_map(raw["position"])
    if raw.get("failure_reason") is not None:
        try:
            reason = FailureReason[raw["failure_reason"]]
        except KeyError:
            raise CodecError(f"unknown failure reason {raw['failure_reason']!r}") from None
        qr = QueryResult.for_failure(reason, str(raw.get("failure_message") or ""), pos)
    else:
        rows = raw.get("rows")
        if not isinstance(rows, list):
            raise CodecError("a successful partition answer carries rows (a list)")
        qr = QueryResult.for_result(ShapedRows([tuple(_untag(v) for v in r) for r in rows]), pos)
    info = tuple(str(x) for x in raw.get("execution_info") or ())
    if info:
        qr = qr.with_execution_info(*info)
    return raw["partition"], qr.served_by(host, active)
