"""Membership by a heartbeat topic (issue 17): servers find each other through the log they already share.

Each server appends ``{"url", "at"}`` to ``<application_id>-iqgate-heartbeats`` (one partition, on the
embedded event log or Kafka) every ``interval_s`` and reads everyone else's; a URL heard from within
``ttl_s`` is a peer. What a peer hosts, and how fresh, still comes from its ``GET /v1/partitions`` (the
Membership's poll), so both ways of finding peers route the same. ``--peers`` and the topic combine.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from stores.iqv2.timeutil import now_ms

from .membership import Membership, Peer

__all__ = ["HeartbeatDiscovery", "heartbeat_topic"]

log = logging.getLogger(__name__)

READ_BACK = 500


def heartbeat_topic(application_id: str) -> str:
    return f"{application_id}-iqgate-heartbeats"


class HeartbeatDiscovery:
    """Publishes this server's URL and adds the URLs others publish to ``membership``."""

    def __init__(self, source: Any, application_id: str, membership: Membership, self_url: str, *,
                 interval_s: float = 1.0, ttl_s: float = 5.0) -> None:
        self.source = source  # a SourceLog: EventLog or KafkaSource
        self.topic = heartbeat_topic(application_id)
        self.membership = membership
        self.self_url = self_url.rstrip("/")
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.heard: dict[str, int] = {}
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HeartbeatDiscovery:
        self.source.create_topic(self.topic, partitions=1, exist_ok=True)
        # the last few hundred heartbeats: whoever beat within the TTL is found at once (older ones are ignored)
        self._next = max(0, self.source.end_offsets(self.topic).get(0, 0) - READ_BACK)
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="iqgate-heartbeats", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - the log away for a while: keep the peers we know
                log.warning("heartbeats on %s: %s", self.topic, exc)

    def beat(self) -> None:
        """Publish ours, read the others', refresh the peer list."""
        self.source.append_batch(self.topic, [(self.self_url, {"url": self.self_url, "at": now_ms()}, None)])
        end = self.source.end_offsets(self.topic).get(0, 0)
        if end > self._next:
            for rec in self.source.read(self.topic, 0, self._next, end):
                url = (rec.value or {}).get("url")
                if isinstance(url, str) and url.startswith(("http://", "https://")):
                    self.heard[url.rstrip("/")] = rec.timestamp
            self._next = end
        cutoff = now_ms() - int(self.ttl_s * 1000)
        for url, at in self.heard.items():
            if url != self.self_url and at >= cutoff and url not in self.membership.peers:
                self.membership.peers[url] = Peer(url)
                log.info("heartbeats: found peer %s", url)
        self.membership.start()

    def recent(self) -> list[str]:
        cutoff = now_ms() - int(self.ttl_s * 1000)
        return sorted(u for u, at in self.heard.items() if at >= cutoff)
