"""Running a plan's IQv2 requests: one StateQueryRequest per store reference, per-partition answers back.

This is the step between planning and Arrow: each request goes to the
Source (a StreamsApp or a StateDirReader) as is; a partition behind the
statement's position bound is asked again until the wait ends (see
``Waiting``: never for a bound beyond the source's end, never more than a
few statements at once); KIP-216 exceptions become gateway errors here, so
nothing above sees store types.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from planner.plan import StoreScan
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
from .guards import StatementWatch
from .outcomes import is_behind
from .sources import Capabilities, Source

__all__ = ["run_scan", "query_store", "read_point", "probe_query", "Answers", "Waiting"]

_MIN_POLL_S = 0.002
_MAX_POLL_S = 0.05

Answers = list[tuple[StateQueryRequest, StateQueryResult]]


class Waiting:
    """How a statement may wait for partitions behind its position bound.

    Waiting must not hold the server hostage: a bound beyond the end of the
    source log cannot be reached by waiting, so it is answered at once; and at
    most ``slots`` statements wait at a time (the rest are answered at once),
    so waiting requests can never occupy every worker thread. ``note`` says
    why a statement did not wait, for its error message.
    """

    def __init__(self, source: Source, caps: Capabilities, wait_ms: int, watch: StatementWatch,
                 slots: threading.Semaphore, limit: int) -> None:
        self.source, self.wait_ms, self.watch, self.slots, self.limit = source, wait_ms, watch, slots, limit
        self.caps = caps
        self.note = ""

    def beyond_the_end(self, bound: Position) -> str | None:
        """A component of ``bound`` past the source's last offset, described; None if all are reachable."""
        ends = self.caps.source_end_offsets
        if ends is None:
            return None
        try:
            end = ends(tuple(bound.topics()))
        except Exception:  # noqa: BLE001 - the source cannot say: wait as usual
            return None
        if end is None:
            return None
        for topic in sorted(bound.topics()):
            for p, off in sorted(bound.partition_positions(topic).items()):
                last = end.offset(topic, p)
                if topic in end.topics() and (last is None or off > last):
                    where = "is empty" if last is None else f"ends at offset {last}"
                    return (f"the bound asks for {topic}/{p} offset {off}, but that partition of the source {where}: "
                            "waiting cannot reach it")
        return None


def run_scan(source: Source, scan: StoreScan, bound: Position, waiting: Waiting | None) -> Answers:
    """Run every request of a scan; while a partition is behind the bound, re-ask it until the wait ends
    (``waiting`` None: the statement does not wait).

    Between two asks it sleeps with a backoff (2 ms up to 50 ms), or, from a source that wakes waiters (a
    StreamsApp in this process), until the next batch is applied: the count of applied batches is read before
    the first ask, so a commit between an ask and the wait is never missed."""
    pb = PositionBound.at(bound)
    requests = [r if pb.is_unbounded() and r.position_bound.is_unbounded()
                else r.with_position_bound(PositionBound.at(r.position_bound.position.merge(bound)))
                for r in scan.requests]
    caps = waiting.caps if waiting is not None and not pb.is_unbounded() else None
    count, wake = (caps.applied_batches, caps.wait_applied) if caps is not None else (None, None)
    seen = count() if count is not None and wake is not None else 0  # before the first ask
    answers = [query_store(source, r) for r in requests]
    if waiting is None or pb.is_unbounded() or not any(is_behind(a) for _, a in answers):
        return answers
    unreachable = waiting.beyond_the_end(bound)
    if unreachable is not None:
        waiting.note = unreachable
        return answers
    if not waiting.slots.acquire(blocking=False):
        waiting.note = (f"{waiting.limit} statement(s) are already waiting for a position bound (the server's "
                        "limit): this one was answered at once; retry later")
        return answers
    try:
        wait_until = min(time.monotonic() + waiting.wait_ms / 1000, waiting.watch.deadline)
        pause = _MIN_POLL_S
        for _ in range(100_000):  # bounded; the clock ends it long before
            behind = [i for i, (_, a) in enumerate(answers) if is_behind(a)]
            now = time.monotonic()
            if not behind or now >= wait_until or not waiting.watch.alive():
                break
            if wake is not None and count is not None:  # woken by the next batch's commit (the pause: a fallback)
                seen = wake(seen, min(pause, wait_until - now))
            else:
                time.sleep(min(pause, wait_until - now))
            pause = min(pause * 2, _MAX_POLL_S)
            for i in behind:
                answers[i] = query_store(source, requests[i])
    finally:
        waiting.slots.release()
    return answers


def query_store(source: Source, request: StateQueryRequest) -> tuple[StateQueryRequest, StateQueryResult]:
    """One request; the KIP-216 exceptions (unknown store, not started, stopped ...) become gateway errors."""
    try:
        return request, source.query(request)
    except Exception as exc:  # noqa: BLE001 - KIP-216 exceptions become gateway errors
        mapped = translate(exc)
        if mapped is None:
            raise GatewayInternalError(f"store {request.store_name!r} failed: {type(exc).__name__}: {exc}") from exc
        raise mapped from exc


def read_point(caps: Capabilities, store: str, partition: int, key: Any, bound: PositionBound) -> Any:
    """The source's ``point_read`` (a KeyQuery answered without the IQv2 objects: StreamsApp.point_read), or None
    where the source has none or leaves this one to ``query``; its KIP-216 exceptions become gateway errors,
    as ``query_store``'s do."""
    read = caps.point_read
    if read is None:
        return None
    try:
        return read(store, partition, key, bound)
    except Exception as exc:  # noqa: BLE001 - KIP-216 exceptions become gateway errors
        mapped = translate(exc)
        if mapped is None:
            raise GatewayInternalError(f"store {store!r} failed: {type(exc).__name__}: {exc}") from exc
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
