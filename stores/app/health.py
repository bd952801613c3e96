"""Per-store ingest status beside the KIP-696 client state: paused by a fault, rebuilding, failed.

The client state machine stays exactly as KIP-696 has it (ERROR is
terminal), so what it cannot say lives here (docs/DESIGN.md §8, issue 21):

- ``running``    the store's query is up and applying batches;
- ``starting``   the query is starting or catching up with the source;
- ``paused``     ingest is paused by a fault that may clear by itself (disk
                 full, I/O error, read-only file system, source unreachable);
                 reads keep answering at the last Position and the runtime
                 retries every ``retry_s``;
- ``rebuilding`` the store's files were lost or damaged and it is replayed
                 from the source; its partitions answer NOT_UP_TO_BOUND;
- ``failed``     the store's query failed in a way retrying cannot fix; the
                 store keeps answering at its last Position, the other stores
                 are not affected.

The overall health is ``healthy`` only when the client is RUNNING and every
store is ``running``; ``degraded`` names the first reason; ``starting`` and
``stopped`` follow the client state. The snapshot is what ``/v1/health``,
``/v1/stores``, ``/metrics`` and the ``system`` tables show, and it is written
to ``app.json`` so read-only gateways in other processes show it too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..iqv2.result import FailureReason, QueryResult, StateQueryResult
from ..iqv2.state import State

__all__ = ["StoreStatus", "HealthTracker", "overall", "annotate_bound_failures", "restoring", "STORE_STATUSES"]

STORE_STATUSES = ("starting", "running", "paused", "rebuilding", "failed")
_TROUBLE = ("paused", "rebuilding", "failed")


@dataclass(frozen=True)
class StoreStatus:
    status: str = "starting"
    reason: str | None = None
    since: float = 0.0  # epoch seconds of the last status change
    retry_s: float | None = None
    batches: int = 0
    last_batch_at: float | None = None
    progress: Mapping[str, Any] | None = None  # catch-up or rebuild progress: reached, target, records/s, eta

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "since": _iso(self.since),
                "retry_s": self.retry_s, "batches": self.batches, "last_batch_at": _iso(self.last_batch_at),
                "progress": dict(self.progress) if self.progress else None}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> StoreStatus:
        return StoreStatus(status=str(raw.get("status", "starting")), reason=raw.get("reason"),
                           since=_epoch(raw.get("since")) or 0.0, retry_s=raw.get("retry_s"),
                           batches=int(raw.get("batches") or 0), last_batch_at=_epoch(raw.get("last_batch_at")),
                           progress=raw.get("progress"))

    def note(self) -> str | None:
        """What a bounded query on this store should be told, or None when nothing is wrong."""
        if self.status == "paused":
            return (f"ingest of this store is paused: {self.reason} (since {_iso(self.since)}, retrying every "
                    f"{self.retry_s:g} s); it answers at its last position until the fault clears")
        if self.status == "rebuilding":
            return f"this store is being rebuilt from its source ({self.reason})"
        if self.status == "failed":
            return (f"this store failed and no longer advances: {self.reason} (since {_iso(self.since)}); "
                    "it answers at its last position")
        return None


PROGRESS_PUBLISH_S = 1.0


class HealthTracker:
    """Thread-safe per-store statuses; ``on_change`` (and every ``add_listener``) is called (outside the lock) after
    each change."""

    def __init__(self, stores: Iterable[str], on_change: Callable[[], None] | None = None) -> None:
        now = time.time()
        self._lock = threading.Lock()
        self._stores: dict[str, StoreStatus] = {s: StoreStatus(since=now) for s in stores}
        self._listeners: list[Callable[[], None]] = [on_change] if on_change is not None else []
        self._progress_published = float("-inf")
        self._applied_total = 0  # batches applied over every store: what waiters for a Position bound wait on
        self._applied_cv = threading.Condition(threading.Lock())  # not ``_lock``: a waiter never holds up a status

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Also call ``listener`` (outside the lock) after each change (a supervisor publishing the status)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def get(self, store: str) -> StoreStatus:
        return self._stores.get(store) or StoreStatus()

    def set(self, store: str, status: str, reason: str | None = None, *, retry_s: float | None = None,
            progress: Mapping[str, Any] | None = None) -> None:
        if status not in STORE_STATUSES:
            raise ValueError(f"unknown store status {status!r}")
        with self._lock:
            old = self._stores.get(store) or StoreStatus()
            if (old.status, old.reason, old.retry_s) == (status, reason, retry_s) and progress is None:
                return
            changed = (old.status, old.reason) != (status, reason)
            self._stores[store] = replace(old, status=status, reason=reason, retry_s=retry_s,
                                          since=time.time() if changed else old.since,
                                          progress=progress if progress is not None else
                                          (old.progress if status == old.status else None))
        if changed:
            self._changed()

    def applied(self, store: str) -> None:
        """A batch was applied: count it (no notification: too frequent for app.json), and wake ``wait_applied``."""
        with self._lock:
            old = self._stores.get(store) or StoreStatus()
            self._stores[store] = replace(old, batches=old.batches + 1, last_batch_at=time.time())
        with self._applied_cv:
            self._applied_total += 1
            self._applied_cv.notify_all()

    def applied_batches(self) -> int:
        """Batches applied so far over every store (read it before reading a store, then ``wait_applied``)."""
        with self._applied_cv:
            return self._applied_total

    def wait_applied(self, seen: int, timeout_s: float) -> int:
        """Block until more than ``seen`` batches are applied, or ``timeout_s``; the count then.

        Why: a statement waiting for a Position bound polled the stores with a backoff up to 50 ms, so it saw
        a batch on average ~25 ms after its commit (issue 50: the waiter's wake-up in append → visible). Woken
        here it reads again at once. Any store's batch wakes it: a read of a partition costs microseconds.
        """
        with self._applied_cv:
            if self._applied_total == seen and timeout_s > 0:
                self._applied_cv.wait(timeout_s)
            return self._applied_total

    def progress(self, store: str, progress: Mapping[str, Any]) -> None:
        """A catch-up or rebuild progress report; ``on_change`` at most every PROGRESS_PUBLISH_S for these.

        Why published at all: read-only gateways (``serve --workers``) learn progress
        and a rebuild's upcoming columns only from ``app.json``.
        """
        now = time.monotonic()
        with self._lock:
            old = self._stores.get(store)
            if old is None:
                return
            self._stores[store] = replace(old, progress=dict(progress))
            # a new kind of report (a rebuild began, its first figures) at once, the figures' updates throttled
            publish = set(progress) != set(old.progress or ()) or now - self._progress_published >= PROGRESS_PUBLISH_S
            if publish:
                self._progress_published = now
        if publish:
            self._changed()

    def snapshot(self) -> dict[str, StoreStatus]:
        with self._lock:
            return dict(self._stores)

    def forget(self, store: str) -> None:
        with self._lock:
            self._stores.pop(store, None)


def overall(state: State, stores: Mapping[str, StoreStatus], state_since: float | None = None) -> dict[str, Any]:
    """``{"status": healthy|degraded|starting|stopped, "reason", "since", "retry_s"}`` of a client and its stores."""
    if state in (State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.PENDING_ERROR, State.ERROR):
        return {"status": "stopped", "reason": f"the client is {state.value}", "since": _iso(state_since),
                "retry_s": None}
    trouble = sorted(((n, s) for n, s in stores.items() if s.status in _TROUBLE), key=lambda x: x[1].since)
    if trouble:
        name, s = trouble[0]
        what = {"paused": "ingest paused", "rebuilding": "rebuilding", "failed": "store failed"}[s.status]
        more = f" (and {len(trouble) - 1} more store(s))" if len(trouble) > 1 else ""
        retry = min((t.retry_s for _, t in trouble if t.retry_s), default=None)
        return {"status": "degraded", "reason": f"{what}: store {name}: {s.reason}{more}", "since": _iso(s.since),
                "retry_s": retry}
    if state is not State.RUNNING:
        reason = f"the client is {state.value}"
        # only reports with figures: a rebuild's first report names its upcoming columns before it has any
        progress = [s.progress for s in stores.values()
                    if s.progress and "target" in s.progress and s.status in ("starting", "rebuilding")]
        if progress:
            got, want = sum(p["reached"] for p in progress), sum(p["target"] for p in progress)
            etas = [p["eta_s"] for p in progress if p.get("eta_s") is not None]
            reason += f"; catching up: {got} of {want} records" + (f", ETA {max(etas):.0f} s" if etas else "")
        return {"status": "starting", "reason": reason, "since": _iso(state_since), "retry_s": None}
    return {"status": "healthy", "reason": None, "since": _iso(state_since), "retry_s": None}


def annotate_bound_failures(result: StateQueryResult, note: str | None) -> StateQueryResult:
    """Add why a store is behind to its NOT_UP_TO_BOUND failures (the reason reaches the user)."""
    if note is None or not any(qr.is_failure and qr.failure_reason is FailureReason.NOT_UP_TO_BOUND
                               for qr in result.partition_results.values()):
        return result
    out: dict[int, QueryResult] = {}
    for p, qr in result.partition_results.items():
        if qr.is_failure and qr.failure_reason is FailureReason.NOT_UP_TO_BOUND:
            qr = replace(qr, _failure_message=f"{qr.failure_message}; {note}")
        out[p] = qr
    return StateQueryResult.of(out, result.global_result)


def restoring(result: StateQueryResult, store: str, lost: Mapping[int, str],
              requested: Iterable[int] | None) -> StateQueryResult:
    """Lost partitions answer NOT_ACTIVE ("being restored"), never an empty success nor silence (issue 13 item 5).

    ``requested`` None (every partition): the lost ones are added, so a scan cannot quietly miss their rows.
    """
    results = dict(result.partition_results)
    if requested is None:
        for p in lost:
            results.setdefault(p, QueryResult.for_failure(FailureReason.NOT_ACTIVE, ""))
    out: dict[int, QueryResult] = {}
    for p, qr in results.items():
        if p in lost and not (qr.is_failure and qr.failure_reason is FailureReason.DOES_NOT_EXIST):
            qr = QueryResult.for_failure(
                FailureReason.NOT_ACTIVE,
                f"Partition {p} of store {store} is being restored from its source ({lost[p]}); it answers again "
                "once the rebuilt store has caught up with the position it had.")
        out[p] = qr
    return StateQueryResult.of(out, result.global_result)


def _iso(t: float | None) -> str | None:
    if t is None or t <= 0:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or len(text) < 20:
        return None
    import calendar

    try:
        base = calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
        return base + int(text[20:23]) / 1000.0
    except ValueError:
        return None
