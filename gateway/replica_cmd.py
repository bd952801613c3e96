"""``iqgate replica`` and the routing flags of ``serve`` (issue 17): standby replicas and any-server-answers-any-query.

``iqgate replica --bootstrap-servers HOST:PORT --application-id APP`` (or
``--log DIR`` for the embedded event log) restores every store of APP from
its changelog topics into ``--state-dir``, keeps tailing them, and serves the
copies over HTTP (and PG with ``--pg-port``) exactly as the active serves its
stores. ``--peers URL,URL`` names the other servers (the pipeline host, other
replicas): a partition this server cannot answer as asked (not hosted here,
behind the statement's position bound, over ``--max-lag``, or
``require_active`` on a standby) is answered by a peer that can.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path
from typing import Any

from .options import http_url, non_negative_int, pg_args, server_args

__all__ = ["add_replica_parser", "routing_args", "routed", "cmd_replica", "parse_partitions"]


def routing_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peers", default="", metavar="URL[,URL]",
                   help="other iqgate servers of the same application (pipeline host, replicas): partitions this "
                        "server cannot answer as asked are answered by them")
    p.add_argument("--advertised-url", type=http_url, metavar="URL",
                   help="how peers and clients reach this server (default http://HOST:PORT)")
    p.add_argument("--max-lag", type=non_negative_int, metavar="RECORDS",
                   help="answer from a copy only if its changelog offset lag is at most this (default: any lag; "
                        "a statement's position bound is the exact way to bound staleness)")
    p.add_argument("--heartbeat-ms", type=non_negative_int, default=500, help="how often peers are polled")
    p.add_argument("--heartbeat-topic", action="store_true",
                   help="also find peers through the topic <application_id>-iqgate-heartbeats on the log (Kafka or "
                        "the event log): every server publishes its URL there")


def routed(source: Any, args: argparse.Namespace, token: str | None, *, always: bool = False) -> Any:
    """``source`` wrapped in a RoutedSource when ``--peers`` names any (or ``always``; else ``source`` itself)."""
    peers = [u.strip() for u in (args.peers or "").split(",") if u.strip()]
    if not always and not peers and args.max_lag is None and not getattr(args, "heartbeat_topic", False):
        return source
    from .routing.membership import Membership
    from .routing.source import RoutedSource

    for u in peers:
        if not u.startswith(("http://", "https://")):
            raise SystemExit(f"iqgate: --peers: {u!r} is not an http:// or https:// URL")
    membership = Membership(peers, interval_s=max(args.heartbeat_ms, 50) / 1000, token=token)
    url = args.advertised_url or f"http://{args.host}:{args.port}"
    return RoutedSource(source, membership, url, max_lag=args.max_lag,
                        catch_up_wait_ms=getattr(args, "catch_up_wait_ms", 0) or 0)


def discover(src: Any, args: argparse.Namespace, log: Any, application_id: str) -> None:
    """With ``--heartbeat-topic``: publish this server on the log's heartbeat topic and add who else does."""
    if not getattr(args, "heartbeat_topic", False) or not hasattr(src, "membership"):
        return
    from .routing.heartbeats import HeartbeatDiscovery

    try:
        src.discovery = HeartbeatDiscovery(log, application_id, src.membership, src.self_url).start()
    except Exception as exc:  # noqa: BLE001 - the log unreachable: serve anyway, say so
        print(f"iqgate: --heartbeat-topic: cannot use the heartbeat topic on {log.describe()}: {exc}",
              file=sys.stderr, flush=True)


def stop_discovery(src: Any) -> None:
    d = getattr(src, "discovery", None)
    if d is not None:
        d.close()


def parse_partitions(items: list[str]) -> dict[str, list[int]]:
    """``--partitions STORE=0,1`` (repeatable) → ``{store: [0, 1]}``; a usage error names the bad item."""
    out: dict[str, list[int]] = {}
    for item in items:
        name, sep, parts = item.partition("=")
        try:
            nums = [int(x) for x in parts.split(",") if x.strip()]
        except ValueError:
            nums = []
        if not sep or not name.strip() or not nums or any(n < 0 for n in nums):
            raise SystemExit(f"iqgate replica: --partitions must be STORE=P[,P...], got {item!r}")
        out.setdefault(name.strip(), []).extend(nums)
    return out


