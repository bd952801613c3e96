"""Routing between servers (issue 17) set up from typed options: the routed source, its heartbeats, discovery."""

from __future__ import annotations

import sys
from typing import Any

from ..routing import RoutedSource
from ..routing.membership import Membership
from .options import RoutingOptions

__all__ = ["routed", "start_routing", "stop_routing", "RoutingError"]


class RoutingError(ValueError):
    """Routing options that cannot work (a peer that is no URL)."""


def routed(source: Any, opts: RoutingOptions, token: str | None, url: str) -> RoutedSource:
    """``source`` answering with its peers; ``url`` is this server's own (unless advertised otherwise)."""
    for u in opts.peers:
        if not u.startswith(("http://", "https://")):
            raise RoutingError(f"--peers: {u!r} is not an http:// or https:// URL")
    membership = Membership(list(opts.peers), interval_s=max(opts.heartbeat_ms, 50) / 1000, token=token)
    return RoutedSource(source, membership, opts.advertised_url or url, max_lag=opts.max_lag,
                        catch_up_wait_ms=opts.catch_up_wait_ms)


def start_routing(source: Any, opts: RoutingOptions | None, log: dict[str, Any] | None,
                  application_id: str | None) -> None:
    """Start a routed source's heartbeats; with ``heartbeat_topic``, publish this server on the log's heartbeat
    topic and add who else does (``log``: where the log is, ``{"eventlog": dir}`` or ``{"kafka": servers}``)."""
    if not isinstance(source, RoutedSource):
        return
    source.membership.start()
    if opts is None or not opts.heartbeat_topic or not log or not application_id:
        return
    from ..routing.heartbeats import HeartbeatDiscovery

    try:
        source.discovery = HeartbeatDiscovery(_open_log(log), application_id, source.membership,
                                              source.self_url).start()
    except Exception as exc:  # noqa: BLE001 - the log unreachable: serve anyway, say so
        print(f"iqgate: --heartbeat-topic: cannot use the heartbeat topic on {log}: {exc}", file=sys.stderr,
              flush=True)


def stop_routing(source: Any) -> None:
    if not isinstance(source, RoutedSource):
        return
    if source.discovery is not None:
        source.discovery.close()
    source.membership.close()


def _open_log(where: dict[str, Any]) -> Any:
    if "kafka" in where:
        from stores.log.kafka import KafkaSource

        return KafkaSource(where["kafka"], where.get("options") or None)
    from stores.log.eventlog import EventLog

    return EventLog(where["eventlog"])
