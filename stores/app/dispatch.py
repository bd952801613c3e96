"""The per-partition fan-out of a StateQueryRequest (Kafka's ``KafkaStreams.query`` loop, reference §2).

Shared by ``StreamsApp`` and ``StateDirReader`` so both answer alike; the
caller has already done the store-name and client-state checks. Every
requested partition gets a result, so nothing is silently dropped:

- a partition number outside the store's range -> DOES_NOT_EXIST (Kafka never emits it);
- in range but not local -> NOT_PRESENT;
- ``require_active`` on a standby copy or a client that is not RUNNING -> NOT_ACTIVE;
- otherwise the partition store answers (bound check, handler, STORE_EXCEPTION).

Deliberate difference: Kafka drops the position bound when ``require_active``
is set; we keep it, so a request never gets data older than it asked for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..catalog.schema import StoreSpec
from ..engine.base import PartitionStore
from ..iqv2.request import StateQueryRequest
from ..iqv2.result import FailureReason, QueryResult, StateQueryResult

__all__ = ["run_request", "NOT_PRESENT_MESSAGE"]

NOT_PRESENT_MESSAGE = "The requested partition was not present at the time of the query."


def run_request(
    request: StateQueryRequest,
    spec: StoreSpec,
    local: Mapping[int, PartitionStore],
    active: Collection[int],
    running: bool,
    state_label: str,
) -> StateQueryResult:
    """Answer ``request`` from the ``local`` partition stores; ``active`` are the non-standby ones."""
    if request.partitions is None:
        wanted = sorted(local)
    else:
        wanted = sorted(request.partitions)
    results: dict[int, QueryResult] = {}
    query = request.query
    bound = request.position_bound
    info = request.execution_info_enabled
    snapshot = request.snapshot
    for p in wanted:
        store = local.get(p)
        if store is None:
            if p >= spec.partitions:
                results[p] = QueryResult.for_failure(
                    FailureReason.DOES_NOT_EXIST,
                    f"Store {spec.name} has {spec.partitions} partition(s) (0 through {spec.partitions - 1});"
                    f" partition {p} does not exist.",
                )
            else:
                results[p] = QueryResult.for_failure(FailureReason.NOT_PRESENT, NOT_PRESENT_MESSAGE)
            continue
        if request.active_required and (not running or p not in active):
            results[p] = QueryResult.for_failure(
                FailureReason.NOT_ACTIVE,
                f"Query requires a running active task, but partition was in state {state_label} and was"
                f" {'active' if p in active else 'not active'}.",
            )
            continue
        results[p] = store.query(query, bound, execution_info=info, snapshot=snapshot)
    return StateQueryResult.of(results)
