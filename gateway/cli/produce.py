"""``iqgate produce``: JSON lines from stdin into a topic of the event log or of Kafka (checked before any write)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .options import kafka_args, kafka_options, positive_int

__all__ = ["add_produce_parser", "cmd_produce"]


def cmd_produce(args: argparse.Namespace) -> int:
    """JSON lines ``{"key", "value", "timestamp"?, "headers"?}`` from stdin into a topic of the event log or of Kafka.

    ``headers``: ``{"name": "text"}`` or ``[["name", "text"], …]`` (record headers, values as UTF-8).

    Prints the Position of what was written (the last offset per partition), usable verbatim as
    ``AS OF POSITION`` for read-your-writes. Every line is checked before anything is written.
    """
    from ..serving.hosting import source_log

    source = source_log(args.bootstrap_servers, kafka_options(args), args.log)
    where = source.describe()
    if args.partitions is not None:
        try:
            source.create_topic(args.topic, partitions=args.partitions, exist_ok=True)
        except ValueError as exc:  # a topic name Kafka would refuse
            raise SystemExit(f"iqgate produce: {exc}") from None
    elif not source.has_topic(args.topic):
        raise SystemExit(f"iqgate produce: topic {args.topic!r} does not exist in {where}; "
                         "pass --partitions N to create it")
    records = []
    for lineno, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise SystemExit(f"iqgate produce: stdin line {lineno} is not JSON: {exc}; nothing was written") from None
        except RecursionError:
            from stores.log.records import MAX_VALUE_DEPTH

            raise SystemExit(f"iqgate produce: stdin line {lineno} nests JSON too deeply (a value may nest "
                             f"{MAX_VALUE_DEPTH} levels); nothing was written") from None
        if not isinstance(rec, dict) or "key" not in rec or not set(rec) <= {"key", "value", "timestamp", "headers"}:
            raise SystemExit(f"iqgate produce: stdin line {lineno} must be an object with \"key\", \"value\" and "
                             f"optionally \"timestamp\" (epoch ms) and \"headers\"; got {line.strip()[:80]!r}; "
                             "nothing was written")
        records.append((rec["key"], rec.get("value"), rec.get("timestamp"), rec.get("headers")))
    try:
        written = source.append_batch(args.topic, records)
    except Exception as exc:  # noqa: BLE001 - records are checked before anything is written
        from stores.log.eventlog import LogWriteError
        from stores.log.kafka import KafkaError

        if isinstance(exc, (KafkaError, LogWriteError)):  # their messages say exactly what was written
            raise SystemExit(f"iqgate produce: {exc}") from None
        raise SystemExit(f"iqgate produce: {exc}; nothing was written") from None
    last: dict[str, dict[str, int]] = {args.topic: {}}
    for p, o in written:
        last[args.topic][str(p)] = max(o, last[args.topic].get(str(p), -1))
    print(json.dumps({"records": len(written), "position": last}))
    return 0



def add_produce_parser(sub: Any) -> None:
    produce = sub.add_parser("produce", help="append JSON lines from stdin to a topic of the event log or Kafka")
    produce.add_argument("topic")
    produce.add_argument("--log", default="data/log", help="event log directory (default ./data/log)")
    produce.add_argument("--partitions", type=positive_int, help="create the topic with this many partitions if missing")
    kafka_args(produce, "produce to Kafka instead of the event log")
    produce.set_defaults(fn=cmd_produce)
