"""RoutedSource: any server answers any query, per store partition from the local copy, the active or a standby.

The rules (KIP-535's ``StoreQueryParameters`` and ksqlDB's HA pull queries,
with Positions doing what an offset-lag threshold only approximates):

- every partition is asked of the local copy first (no network hop);
- ``require_active``: a partition is answered only by its active host — the
  local copy if it is active, else the peer that reports itself active; with
  no reachable active host the answer is NOT_ACTIVE naming who was tried;
- otherwise any copy will do that is up to the statement's Position bound
  (the store checks it in the same snapshot as the data) and, with
  ``max_lag`` set, whose changelog offset lag is at most that; a local copy
  that fails either test is replaced by the peer copies, the ones whose last
  reported Position reaches the bound first, then the least lagging, active
  before standby at equal lag.

Every QueryResult says which server answered (``host``) and whether its copy
is active; the gateway puts both into each PartitionOutcome.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from stores.engine.arrow_reads import ArrowQuery
from stores.engine.base import is_permitted
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, QueryResult, StateQueryResult
from stores.iqv2.state import State

from ..engine.grants import CALLER
from ..engine.partitions import PartitionInfo, local_partitions, partition_row
from ..engine.sources import Capabilities
from ..engine.staleness import MAX_STALENESS
from .codec import CodecError, decode_answer, encode_request
from .membership import Membership

__all__ = ["RoutedSource"]

log = logging.getLogger(__name__)

LOCAL_VIEW_TTL_S = 0.25
_FINAL = (FailureReason.DOES_NOT_EXIST, FailureReason.UNKNOWN_QUERY_TYPE)


class RoutedSource:
    """A source over ``local`` (any source: see ``gateway.engine.sources``) and its peers.

    Its capabilities (``capabilities()``, declared) are the local source's,
    except the point lane (every lookup goes through ``query``: its answers
    name the host that served them, and a partition too far behind goes to a
    peer), its status (with the peers) and ``system.partitions`` (its own
    partitions and every peer's).
    """

    def __init__(self, local: Any, membership: Membership, self_url: str, *, max_lag: int | None = None,
                 forward_timeout_s: float = 10.0, catch_up_wait_ms: int = 0, catch_up_waiters: int = 4) -> None:
        self.local = local
        self.local_caps = Capabilities.of(local)
        self.membership = membership
        self.self_url = self_url.rstrip("/")
        self.max_lag = max_lag
        self.forward_timeout_s = forward_timeout_s
        self.catch_up_wait_s = catch_up_wait_ms / 1000
        self._catch_up_slots = threading.Semaphore(catch_up_waiters)
        self._view: tuple[float, dict[tuple[str, int], PartitionInfo]] = (float("-inf"), {})
        self._view_lock = threading.Lock()
        self.forwarded = 0
        self.discovery: Any = None  # a HeartbeatDiscovery when peers are found through the log (serving sets it)

    def capabilities(self) -> Capabilities:
        """The local source's, without the point lane, with this server's status and ``system.partitions``."""
        caps = self.local_caps
        return replace(caps, point_read=None, status=self.status, partition_rows=self.partition_rows,
                       partition_roles=None, partition_lags=None)

    # -- Source -----------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self.local.state

    def catalog(self) -> Mapping[str, Any]:
        return self.local.catalog()

    def local_view(self) -> dict[tuple[str, int], PartitionInfo]:
        """This server's store partitions (role, Position, lag), recomputed at most every LOCAL_VIEW_TTL_S."""
        at, view = self._view
        if time.monotonic() - at < LOCAL_VIEW_TTL_S:
            return view
        with self._view_lock:
            at, view = self._view
            if time.monotonic() - at >= LOCAL_VIEW_TTL_S:
                view = {(i.store, i.partition): i for i in local_partitions(self.local, self.local_caps)}
                self._view = (time.monotonic(), view)
        return view

    def partition_rows(self) -> list[tuple[Any, ...]]:
        """``system.partitions``: this server's store partitions, then every peer's as its last heartbeat said."""
        view = sorted(self.local_view().values(), key=lambda i: (i.store, i.partition))
        rows = [partition_row(self.self_url, i, True) for i in view]
        for peer in self.membership.peers.values():
            rows += [partition_row(peer.url, i, peer.alive) for _, i in sorted(peer.partitions.items())]
        return rows

    def status(self) -> dict[str, Any]:
        status = self.local_caps.status
        out = dict(status()) if status is not None else {"state": self.state.value, "stores": {},
                                                          "health": {"status": "healthy", "reason": None,
                                                                     "since": None, "retry_s": None}}
        out["host"] = self.self_url
        out["partitions"] = [i.to_json() for _, i in sorted(self.local_view().items())]
        out["peers"] = [p.to_json() for p in self.membership.peers.values()]
        return out

    def close(self) -> None:
        """Close the local source (the peers are the membership's, stopped with routing)."""
        close = getattr(self.local, "close", None)
        if close is not None:
            close()

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        staleness = MAX_STALENESS.get()  # the statement's max_staleness (bounded_staleness), ms
        spec = self.local.catalog().get(request.store_name)
        answer = self.local.query(request)  # an unknown store raises here, as it would without routing
        view = self.local_view()
        results: dict[int, QueryResult] = {}
        pending: list[int] = []
        for p, qr in answer.partition_results.items():
            info = view.get((request.store_name, p))
            role = info.role if info is not None else None
            qr = qr.served_by(self.self_url, role == "active")
            results[p] = qr
            if qr.is_failure and qr.failure_reason in _FINAL:
                continue
            lag_ok = self.max_lag is None or info is None or info.offset_lag <= self.max_lag
            fresh = staleness is None or info is None or info.time_lag_ms <= staleness
            if qr.is_failure or not lag_ok or not fresh:
                pending.append(p)
        if pending and self.membership.peers:
            topics = (frozenset(spec.source_topics) or None) if spec is not None else None
            self._forward(request, pending, results, topics)
        if self.catch_up_wait_s > 0 and not request.active_required:
            self._catch_up(request, results)
        if staleness is not None:
            self._refuse_stale(request.store_name, results, staleness)
        return StateQueryResult.of(results)

    def _refuse_stale(self, store: str, results: dict[int, QueryResult], staleness: int) -> None:
        """A partition no copy within ``staleness`` answered: its stale answer becomes NOT_UP_TO_BOUND saying so."""
        view = self.local_view()
        for p, qr in list(results.items()):
            if qr.is_failure:
                continue
            if qr.host == self.self_url:
                info = view.get((store, p))
            else:
                peer = self.membership.peers.get(qr.host or "")
                info = peer.partitions.get((store, p)) if peer is not None else None
            lag = info.time_lag_ms if info is not None else 0
            if lag > staleness:
                results[p] = QueryResult.for_failure(
                    FailureReason.NOT_UP_TO_BOUND, f"the freshest copy of store {store!r} partition {p} that answered "
                    f"({qr.host}) is {lag} ms behind; the session's max_staleness is {staleness} ms",
                    qr.position).served_by(qr.host, qr.active)

    def _catch_up(self, request: StateQueryRequest, results: dict[int, QueryResult]) -> None:
        """Local partitions behind the bound that no peer could answer: ask again for a moment (a replica trails
        its siblings by milliseconds, so a bound one of them gave a client is met soon). At most
        ``catch_up_waiters`` statements wait at once; the others are answered at once (the gateway's own
        ``wait_ms`` waiting still applies after this)."""
        def behind() -> list[int]:
            return [p for p, qr in results.items()
                    if qr.is_failure and qr.failure_reason is FailureReason.NOT_UP_TO_BOUND and qr.host == self.self_url]

        todo = behind()
        if not todo or not self._catch_up_slots.acquire(blocking=False):
            return
        try:
            deadline = time.monotonic() + self.catch_up_wait_s
            pause = 0.002
            for _ in range(10_000):  # bounded; the clock ends it
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                answer = self.local.query(request.with_partitions(todo))
                for p, qr in answer.partition_results.items():
                    if qr.is_success:
                        info = self.local_view().get((request.store_name, p))
                        results[p] = qr.served_by(self.self_url, info is not None and info.role == "active")
                todo = behind()
                if not todo or time.monotonic() >= deadline:
                    return
        finally:
            self._catch_up_slots.release()

    # -- forwarding -------------------------------------------------------------------------------------
    def _candidates(self, request: StateQueryRequest, p: int, topics: frozenset[str] | None,
                    tried: set[str]) -> list[tuple[Any, PartitionInfo]]:
        bound = request.position_bound
        out = []
        for peer, info in self.membership.hosts_of(request.store_name, p):
            if peer.url in tried or peer.url == self.self_url:
                continue
            if request.active_required and info.role != "active":
                continue
            if self.max_lag is not None and info.offset_lag > self.max_lag and not request.active_required:
                continue
            staleness = MAX_STALENESS.get()
            if staleness is not None and info.time_lag_ms > staleness and info.role != "active":
                continue
            reaches = bound.is_unbounded() or is_permitted(info.position, bound, topics)
            out.append((not reaches, info.offset_lag, info.role != "active", peer.url, peer, info))
        out.sort(key=lambda c: c[:4])
        return [(c[4], c[5]) for c in out]

    def _forward(self, request: StateQueryRequest, pending: Iterable[int], results: dict[int, QueryResult],
                 topics: frozenset[str] | None) -> None:
        left = sorted(pending)
        tried: dict[int, set[str]] = {p: set() for p in left}
        for _ in range(len(self.membership.peers) + 1):  # bounded: each round tries one more peer per partition
            plan: dict[str, tuple[Any, list[int]]] = {}
            for p in left:
                cands = self._candidates(request, p, topics, tried[p])
                if not cands:
                    continue
                peer, _info = cands[0]
                plan.setdefault(peer.url, (peer, []))[1].append(p)
                tried[p].add(peer.url)
            if not plan:
                break
            still: list[int] = []
            for url, (peer, parts) in plan.items():
                got = self._ask(peer, request, parts)
                for p in parts:
                    qr = got.get(p)
                    if qr is None:
                        still.append(p)
                        continue
                    if qr.is_success or _better(qr, results.get(p)):
                        results[p] = qr
                    if qr.is_failure:
                        still.append(p)
            left = still
            if not left:
                return
        if request.active_required:
            for p in left:
                prev = results.get(p)
                if prev is not None and prev.is_failure and prev.failure_reason in (FailureReason.NOT_ACTIVE,
                                                                                    FailureReason.NOT_PRESENT):
                    alive = [u for u, peer in self.membership.peers.items() if peer.alive]
                    results[p] = QueryResult.for_failure(
                        FailureReason.NOT_ACTIVE,
                        f"{prev.failure_message} No active host of store {request.store_name} partition {p} is "
                        f"reachable (this server {self.self_url} has no active copy; peers up: "
                        f"{', '.join(alive) or 'none'}).", prev.position).served_by(prev.host, prev.active)

    def _ask(self, peer: Any, request: StateQueryRequest, parts: list[int]) -> dict[int, QueryResult]:
        if isinstance(request.query, ArrowQuery):  # a local streamed scan: a peer answers the scan itself, as rows
            request = request.with_query(request.query.query)
        payload = encode_request(request.with_partitions(parts))
        caller = CALLER.get()  # the statement's user: the peer answers only what they may read
        try:
            body = self.membership.post(peer.url, "/v1/iq", payload, self.forward_timeout_s,
                                        on_behalf_of=caller.name if caller is not None else None)
            self.forwarded += 1
            out = {}
            for raw in body.get("answers", []):
                p, qr = decode_answer(raw, body.get("host") or peer.url, bool(raw.get("active")))
                out[p] = qr
            return out
        except (OSError, ValueError, CodecError, ConnectionError) as exc:
            log.warning("peer %s did not answer store %s partitions %s: %s", peer.url, request.store_name, parts, exc)
            self.membership.mark_down(peer.url, f"{type(exc).__name__}: {exc}")
            return {}


def _better(new: QueryResult, old: QueryResult | None) -> bool:
    """Of two failures, the one that says more: anything beats NOT_PRESENT (this server lacks the partition)."""
    return old is None or (old.is_failure and old.failure_reason is FailureReason.NOT_PRESENT)


