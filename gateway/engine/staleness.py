"""Bounded staleness: an answer from any copy at most ``max_staleness`` behind, by the time lag copies report.

``SET consistency = 'bounded_staleness'`` with ``SET max_staleness = '2s'``
lets a statement read a replica's copy (KIP-535's standby) instead of the
active one, as long as the copy's time lag (``PartitionLag.time_lag_ms``: 0
when caught up, else how long it has been behind) is within the bound. A
routed source (``gateway.routing``) reads ``MAX_STALENESS`` for the
statement its thread runs, skips copies too far behind and asks a fresher
one; a source that is a replica on its own (no peers) has no other copy, so
its partitions too far behind answer ``NOT_UP_TO_BOUND`` saying how far
(``mark_stale``). The active copy and a pipeline's own stores are never
behind; a read-only server reports no lag.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

from stores.iqv2.result import FailureReason, QueryResult, StateQueryResult

from .scans import Answers

__all__ = ["MAX_STALENESS", "mark_stale"]

#: the running statement's max_staleness in milliseconds (None: any copy up to its bound will do)
MAX_STALENESS: contextvars.ContextVar[int | None] = contextvars.ContextVar("iqgate_max_staleness", default=None)


def mark_stale(answered: Sequence[Answers], stores: Sequence[str], lags: dict[tuple[str, int], int], max_ms: int,
               close: Callable[[QueryResult], None]) -> None:
    """Answers of partitions whose copy is more than ``max_ms`` behind (``lags``: time lag per store partition)
    become NOT_UP_TO_BOUND failures (retryable: the copy catches up), in place."""
    for i, answers in enumerate(answered):
        for j, (request, result) in enumerate(answers):
            stale = {p: lags[(stores[i], p)] for p, qr in result.partition_results.items()
                     if not qr.is_failure and lags.get((stores[i], p), 0) > max_ms}
            if not stale:
                continue
            merged: dict[int, Any] = dict(result.partition_results)
            for p, lag in stale.items():
                old = merged[p]
                close(old)
                merged[p] = QueryResult.for_failure(
                    FailureReason.NOT_UP_TO_BOUND, f"this copy of store {stores[i]!r} partition {p} is {lag} ms "
                    f"behind; the session's max_staleness is {max_ms} ms", old.position)
            answers[j] = (request, StateQueryResult.of(merged, result.global_result))
