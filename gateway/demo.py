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

__all__ = ["run_demo", "PIPELINE", "example_queries"]

PIPELINE = Path(__file__).resolve().parents[1] / "examples" / "shop_pipeline.py"


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
    from .console import die, print_result, wait_for_stop
    from .engine import Gateway
    from .hosting import load_pipeline, start_pipeline, wait_caught_up
    from .http import create_app
    from .json_values import dumps
    from .options import config_from_args
    from .pg.launch import pg_server, start_pg
    from .server import ServerThread, tune_process_for_serving

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
    t0 = time.monotonic()
    app = start_pipeline(module, log, base / state_name)
    last = [-1]

    def progress(done: int, total: int) -> None:
        if done != last[0]:
            last[0] = done
            _say(f"  stores caught up with {done}/{total} events ({time.monotonic() - t0:.0f} s)")

    try:
        wait_caught_up(app, log, args.timeout, progress)
        gw = Gateway(app, config=config_from_args(args))
        tune_process_for_serving()
        pg = pg_server(gw, args)
        server = ServerThread(create_app(gw), args.host, args.port, args.threads, on_failure=die).start()
        start_pg(pg)
        try:
            _say(f"\niqgate is serving the shop stores at {server.url} (the query page is at {server.url}/)\n")
            for title, sql in example_queries(orders):
                print(f"-- {title}\n{sql};", flush=True)
                res = gw.sql(sql)
                body = {"columns": [{"name": n, "type": t} for n, t in res.columns], "rows": res.rows(),
                        "position": res.position.to_json_map(), "partitions": [p.to_json() for p in res.partitions]}
                import json

                print_result(json.loads(dumps(body)), "table", sys.stdout)
                print(flush=True)
            sample = example_queries(orders)[0][1].replace("'", "'\\''")
            print(f"Try it over HTTP:\n  curl -s {server.url}/v1/sql -H 'Content-Type: application/json' "
                  f"-d '{{\"sql\": \"{sample}\"}}'\n  iqgate sql --url {server.url} \"SHOW TABLES\"", flush=True)
            hint = produce_hint or f"--log {base / 'log'}"
            print("  echo '{\"key\": \"c0001\", \"value\": {\"amount\": 5, \"item\": \"tea\"}}' | "
                  f"iqgate produce orders {hint}\n", flush=True)
            if args.once:
                return 0
            _say("Press Ctrl-C to stop.")
            wait_for_stop()
            return 0
        finally:
            server.close()
            if pg is not None:
                pg.close()
    finally:
        app.close()
