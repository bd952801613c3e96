"""``iqgate upgrade PIPELINE``: what a changed pipeline file would do to the stores on disk, and doing it.

Issue 20. ``--dry-run`` prints the plan and changes nothing (think
``terraform plan``): one line per store, unchanged / new / changed (and how)
/ removed, and for a changed store whose source no longer holds the records
a rebuild needs, REBUILD_REFUSED with the topic-partitions and offsets gone.
Without it the plan is carried out offline: ``--drop-removed`` deletes the
files of removed stores (never done silently), then the pipeline runs until
every changed store has been rebuilt and swapped in and every store has
caught up, and exits. ``iqgate serve`` prints the same plan at start and
carries it out while serving.

Carrying a plan out writes the state directory, so it takes the directory's
writer lock first (a running ``serve`` of it refuses the upgrade at once,
naming itself); ``--dry-run`` only reads, and runs beside a server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from .options import kafka_args, kafka_options, positive_seconds

__all__ = ["cmd_upgrade", "add_upgrade_parser", "print_plan"]


def print_plan(plan: Any, out: Any = None) -> None:
    """The plan on stderr (or ``out``), one line per store, as ``serve`` and ``upgrade`` print it."""
    out = out or sys.stderr
    print(f"iqgate: upgrade plan ({plan.summary()}):", file=out, flush=True)
    for line in plan.lines():
        print(f"iqgate:   {line}", file=out, flush=True)


def _check_sources(plan: Any, source: Any, allow_partial: bool) -> Any:
    """The plan with each changed store's refusal filled in when its source lost records a rebuild needs."""
    from dataclasses import replace

    from stores.app.upgrade import UpgradePlan, missing_history, refusal_message

    changes = []
    for c in plan.changes:
        if c.action == "changed" and c.new_spec is not None and not allow_partial:
            missing = missing_history(source, c.new_spec.source_topics)
            if missing:
                c = replace(c, refused=refusal_message(c.store, missing, source.describe()))
        changes.append(c)
    return UpgradePlan(tuple(changes))


def cmd_upgrade(args: argparse.Namespace) -> int:
    from stores.app.writer_lock import WriterLock

    base = Path(args.data_dir)
    state_dir = Path(args.state_dir or base / "state")
    lock = None if args.dry_run else WriterLock(state_dir, "upgrade").acquire()  # before anything else
    try:
        return _upgrade(args, base, state_dir)
    finally:
        if lock is not None:
            lock.release()


def _upgrade(args: argparse.Namespace, base: Path, state_dir: Path) -> int:
    from stores.app.upgrade import drop_removed, plan_upgrade

    from ..serving.hosting import build_topology, load_pipeline, pipeline_source, spark_session, start_pipeline

    module = load_pipeline(args.pipeline)
    log = pipeline_source(module, args.bootstrap_servers, kafka_options(args), args.log_dir or base / "log")
    spark = spark_session(args.master)
    for topic, partitions in module.TOPICS.items():
        if not log.has_topic(topic):
            if args.dry_run:
                continue  # a dry run creates nothing; the stores reading it are new anyway
            log.create_topic(topic, partitions=partitions, exist_ok=True)
    topology = build_topology(module, spark, log)
    specs = {s.name: s for s in topology.store_specs()}
    plan = _check_sources(plan_upgrade(state_dir, specs, topology.store_definitions()), log,
                          args.rebuild_from_available)
    print_plan(plan)
    if args.dry_run:
        return 0
    if args.drop_removed:
        for name in drop_removed(state_dir, plan):
            print(f"iqgate: dropped the removed store {name} (its files and checkpoints)", file=sys.stderr)
    refused = [c for c in plan.changes if c.refused]
    if refused:
        for c in refused:
            print(f"iqgate: {c.refused}", file=sys.stderr)
        return 1
    if not plan.of("changed") and not plan.of("new"):
        print("iqgate: nothing to rebuild", file=sys.stderr)
        return 0
    app = start_pipeline(module, log, state_dir, spark, rebuild_from_available=args.rebuild_from_available)
    try:
        return _wait_upgraded(app, args.timeout)
    finally:
        app.close(60)


def _wait_upgraded(app: Any, timeout_s: float) -> int:
    """Until every changed store swapped in and the app is RUNNING (0), it failed or stopped (1), or time ran out."""
    from stores.iqv2.state import State

    from ..serving.hosting import progress_line

    deadline = time.monotonic() + timeout_s
    last = 0.0
    for _ in range(10_000_000):  # bounded; the clock ends it
        if app.upgrades.refused:
            for msg in app.upgrades.refused.values():
                print(f"iqgate: {msg}", file=sys.stderr)
            return 1
        if app.state is State.RUNNING and not app.upgrades.pending:
            print("iqgate: upgraded: every changed store was rebuilt and swapped in", file=sys.stderr, flush=True)
            return 0
        if app.state.has_completed_shutdown() or app.state is State.PENDING_ERROR:
            print(f"iqgate: the pipeline stopped while upgrading (state {app.state})", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"iqgate: the upgrade did not complete within {timeout_s:.0f} s; run it again (or `iqgate serve`) "
                  "to go on: rebuilds start over from the source", file=sys.stderr)
            return 1
        if time.monotonic() - last >= 2.0:
            last = time.monotonic()
            line = progress_line(app.status())
            if line:
                print(line, file=sys.stderr, flush=True)
        time.sleep(0.2)
    return 1


def add_upgrade_parser(sub: Any) -> None:
    """The ``upgrade`` subcommand."""
    p = sub.add_parser("upgrade", help="print what a changed pipeline does to the stores on disk (and do it)")
    p.add_argument("pipeline", help="pipeline file (APPLICATION_ID, TOPICS, build(spark, log))")
    p.add_argument("--data-dir", default="data", help="where the log and state live (default ./data)")
    p.add_argument("--log-dir", help="event log directory (default DATA_DIR/log)")
    p.add_argument("--state-dir", help="state directory (default DATA_DIR/state)")
    kafka_args(p, "read the pipeline's topics from Kafka instead of the event log")
    p.add_argument("--master", help="Spark master, e.g. spark://host:7077 (default: local[2])")
    p.add_argument("--dry-run", action="store_true", help="print the plan only; change nothing")
    p.add_argument("--drop-removed", action="store_true",
                   help="delete the files of stores the pipeline no longer has (kept otherwise)")
    p.add_argument("--rebuild-from-available", action="store_true",
                   help="rebuild changed stores from what the source still holds when early records are gone "
                        "(their answers are partial history) instead of refusing")
    p.add_argument("--timeout", type=positive_seconds, default=3600.0, help="seconds to wait for the rebuilds (default 3600)")
    p.set_defaults(fn=cmd_upgrade)
