"""Prometheus text exposition, hand-rolled: four metric families do not need a client library.

Counters live in one lock-guarded dict per process; with several worker
processes each reports its own (Prometheus sums them), so no state is shared.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from stores.iqv2.position import Position

__all__ = ["Metrics", "BUCKETS", "subscription_lines"]

BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, int], int] = {}
        self._hist: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        i = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            key = (endpoint, status)
            self._requests[key] = self._requests.get(key, 0) + 1
            h = self._hist.get(endpoint)
            if h is None:
                h = self._hist[endpoint] = [0] * (len(BUCKETS) + 1)
            h[i] += 1
            self._sums[endpoint] = self._sums.get(endpoint, 0.0) + seconds

    def partition_failures(self, reasons: Iterable[str]) -> None:
        with self._lock:
            for r in reasons:
                self._failures[r] = self._failures.get(r, 0) + 1

    def render(self, positions: Mapping[str, Mapping[int, Position | None]], state: str,
               status: Mapping[str, Any] | None = None, interrupted: Mapping[str, int] | None = None) -> str:
        """The exposition text; ``positions`` are per store partition, ``status`` the source's health, at scrape time."""
        out: list[str] = []
        with self._lock:
            out += ["# HELP iqgate_requests_total HTTP requests by endpoint and status.",
                    "# TYPE iqgate_requests_total counter"]
            for (ep, st), n in sorted(self._requests.items()):
                out.append(f'iqgate_requests_total{{endpoint="{_label(ep)}",status="{st}"}} {n}')
            out += ["# HELP iqgate_request_seconds HTTP request latency (until the response headers).",
                    "# TYPE iqgate_request_seconds histogram"]
            for ep, counts in sorted(self._hist.items()):
                acc = 0
                for b, c in zip(BUCKETS, counts):
                    acc += c
                    out.append(f'iqgate_request_seconds_bucket{{endpoint="{_label(ep)}",le="{b}"}} {acc}')
                acc += counts[-1]
                out.append(f'iqgate_request_seconds_bucket{{endpoint="{_label(ep)}",le="+Inf"}} {acc}')
                out.append(f'iqgate_request_seconds_sum{{endpoint="{_label(ep)}"}} {self._sums[ep]:.6f}')
                out.append(f'iqgate_request_seconds_count{{endpoint="{_label(ep)}"}} {acc}')
            out += ["# HELP iqgate_partition_failures_total Failed store partitions seen by queries, by reason.",
                    "# TYPE iqgate_partition_failures_total counter"]
            for r, n in sorted(self._failures.items()):
                out.append(f'iqgate_partition_failures_total{{reason="{_label(r)}"}} {n}')
        out += ["# HELP iqgate_statements_interrupted_total Statements interrupted over their budget, by reason.",
                "# TYPE iqgate_statements_interrupted_total counter"]
        for reason, n in sorted((interrupted or {}).items()):
            out.append(f'iqgate_statements_interrupted_total{{reason="{_label(reason)}"}} {n}')
        out += ["# HELP iqgate_store_position Offset of the last source record each store partition applied.",
                "# TYPE iqgate_store_position gauge"]
        for store, parts in sorted(positions.items()):
            for sp, pos in sorted(parts.items()):
                if pos is None:
                    continue
                for topic in sorted(pos.topics()):
                    for tp, off in pos.partition_positions(topic).items():
                        out.append(f'iqgate_store_position{{store="{_label(store)}",store_partition="{sp}",'
                                   f'topic="{_label(topic)}",partition="{tp}"}} {off}')
        out += ["# HELP iqgate_app_state 1 for the application's current state (KIP-696).",
                "# TYPE iqgate_app_state gauge", f'iqgate_app_state{{state="{_label(state)}"}} 1']
        if status is not None:
            out += _health_lines(status)
            out += _progress_lines(status)
            out += _lag_lines(status)
            out += _crash_lines(status)
        out += _file_lines()
        return "\n".join(out) + "\n"


def _crash_lines(status: Mapping[str, Any]) -> list[str]:
    """Serving processes of this server that died of a signal and were started again (issue 43)."""
    crashes = status.get("crashes")
    if crashes is None:
        return []
    return ["# HELP iqgate_serving_process_crashes_total Serving processes that died of a signal (a native crash) "
            "and were started again by the server's supervisor.",
            "# TYPE iqgate_serving_process_crashes_total counter",
            f"iqgate_serving_process_crashes_total {int(crashes.get('count') or 0)}"]


def _file_lines() -> list[str]:
    """Open files against the limit, and the store read connections behind most of them (issue 23)."""
    from stores.engine import connections

    out = []
    n = connections.open_files()
    if n is not None:
        out += ["# HELP iqgate_open_files File descriptors the process has open.", "# TYPE iqgate_open_files gauge",
                f"iqgate_open_files {n}"]
    lim = connections.fd_limit()
    if lim is not None:
        out += ["# HELP iqgate_open_files_limit The process's soft RLIMIT_NOFILE.",
                "# TYPE iqgate_open_files_limit gauge", f"iqgate_open_files_limit {lim[0]}"]
    st = connections.stats()
    out += ["# HELP iqgate_store_partitions_open Store partition files open in this process.",
            "# TYPE iqgate_store_partitions_open gauge", f"iqgate_store_partitions_open {st['partitions']}",
            "# HELP iqgate_store_read_connections Read connections to store files (shared by all threads).",
            "# TYPE iqgate_store_read_connections gauge", f"iqgate_store_read_connections {st['read_connections']}"]
    return out


