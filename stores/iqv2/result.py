"""Per-partition results (QueryResult), whole results (StateQueryResult) and FailureReason."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .position import Position, PositionBound

__all__ = ["FailureReason", "QueryResult", "StateQueryResult"]


class FailureReason(enum.Enum):
    """Why one partition could not answer (KIP-796). ``retryable``: may a retry (here or elsewhere) help."""

    UNKNOWN_QUERY_TYPE = ("UNKNOWN_QUERY_TYPE", False)
    NOT_ACTIVE = ("NOT_ACTIVE", True)
    NOT_UP_TO_BOUND = ("NOT_UP_TO_BOUND", True)
    NOT_PRESENT = ("NOT_PRESENT", True)
    DOES_NOT_EXIST = ("DOES_NOT_EXIST", False)
    STORE_EXCEPTION = ("STORE_EXCEPTION", True)
    #: iqgate's own (beyond KIP-796): a partition past a request's snapshot keeps no state at exactly it
    #: (stores/engine/asof.py); retryable, as another copy, or a read at a newer snapshot, may answer
    POSITION_NOT_KEPT = ("POSITION_NOT_KEPT", True)

    def __init__(self, label: str, retryable: bool) -> None:
        self.label = label
        self.retryable = retryable

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, slots=True)
class QueryResult:
    """One partition's answer: a result (possibly ``None``) or a failure, plus position and execution info."""

    _result: Any = None
    _failure_reason: FailureReason | None = None
    _failure_message: str | None = None
    position: Position | None = None
    execution_info: tuple[str, ...] = field(default=())
    #: which server answered (routing between replicas, issue 17; None: this process) and whether its copy is active
    host: str | None = None
    active: bool | None = None

    # -- constructors ---------------------------------------------------
    @classmethod
    def for_result(cls, result: Any, position: Position | None = None) -> QueryResult:
        return cls(result, None, None, position)

    @classmethod
    def for_failure(cls, reason: FailureReason, message: str, position: Position | None = None) -> QueryResult:
        if not isinstance(reason, FailureReason):
            raise TypeError(f"reason must be a FailureReason, got {reason!r}")
        return cls(None, reason, message, position)

    @classmethod
    def for_unknown_query_type(cls, query: Any, store: Any) -> QueryResult:
        store_name = store if isinstance(store, str) else type(store).__name__
        return cls.for_failure(
            FailureReason.UNKNOWN_QUERY_TYPE,
            f"This store ({store_name}) doesn't know how to execute the given query ({query!r})."
            " Contact the store maintainer if you need support for a new query type.",
        )

    @classmethod
    def not_up_to_bound(cls, position: Position | None, bound: PositionBound, partition: int | None) -> QueryResult:
        if partition is None:
            msg = f"The store is not initialized yet, so it is not yet up to the bound {bound}"
        else:
            msg = (
                f"For store partition {partition}, the current position {position} "
                f"is not yet up to the bound {bound}"
            )
        return cls.for_failure(FailureReason.NOT_UP_TO_BOUND, msg, position)

    # -- copies -----------------------------------------------------------
    def with_position(self, position: Position | None) -> QueryResult:
        return replace(self, position=position)

    def with_execution_info(self, *lines: str) -> QueryResult:
        return replace(self, execution_info=self.execution_info + lines)

    def served_by(self, host: str | None, active: bool | None) -> QueryResult:
        """The same answer, saying which server answered and whether its copy of the partition is active."""
        return replace(self, host=host, active=active)

    def swap_result(self, new_result: Any) -> QueryResult:
        if self.is_failure:
            raise ValueError(f"Callers must avoid calling this method on a failed result: {self}")
        return replace(self, _result=new_result)

    # -- accessors --------------------------------------------------------
    @property
    def is_success(self) -> bool:
        return self._failure_reason is None

    @property
    def is_failure(self) -> bool:
        return self._failure_reason is not None

    @property
    def result(self) -> Any:
        if self._failure_reason is not None:
            raise ValueError(
                f"Cannot get result for failed query. Failure is {self._failure_reason}: {self._failure_message}"
            )
        return self._result

    @property
    def failure_reason(self) -> FailureReason:
        if self._failure_reason is None:
            raise ValueError(f"Cannot get failure reason for a successful query. Result is: {self._result!r}")
        return self._failure_reason

    @property
    def failure_message(self) -> str:
        if self._failure_reason is None:
            raise ValueError(f"Cannot get failure message for a successful query. Result is: {self._result!r}")
        return self._failure_message or ""

    def __repr__(self) -> str:
        if self.is_failure:
            return (
                f"QueryResult{{failure={self._failure_reason}, message={self._failure_message!r}, "
                f"position={self.position}}}"
            )
        return f"QueryResult{{result={self._result!r}, position={self.position}}}"


@dataclass(frozen=True, slots=True)
class StateQueryResult:
    """All partitions' answers to one StateQueryRequest. Failures are data and never dropped."""

    partition_results: Mapping[int, QueryResult] = field(default_factory=lambda: MappingProxyType({}))
    global_result: QueryResult | None = None

    @classmethod
    def of(cls, results: Mapping[int, QueryResult], global_result: QueryResult | None = None) -> StateQueryResult:
        items = dict(results) if len(results) < 2 else dict(sorted(results.items()))  # one partition: no sort
        return cls(MappingProxyType(items), global_result)

    @property
    def position(self) -> Position:
        """The merged position: per (topic, partition) the max over every partition's position."""
        if self.global_result is not None:
            return self.global_result.position or Position.empty()
        merged = Position.empty()
        for r in self.partition_results.values():
            merged = merged.merge(r.position)
        return merged

    def only_partition_result(self) -> QueryResult | None:
        """The one partition that answered something: a non-null result or a failure.

        Unlike Kafka before KAFKA-15768, a failure counts, so it is never hidden:
        one failure plus one value is two answers and raises.
        """
        picked = [r for r in self.partition_results.values() if r.is_failure or r._result is not None]
        if len(picked) > 1:
            raise ValueError(
                "The query did not return exactly one partition result: "
                + ", ".join(f"{p}={r!r}" for p, r in self.partition_results.items()
                            if r.is_failure or r._result is not None)
            )
        return picked[0] if picked else None

    @property
    def failures(self) -> dict[int, QueryResult]:
        return {p: r for p, r in self.partition_results.items() if r.is_failure}

    def __repr__(self) -> str:
        parts = ", ".join(f"{p}={r!r}" for p, r in self.partition_results.items())
        return f"StateQueryResult{{partitions={{{parts}}}, position={self.position}}}"
