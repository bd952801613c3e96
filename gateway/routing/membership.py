"""Who hosts which store partition, how fresh: this server's own view, and its peers' (heartbeats over HTTP).

Membership is configured (``--peers URL,URL``): each server polls every peer's
``GET /v1/partitions`` every ``interval_s`` (ksqlDB's heartbeats, KLIP-12) and
keeps what it said: per store partition the role (``active`` on the pipeline
host while it runs, ``standby`` on a replica, ``copy`` for files whose writer
is gone), the Position, and the KIP-535 lags (changelog offset lag and time
lag). A peer that does not answer within ``timeout_s`` is down until it
answers again; routing never sends it a query meanwhile.

Peers authenticate to each other with this server's own credential
(``token``: the server's ``--token``, or with a users file the token of a
peer user), and a forwarded statement names its user in ``ON_BEHALF_OF``:
the peer answers only what both the credential and that user may read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..engine.partitions import PartitionInfo

__all__ = ["Peer", "Membership", "ON_BEHALF_OF"]

ON_BEHALF_OF = "X-IQ-On-Behalf-Of"  # the user a forwarded request is for (the peer checks their grants too)

log = logging.getLogger(__name__)


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
    def _headers(self, on_behalf_of: str | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if on_behalf_of:
            h[ON_BEHALF_OF] = on_behalf_of
        return h

    def get(self, url: str, path: str) -> dict[str, Any]:
        req = urllib.request.Request(url + path, headers=self._headers(), method="GET")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read())

    def post(self, url: str, path: str, payload: Any, timeout_s: float,
             on_behalf_of: str | None = None) -> dict[str, Any]:
        req = urllib.request.Request(url + path, data=json.dumps(payload).encode(),
                                     headers=self._headers(on_behalf_of), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raise ConnectionError(f"peer {url} answered {err.code}: {err.read()[:300]!r}") from None
