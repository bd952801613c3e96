"""A real server (``run_server``: the supervisor and its serving processes) hosting a real StreamsApp of the shop
stores without Spark, driven through its stdin: what the serving tests watch from outside.

``python -m tests.gateway.serving.hosted_server STATE_DIR WORKERS [OPTIONS_JSON]`` prints ``READY <url>`` once the
app started, then reads one command a line and prints ``DONE <command>`` after each (OPTIONS_JSON: ``users_file``,
``audit_log``, ``audit_mask``, ``tls_cert``, ``tls_key``, ``threads``; a server that cannot start says why in one
line and exits 1, as the CLI does):

- ``rebalance``: RUNNING → REBALANCING → RUNNING (a reassignment of partitions, as a rebalance does);
- ``pause STORE`` / ``resume STORE``: the store's ingest paused by a fault, and running again;
- ``batch``: one more batch of orders applied to every store;
- ``error``: an uncaught exception with SHUTDOWN_CLIENT: PENDING_ERROR → ERROR;
- ``close``: the app closed: PENDING_SHUTDOWN → NOT_RUNNING (the server keeps serving);
- ``stop``: the server stops.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from gateway.engine.config import GatewayConfig
from gateway.serving.hosts import AppHost
from gateway.serving.options import AccessOptions, HttpOptions, ServeOptions
from gateway.serving.startup import Server, ServerStartError, run_server
from gateway.serving.stopping import request_stop
from stores.iqv2.errors import MissingSourceTopicException
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import make_app, make_shop, write_shop


def main() -> int:
    state_dir, workers = Path(sys.argv[1]), int(sys.argv[2])
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    shop = make_shop()
    batches = [0]

    def make(listener: Any) -> Any:
        app = make_app(state_dir)
        listener(app)
        app.start()
        write_shop(app, shop)
        return app

    host = AppHost(state_dir, make, "the shop stores")

    def ready(server: Server) -> None:
        print(f"READY {server.url}", flush=True)
        threading.Thread(target=commands, args=(host,), daemon=True).start()

    def commands(h: AppHost) -> None:
        app = h.app
        for line in sys.stdin:
            cmd, *args = line.split()
            if cmd == "rebalance":
                hosted, _ = app.hosting()
                app.reassign_partitions(hosted=hosted)
            elif cmd == "pause":
                app.health.set(args[0], "paused", f"disk full: store {args[0]} partition 0: No space left on "
                                                  f"device ({state_dir}/stores/{args[0]}/partition-0.db)",
                               retry_s=1.0)
            elif cmd == "resume":
                app.health.set(args[0], "running")
            elif cmd == "batch":
                batches[0] += 1
                pos = shop.position
                bumped = Position.from_map({t: {p: o + batches[0] for p, o in pos.partition_positions(t).items()}
                                            for t in pos.topics()})
                shop.position = bumped
                write_shop(app, shop, batch_id=batches[0])
            elif cmd == "error":
                app.handle_uncaught(MissingSourceTopicException("MISSING_SOURCE_TOPIC: topic orders was deleted"),
                                    "orders")
            elif cmd == "close":
                app.close(30)
            elif cmd == "stop":
                print("DONE stop", flush=True)
                request_stop()
                return
            print(f"DONE {cmd}", flush=True)

    opts = ServeOptions(http=HttpOptions(port=0, threads=extra.get("threads", 2), tls_cert=extra.get("tls_cert"),
                                         tls_key=extra.get("tls_key")),
                        workers=workers, pin_cpus=False, config=GatewayConfig(),
                        access=AccessOptions(users_file=extra.get("users_file"), audit_log=extra.get("audit_log"),
                                             audit_mask=bool(extra.get("audit_mask"))))
    try:
        return run_server(host, opts, ready=ready)
    except ServerStartError as exc:
        print(f"iqgate: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(code)
