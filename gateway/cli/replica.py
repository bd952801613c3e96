"""``iqgate replica`` (issue 17): a standby replica, restoring the stores from their changelogs, served.

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
from pathlib import Path
from typing import Any

from .options import (
    UsageError,
    kafka_args,
    kafka_options,
    non_negative_int,
    pg_args,
    routing_args,
    routing_options,
    serve_options,
    server_args,
)

__all__ = ["add_replica_parser", "cmd_replica", "parse_partitions"]


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
            raise UsageError(f"iqgate replica: --partitions must be STORE=P[,P...], got {item!r}")
        out.setdefault(name.strip(), []).extend(nums)
    return out


def cmd_replica(args: argparse.Namespace) -> int:
    """Run a replica until stopped: restoring in this process, served by its serving processes."""
    from stores.app.writer_lock import WriterLock
    from stores.changelog.topics import EventLogChangelog, KafkaChangelog
    from stores.log.eventlog import EventLog
    from stores.replica import Replica

    from ..serving.hosts import ReplicaHost
    from ..serving.startup import run_server

    if args.bootstrap_servers and args.log:
        raise UsageError("iqgate replica: give --bootstrap-servers (Kafka) or --log DIR (event log), not both")
    options = kafka_options(args)
    opts = serve_options(args, workers=1, routing=routing_options(args, always=True))
    log_dir = Path(args.log or "data/log")
    if not args.bootstrap_servers and not (log_dir / "topics").is_dir():
        raise UsageError(f"iqgate replica: {log_dir} is not an event log (no topics/ in it); give --log DIR "
                         "or --bootstrap-servers")
    state_dir = Path(args.state_dir or f"data/replica-{args.port}")
    lock = WriterLock(state_dir, "replica").acquire()  # one writer per state dir, before anything touches it
    try:
        if args.bootstrap_servers:
            changelog: Any = KafkaChangelog(args.bootstrap_servers, options or None)
            source = {"kafka": args.bootstrap_servers} if not options else None
            log_where = {"kafka": args.bootstrap_servers, "options": options}
        else:
            changelog = EventLogChangelog(EventLog(log_dir))
            source = {"eventlog": str(log_dir.resolve())}
            log_where = dict(source)
        stores = [s.strip() for s in args.stores.split(",") if s.strip()] if args.stores else None
        replica = Replica(changelog, args.application_id, state_dir, stores=stores,
                          partitions=parse_partitions(args.partitions), source=source)
        host = ReplicaHost(replica, changelog)
        return run_server(host, opts, log=log_where, application_id=args.application_id)
    finally:
        lock.release()


def add_replica_parser(sub: Any) -> None:
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
    rp.set_defaults(fn=cmd_replica)
