"""Running a plan's IQv2 requests: one StateQueryRequest per store reference, per-partition answers back.

This is the step between planning and Arrow: each request goes to the
Queryable (a StreamsApp or a StateDirReader) as is; a partition behind the
statement's position bound is asked again until the wait ends; KIP-216
exceptions become gateway errors here, so nothing above sees store types.
"""

from __future__ import annotations

import time
from typing import Any

from planner.plan import StoreScan
from stores.app.protocol import Queryable
from stores.catalog.schema import SqlType, StoreKind, StoreSpec
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    TimestampedKeyQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import StateQueryResult

from .errors import GatewayInternalError, translate
from .outcomes import is_behind

__all__ = ["run_scan", "query_store", "probe_query", "Answers"]

_MIN_POLL_S = 0.002
_MAX_POLL_S = 0.05

Answers = list[tuple[StateQueryRequest, StateQueryResult]]


def run_scan(source: Queryable, scan: StoreScan, bound: Position, wait_ms: int, deadline: float) -> Answers:
    """Run every request of a scan; while a partition is behind the bound, re-ask it until ``wait_ms`` ends."""
    pb = PositionBound.at(bound)
    requests = [r if pb.is_unbounded() and r.position_bound.is_unbounded()
                else r.with_position_bound(PositionBound.at(r.position_bound.position.merge(bound)))
                for r in scan.requests]
    answers = [query_store(source, r) for r in requests]
    if wait_ms <= 0 or pb.is_unbounded():
        return answers
    wait_until = min(time.monotonic() + wait_ms / 1000, deadline)
    pause = _MIN_POLL_S
    for _ in range(100_000):  # bounded; the clock ends it long before
        behind = [i for i, (_, a) in enumerate(answers) if is_behind(a)]
        now = time.monotonic()
        if not behind or now >= wait_until:
            break
        time.sleep(min(pause, wait_until - now))
        pause = min(pause * 2, _MAX_POLL_S)
        for i in behind:
            answers[i] = query_store(source, requests[i])
    return answers


def query_store(source: Queryable, request: StateQueryRequest) -> tuple[StateQueryRequest, StateQueryResult]:
    """One request; the KIP-216 exceptions (unknown store, not started, stopped ...) become gateway errors."""
    try:
        return request, source.query(request)
    except Exception as exc:  # noqa: BLE001 - KIP-216 exceptions become gateway errors
        mapped = translate(exc)
        if mapped is None:
            raise GatewayInternalError(f"store {request.store_name!r} failed: {type(exc).__name__}: {exc}") from exc
        raise mapped from exc


def probe_query(spec: StoreSpec) -> Any:
    """The cheapest query each store kind answers: a lookup of a zero-like key."""
    key = {SqlType.VARCHAR: "", SqlType.BOOLEAN: False, SqlType.DOUBLE: 0.0}.get(spec.key.type, 0)
    if spec.kind is StoreKind.WINDOW:
        return WindowKeyQuery.with_key_and_window_start_range(key, 0, 0)
    if spec.kind is StoreKind.SESSION:
        return WindowRangeQuery.with_key(key)
    if spec.kind is StoreKind.VERSIONED:
        return VersionedKeyQuery.with_key(key)
    if spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE:
        return TimestampedKeyQuery.with_key(key)
    return KeyQuery.with_key(key)