def _lag_lines(status: Mapping[str, Any]) -> list[str]:
    """Per store partition this server hosts: role, changelog offset lag and time lag (KIP-535; issue 17)."""
    parts = status.get("partitions")
    if not parts:
        return []
    out = ["# HELP iqgate_partition_offset_lag Changelog records a store partition has not applied yet.",
           "# TYPE iqgate_partition_offset_lag gauge"]
    for p in parts:
        out.append(f'iqgate_partition_offset_lag{{store="{_label(p["store"])}",store_partition="{p["partition"]}",'
                   f'role="{_label(p["role"])}"}} {p["offset_lag"]}')
    out += ["# HELP iqgate_partition_time_lag_seconds How long a store partition has been behind its changelog.",
            "# TYPE iqgate_partition_time_lag_seconds gauge"]
    for p in parts:
        out.append(f'iqgate_partition_time_lag_seconds{{store="{_label(p["store"])}",'
                   f'store_partition="{p["partition"]}",role="{_label(p["role"])}"}} {p["time_lag_ms"] / 1000:.3f}')
    peers = status.get("peers") or []
    if peers:
        out += ["# HELP iqgate_peer_up 1 while a peer answers its heartbeat.", "# TYPE iqgate_peer_up gauge"]
        for peer in peers:
            out.append(f'iqgate_peer_up{{peer="{_label(peer["url"])}"}} {int(bool(peer["alive"]))}')
    return out


def _health_lines(status: Mapping[str, Any]) -> list[str]:
    """Health beside the client state: overall status, and per store its status and since when (epoch s)."""
    h = status["health"]
    out = ["# HELP iqgate_health 1 for the overall health: healthy, degraded, starting or stopped.",
           "# TYPE iqgate_health gauge", f'iqgate_health{{status="{_label(h["status"])}"}} 1',
           "# HELP iqgate_store_status 1 for each store's ingest status (running, starting, paused, rebuilding, "
           "failed); reason in the label while not running.",
           "# TYPE iqgate_store_status gauge"]
    for name, s in sorted(status["stores"].items()):
        reason = f',reason="{_label(s.reason)}"' if s.reason else ""
        out.append(f'iqgate_store_status{{store="{_label(name)}",status="{s.status}"{reason}}} 1')
    out += ["# HELP iqgate_store_ingest_paused 1 while a fault pauses the store's ingest (it retries by itself).",
            "# TYPE iqgate_store_ingest_paused gauge"]
    for name, s in sorted(status["stores"].items()):
        out.append(f'iqgate_store_ingest_paused{{store="{_label(name)}"}} {int(s.status == "paused")}')
    out += ["# HELP iqgate_store_batches_total Micro-batches each store applied since the process started.",
            "# TYPE iqgate_store_batches_total counter"]
    for name, s in sorted(status["stores"].items()):
        out.append(f'iqgate_store_batches_total{{store="{_label(name)}"}} {s.batches}')
    return out


_PROGRESS = (("reached", "iqgate_store_progress_records", "Records a catching-up or rebuilding store has applied "
              "(of iqgate_store_progress_target_records)."),
             ("target", "iqgate_store_progress_target_records", "Records it must reach: the source's end when its "
              "query started, or for a rebuild (issue 20) at least the position of the version it replaces."),
             ("records_per_s", "iqgate_store_progress_records_per_second", "How fast it is getting there."),
             ("eta_s", "iqgate_store_progress_eta_seconds", "When it should get there at that rate."))


def _progress_lines(status: Mapping[str, Any]) -> list[str]:
    """Catch-up and rebuild progress per store (``phase`` label: catching up / rebuilding), while there is any."""
    rows = [(name, s.progress) for name, s in sorted(status["stores"].items())
            if s.progress and s.status in ("starting", "rebuilding")]
    if not rows:
        return []
    out: list[str] = []
    for key, metric, text in _PROGRESS:
        out += [f"# HELP {metric} {text}", f"# TYPE {metric} gauge"]
        for name, pr in rows:
            value = pr.get(key)
            if value is not None:
                out.append(f'{metric}{{store="{_label(name)}",phase="{_label(str(pr.get("phase", "")))}"}} {value}')
    return out


def subscription_lines(stats: Mapping[str, Any]) -> str:
    """Live answers (issue 46): open against the limit, started, ended by reason (``Gateway.subscriptions``)."""
    out = ["# HELP iqgate_subscriptions_open Live answers (SUBSCRIBE, EMIT CHANGES) running now.",
           "# TYPE iqgate_subscriptions_open gauge", f"iqgate_subscriptions_open {int(stats.get('open', 0))}",
           "# HELP iqgate_subscriptions_limit Live answers this process runs at most (--max-subscriptions).",
           "# TYPE iqgate_subscriptions_limit gauge", f"iqgate_subscriptions_limit {int(stats.get('limit', 0))}",
           "# HELP iqgate_subscriptions_started_total Live answers started.",
           "# TYPE iqgate_subscriptions_started_total counter",
           f"iqgate_subscriptions_started_total {int(stats.get('started', 0))}",
           "# HELP iqgate_subscriptions_ended_total Live answers ended, by why (CLOSED_BY_CLIENT, SUBSCRIBER_TOO_SLOW, ...).",
           "# TYPE iqgate_subscriptions_ended_total counter"]
    for reason, n in sorted((stats.get("ended") or {}).items()):
        out.append(f'iqgate_subscriptions_ended_total{{reason="{_label(reason)}"}} {int(n)}')
    return "\n".join(out) + "\n"