def _lock_state_dir(state_dir: Path) -> int:
    """One replica per state dir: a second one would write the same files."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "replica.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise SystemExit(f"iqgate replica: {state_dir} is in use by another replica; give each its own --state-dir")
    return fd


def cmd_replica(args: argparse.Namespace, kafka_options: dict[str, str], pg_server: Any, start_pg: Any) -> int:
    """Run a replica until stopped; ``pg_server``/``start_pg`` are the CLI's (the PG port is served the same way)."""
    from stores.changelog.topics import EventLogChangelog, KafkaChangelog
    from stores.log.eventlog import EventLog
    from stores.replica import Replica, ReplicaSource

    from .console import die, wait_for_stop
    from .engine import Gateway
    from .http import create_app
    from .options import config_from_args
    from .server import ServerThread, tune_process_for_serving

    if args.bootstrap_servers and args.log:
        raise SystemExit("iqgate replica: give --bootstrap-servers (Kafka) or --log DIR (event log), not both")
    if args.bootstrap_servers:
        changelog: Any = KafkaChangelog(args.bootstrap_servers, kafka_options or None)
        source = {"kafka": args.bootstrap_servers} if not kafka_options else None
    else:
        log_dir = Path(args.log or "data/log")
        if not (log_dir / "topics").is_dir():
            raise SystemExit(f"iqgate replica: {log_dir} is not an event log (no topics/ in it); give --log DIR "
                             "or --bootstrap-servers")
        changelog = EventLogChangelog(EventLog(log_dir))
        source = {"eventlog": str(log_dir.resolve())}
    state_dir = Path(args.state_dir or f"data/replica-{args.port}")
    lock = _lock_state_dir(state_dir)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()] if args.stores else None
    replica = Replica(changelog, args.application_id, state_dir, stores=stores,
                      partitions=parse_partitions(args.partitions), source=source)
    try:
        replica.start()
    except Exception as exc:  # noqa: BLE001 - the log unreachable at start: one line, not a traceback
        replica.close()
        raise SystemExit(f"iqgate replica: cannot start restoring from {changelog.describe()}: {exc}") from None
    tune_process_for_serving()
    cfg = config_from_args(args)
    local = ReplicaSource(replica)
    src = routed(local, args, cfg.auth_token, always=True)
    gw = Gateway(src, config=cfg)
    pg = pg_server(gw, args)
    server = ServerThread(create_app(gw), args.host, args.port, args.threads, on_failure=die).start()
    if hasattr(src, "membership"):
        if not args.advertised_url:
            src.self_url = server.url.rstrip("/")
        src.membership.start()
        if args.bootstrap_servers:
            from stores.log.kafka import KafkaSource

            discover(src, args, KafkaSource(args.bootstrap_servers, kafka_options or None), args.application_id)
        else:
            discover(src, args, changelog.log, args.application_id)
    print(f"iqgate: replica of {args.application_id} from {changelog.describe()} into {state_dir}, serving on "
          f"{server.url}", file=sys.stderr, flush=True)
    start_pg(pg)
    try:
        wait_for_stop()
    finally:
        if pg is not None:
            pg.close()
        server.close()
        if hasattr(src, "membership"):
            stop_discovery(src)
            src.membership.close()
        local.close()
        close = getattr(changelog, "close", None)
        if close is not None:
            close()
        os.close(lock)
    return 0


def add_replica_parser(sub: Any, kafka_args: Any, fn: Any) -> None:
    rp = sub.add_parser("replica", help="a standby replica: restore an application's stores from their changelogs, "
                                        "keep tailing, serve them")
    rp.add_argument("--application-id", required=True, help="the pipeline's APPLICATION_ID")
    kafka_args(rp, "restore from changelog topics in Kafka")
    rp.add_argument("--log", help="restore from changelog topics in this event log directory instead")
    rp.add_argument("--state-dir", help="where the replica keeps its copies (default data/replica-PORT)")
    rp.add_argument("--stores", help="only these stores (comma-separated; default every store with a changelog)")
    rp.add_argument("--partitions", action="append", default=[], metavar="STORE=P[,P]",
                    help="host only these partitions of STORE (repeatable; default all)")
    rp.add_argument("--catch-up-wait-ms", type=non_negative_int, default=2000, metavar="MS",
                    help="a partition behind a statement's position bound while it still has changelog records "
                         "to apply is asked again for up to this long (default 2000; 0: answer NOT_UP_TO_BOUND "
                         "at once)")
    server_args(rp)
    pg_args(rp)
    routing_args(rp)
    rp.set_defaults(fn=fn)
