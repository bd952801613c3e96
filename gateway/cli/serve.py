"""``iqgate serve``: a pipeline file hosted and its stores served, or a state directory served read-only."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .options import (
    UsageError,
    kafka_args,
    kafka_options,
    non_negative_int,
    pg_args,
    positive_int,
    routing_args,
    routing_options,
    serve_options,
    server_args,
)

__all__ = ["add_serve_parser", "cmd_serve", "say_open_files_limit", "report_catch_up"]


def add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run a pipeline file and serve its stores, or serve a state dir read-only")
    serve.add_argument("pipeline", nargs="?", help="pipeline file (APPLICATION_ID, TOPICS, build(spark, log))")
    serve.add_argument("--data-dir", default="data", help="where the log and state live (default ./data)")
    serve.add_argument("--log-dir", help="event log directory (default DATA_DIR/log)")
    serve.add_argument("--state-dir", help="state directory (default DATA_DIR/state); alone: serve it read-only")
    kafka_args(serve, "read the pipeline's topics from Kafka instead of the event log")
    serve.add_argument("--master", help="Spark master for the pipeline, e.g. spark://host:7077 (default: local[2])")
    serve.add_argument("--rebuild-from-available", action="store_true",
                       help="rebuild a changed store from what its source still holds when early records are gone "
                            "(its answers are partial history) instead of refusing the upgrade")
    server_args(serve)
    pg_args(serve)
    serve.add_argument("--workers", type=positive_int, default=None,
                       help="serving processes on the one port, reading the same state directory (default: the "
                            "number of cores); the process you start supervises them and hosts the pipeline")
    serve.add_argument("--no-pin-cpus", action="store_true",
                       help="with --workers > 1, do not run each process's HTTP threads on a CPU of its own "
                            "(pinning measured ~1.5x lookups/s on a 2-core machine; a machine shared with other "
                            "busy processes may do better without)")
    serve.add_argument("--catch-up-wait-ms", type=non_negative_int, default=0, help=argparse.SUPPRESS)
    routing_args(serve)
    serve.set_defaults(fn=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serving.hosts import PipelineHost, ReadOnlyHost
    from ..serving.startup import run_server
    from ..serving.supervisor import default_workers

    workers = args.workers if args.workers is not None else default_workers()
    opts = serve_options(args, workers=workers, routing=routing_options(args))
    if args.pipeline is None:
        if not args.state_dir:
            raise UsageError("iqgate serve: give a pipeline file, or --state-dir DIR to serve its stores read-only")
        state_dir = Path(args.state_dir)
        if not state_dir.is_dir():
            what = "is not a directory" if state_dir.exists() else "does not exist"
            raise UsageError(f"--state-dir {state_dir} {what}")
        say_open_files_limit()
        host: Any = ReadOnlyHost(state_dir)
        return run_server(host, opts)
    from stores.app.writer_lock import StateDirLocked, lock_holder

    from ..serving.hosting import load_pipeline, pipeline_source, source_location

    base = Path(args.data_dir)
    state_dir = Path(args.state_dir or base / "state")
    holder = lock_holder(state_dir)  # refused at once, before anything loads (run_server takes the lock itself)
    if holder is not None:
        raise StateDirLocked(state_dir, holder)
    say_open_files_limit()
    module = load_pipeline(args.pipeline)
    log = pipeline_source(module, args.bootstrap_servers, kafka_options(args), args.log_dir or base / "log")
    host = PipelineHost(module, log, state_dir, master=args.master,
                        rebuild_from_available=args.rebuild_from_available)
    return run_server(host, opts, ready=lambda _server: _after_start(host), log=source_location(log),
                      application_id=module.APPLICATION_ID)


def _after_start(host: Any) -> None:
    """Once Spark is up: the upgrade plan, then catch-up progress until RUNNING (in the background)."""
    from .upgrade import print_plan

    print_plan(host.app.upgrades.plan)
    threading.Thread(target=report_catch_up, args=(host.app,), name="iqgate-catch-up", daemon=True).start()


def say_open_files_limit() -> None:
    """Raise the open-files limit (before Spark starts, so its JVM inherits it) and say what it allows."""
    from ..serving.hosting import FILES_PER_PARTITION, raise_open_files_limit

    got = raise_open_files_limit()
    if got is not None:
        print(f"iqgate: open-files limit {got[0]:,}: room for about {got[1]:,} store partitions "
              f"(stores x partitions, {FILES_PER_PARTITION} files each)", file=sys.stderr, flush=True)


def report_catch_up(app: Any, every_s: float = 2.0) -> None:
    """Print catch-up progress until the app is RUNNING (or stopped, or asked to stop); then say so."""
    from stores.iqv2.state import State

    from ..serving.hosting import progress_line
    from ..serving.stopping import stop_requested

    t0 = time.monotonic()
    last = 0.0
    for _ in range(1_000_000):  # bounded; the state or a stop request ends it
        state = app.state
        if state is State.RUNNING:
            print(f"iqgate: RUNNING: every store has caught up ({time.monotonic() - t0:.1f} s after Spark started)",
                  file=sys.stderr, flush=True)
            return
        if state.has_completed_shutdown() or state is State.PENDING_ERROR or stop_requested():
            return
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            line = progress_line(app.status())
            if line:
                print(line, file=sys.stderr, flush=True)
        time.sleep(0.2)
