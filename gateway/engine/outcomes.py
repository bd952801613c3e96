"""Per-partition outcomes: what a statement tells the caller about every store partition it read.

Strict mode turns the failed partitions into one error that names each
partition, its reason and whether a retry can help; the status follows the
reasons (503 when waiting may help, 404 for partitions that do not exist).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stores.iqv2.position import Position
from stores.iqv2.result import FailureReason, StateQueryResult

from .errors import NotUpToBoundError, PartitionFailureError

__all__ = ["PartitionOutcome", "partition_error", "is_behind", "record_outcomes", "retryable"]


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One store partition a statement read: failed (reason, message) or not, and its position."""

    store: str
    partition: int
    failure_reason: str | None
    failure_message: str | None
    position: Position | None
    #: the server that answered (set when queries are routed between servers, issue 17) and whether it is active
    host: str | None = None
    active: bool | None = None

    @property
    def is_failure(self) -> bool:
        return self.failure_reason is not None

    def to_json(self) -> dict[str, Any]:
        out = {
            "store": self.store,
            "partition": self.partition,
            "failure_reason": self.failure_reason,
            "failure_message": self.failure_message,
            "position": None if self.position is None else self.position.to_json_map(),
        }
        if self.host is not None:
            out["host"] = self.host
            out["active"] = self.active
        return out

# A store file whose tables do not match the store's spec: no retry can fix it (issue 20 item 6).
_PERMANENT = re.compile(r"no such (column|table)|has no column named|table \S+ has \d+ columns but")


def retryable(f: Any) -> bool:
    """May a retry help this partition failure? A STORE_EXCEPTION of a schema mismatch never does."""
    if f.reason is FailureReason.STORE_EXCEPTION and _PERMANENT.search(f.message or ""):
        return False
    return bool(f.reason.retryable)


def partition_error(failures: list[Any], note: str = "") -> PartitionFailureError:
    """One error naming every failed partition, its reason and whether a retry can help (and ``note``: why
    the statement did not wait for its bound, when it did not)."""
    parts = [{"store": f.store, "partition": f.partition, "failure_reason": f.reason.label,
              "failure_message": f.message, "retryable": retryable(f)} for f in failures]
    text = "; ".join(
        f"store {f.store!r} partition {f.partition}: {f.reason.label} "
        f"({'retryable' if retryable(f) else 'not retryable'}): {f.message}" for f in failures)
    reasons = {f.reason for f in failures}
    message = f"{len(failures)} store partition(s) the query needs failed: {text}"
    if note:
        message = f"{note}. {message}"
    if reasons == {FailureReason.NOT_UP_TO_BOUND}:
        return NotUpToBoundError(message, partitions=parts)
    if any(retryable(f) for f in failures):
        return PartitionFailureError(message, partitions=parts, retryable=True, http_status=503)
    if reasons == {FailureReason.DOES_NOT_EXIST}:
        return PartitionFailureError(message, partitions=parts, http_status=404)
    if FailureReason.UNKNOWN_QUERY_TYPE in reasons:
        return PartitionFailureError(message, partitions=parts, http_status=400)
    return PartitionFailureError(message, partitions=parts)


def is_behind(answer: StateQueryResult) -> bool:
    return any(qr.is_failure and qr.failure_reason is FailureReason.NOT_UP_TO_BOUND
               for qr in answer.partition_results.values())


def record_outcomes(outcomes: dict[tuple[str, int], PartitionOutcome], store: str, answer: StateQueryResult) -> None:
    for p, qr in answer.partition_results.items():
        prev = outcomes.get((store, p))
        pos = qr.position if prev is None or prev.position is None else prev.position.merge(qr.position)
        host, active = qr.host, qr.active
        if qr.is_failure:
            outcomes[(store, p)] = PartitionOutcome(store, p, qr.failure_reason.label, qr.failure_message, pos,
                                                    host, active)
        elif prev is not None and prev.is_failure:
            outcomes[(store, p)] = PartitionOutcome(store, p, prev.failure_reason, prev.failure_message, pos,
                                                    prev.host, prev.active)
        else:
            outcomes[(store, p)] = PartitionOutcome(store, p, None, None, pos, host, active)
