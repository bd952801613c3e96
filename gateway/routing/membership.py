"""Who hosts which store partition, how fresh: this server's own view, and its peers' (heartbeats over HTTP).

Membership is configured (``--peers URL,URL``): each server polls every peer's
``GET /v1/partitions`` every ``interval_s`` (ksqlDB's heartbeats, KLIP-12) and
keeps what it said: per store partition the role (``active`` on the pipeline
host while it runs, ``standby`` on a replica, ``copy`` for files whose writer
is gone), the Position, and the KIP-535 lags (changelog offset lag and time
lag). A peer that does not answer within ``timeout_s`` is down until it
answers again; routing never sends it a query meanwhile.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stores.iqv2.position import Position
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.state import State

from ..scans import probe_query

__all__ = ["PartitionInfo", "Peer", "Membership", "local_partitions", "local_roles", "partition_rows"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionInfo:
    store: str
    partition: int
    role: str                      # active | standby | copy
    position: Position
    offset_lag: int = 0
    time_lag_ms: int = 0
    current_offset: int | None = None
    end_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "partition": self.partition, "role": self.role,
                "position": self.position.to_json_map(), "offset_lag": self.offset_lag,
                "time_lag_ms": self.time_lag_ms, "current_offset": self.current_offset,
                "end_offset": self.end_offset}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PartitionInfo:
        return cls(str(raw["store"]), int(raw["partition"]), str(raw["role"]), Position.from_map(raw["position"]),
                   int(raw.get("offset_lag") or 0), int(raw.get("time_lag_ms") or 0), raw.get("current_offset"),
                   raw.get("end_offset"))


def local_roles(source: Any) -> dict[str, dict[int, str]]:
    """Per store and partition this process has, its role: ``active``, ``standby`` or ``copy``."""
    app = getattr(source, "app", None) if not hasattr(source, "hosting") else source
    if app is not None and hasattr(app, "hosting"):
        hosted, standby = app.hosting()
        running = app.state in (State.RUNNING, State.REBALANCING)
        out: dict[str, dict[int, str]] = {}
        for name in app.catalog():
            roles = {p: ("active" if running else "copy") for p in hosted.get(name, ())}
            roles.update({p: "standby" for p in standby.get(name, ())})
            out[name] = roles
        return out
    info_of = getattr(source, "app_info", None) or getattr(getattr(source, "_reader", None), "app_info", None)
    info = info_of() if info_of is not None else None
    out = {}
    for name, spec in source.catalog().items():
        roles = {}
        for p in range(spec.partitions):
            if info is not None and p in info.standby.get(name, ()):
                roles[p] = "standby"
            elif info is not None and info.alive and info.state in (State.RUNNING, State.REBALANCING) \
                    and p in info.hosted.get(name, ()):
                roles[p] = "active"
            else:
                roles[p] = "copy"
        out[name] = roles
    return out


def local_partitions(source: Any) -> list[PartitionInfo]:
    """What this process serves: role, Position and lag of every store partition it has."""
    lags = getattr(source, "partition_lags", None)
    if lags is not None:
        return [PartitionInfo(lag.store, lag.partition, lag.role, lag.position, lag.offset_lag, lag.time_lag_ms,
                              lag.current_offset, lag.end_offset) for lag in lags()]
    out = []
    roles = local_roles(source)
    for name, spec in sorted(source.catalog().items()):
        try:
            answer = source.query(StateQueryRequest.in_store(name).with_query(probe_query(spec)))
        except Exception:  # noqa: BLE001 - a store that cannot answer has no Position to report
            continue
        for p, qr in answer.partition_results.items():
            if qr.is_failure and qr.position is None:
                continue
            out.append(PartitionInfo(name, p, roles.get(name, {}).get(p, "copy"), qr.position or Position.empty()))
    return out


def partition_rows(source: Any) -> list[tuple[Any, ...]]:
    """``system.partitions``: this server's store partitions, then every peer's as its last heartbeat said."""
    self_url = getattr(source, "self_url", None)
    local = getattr(source, "local", source)
    view = source.local_view().values() if hasattr(source, "local_view") else local_partitions(local)
    rows = [_row(self_url, i, True) for i in sorted(view, key=lambda i: (i.store, i.partition))]
    membership = getattr(source, "membership", None)
    for peer in (membership.peers.values() if membership is not None else ()):
        rows += [_row(peer.url, i, peer.alive) for _, i in sorted(peer.partitions.items())]
    return rows


def _row(host: str | None, i: PartitionInfo, alive: bool) -> tuple[Any, ...]:
    return (host, i.store, i.partition, i.role, i.position.to_json(), i.offset_lag, i.time_lag_ms,
            i.current_offset, i.end_offset, alive)


@dataclass
class Peer:
    url: str
    alive: bool = False
    last_seen: float | None = None
    error: str | None = None
    state: str | None = None
    partitions: dict[tuple[str, int], PartitionInfo] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "alive": self.alive, "state": self.state, "error": self.error,
                "last_seen_ms_ago": None if self.last_seen is None else int((time.monotonic() - self.last_seen) * 1000)}


class Membership:
    """This server's peers and what each last said it hosts; refreshed by a heartbeat thread."""

    def __init__(self, peers: Iterable[str], *, interval_s: float = 0.5, timeout_s: float = 1.0,
                 token: str | None = None) -> None:
        self.peers = {u.rstrip("/"): Peer(u.rstrip("/")) for u in peers if u.strip()}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.token = token
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Membership:
        if self.peers and self._thread is None:
            self.refresh()
            self._thread = threading.Thread(target=self._loop, name="iqgate-membership", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.timeout_s + self.interval_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def refresh(self) -> None:
        threads = [threading.Thread(target=self._poll, args=(peer,), daemon=True) for peer in list(self.peers.values())]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout_s + 1.0)

    def _poll(self, peer: Peer) -> None:
        try:
            body = self.get(peer.url, "/v1/partitions")
            parts = {}
            for raw in body.get("partitions", []):
                info = PartitionInfo.from_json(raw)
                parts[(info.store, info.partition)] = info
            peer.partitions, peer.state, peer.error = parts, body.get("state"), None
            peer.alive, peer.last_seen = True, time.monotonic()
        except Exception as exc:  # noqa: BLE001 - a peer down is data, not an error
            if peer.alive:
                log.warning("peer %s is down: %s", peer.url, exc)
            peer.alive, peer.error = False, f"{type(exc).__name__}: {exc}"

    def mark_down(self, url: str, why: str) -> None:
        peer = self.peers.get(url)
        if peer is not None:
            peer.alive, peer.error = False, why

    def hosts_of(self, store: str, partition: int) -> list[tuple[Peer, PartitionInfo]]:
        out = []
        for peer in list(self.peers.values()):  # heartbeats may add peers meanwhile
            info = peer.partitions.get((store, partition))
            if peer.alive and info is not None:
                out.append((peer, info))
        return out

    # -- HTTP ---------------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def get(self, url: str, path: str) -> dict[str, Any]:
        req = urllib.request.Request(url + path, headers=self._headers(), method="GET")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read())

    def post(self, url: str, path: str, payload: Any, timeout_s: float) -> dict[str, Any]:
        req = urllib.request.Request(url + path, data=json.dumps(payload).encode(), headers=self._headers(),
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raise ConnectionError(f"peer {url} answered {err.code}: {err.read()[:300]!r}") from None
