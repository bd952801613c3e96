"""A real server (``run_server``: the supervisor and its serving processes) hosting an app whose key-value store
writes its changelog on the embedded log (the way the pipeline writes, no Spark), driven through stdin: what the
live-answer tests of serving processes and restarts watch from outside.

``python -m tests.gateway.live.live_server ROOT WORKERS`` prints ``READY <url>`` once the app started, then reads
one command a line and prints ``DONE <command>`` after each: ``batch`` (one more batch of the workload), ``stop``.
Started again on the same ROOT, it goes on from the batch the store reached.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from gateway.engine.config import GatewayConfig
from gateway.serving.hosts import AppHost
from gateway.serving.options import HttpOptions, ServeOptions
from gateway.serving.startup import Server, run_server
from gateway.serving.stopping import request_stop
from stores.app.streams import StreamsApp
from stores.log.eventlog import EventLog
from stores.pipeline.changelogs import ChangelogWriters
from tests.stores.live.workload import APP, SPECS, LiveTopology, Writer, workload


def main() -> int:
    root, workers = Path(sys.argv[1]), int(sys.argv[2])
    held: dict[str, Any] = {}

    def make(listener: Any) -> Any:
        topology = LiveTopology([SPECS["kv"]])
        topology.log = EventLog(root / "log")
        app = StreamsApp(topology, application_id=APP, state_dir=str(root / "state"))
        listener(app)
        app.start()
        writer = Writer(app, ChangelogWriters(topology, app), SPECS["kv"], workload("kv", 200, seed=13))
        last = max((app.partition_store("kv", p).last_batch_id() or -1) for p in range(SPECS["kv"].partitions))
        writer.done = last + 1  # a restart goes on from where the store is
        writer.write(max(writer.done, 4))
        held["writer"] = writer
        return app

    host = AppHost(root / "state", make, "a live kv store")

    def ready(server: Server) -> None:
        print(f"READY {server.url}", flush=True)
        threading.Thread(target=commands, daemon=True).start()

    def commands() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "batch":
                w = held["writer"]
                w.write(w.done + 1)
                print(f"DONE batch {w.done - 1}", flush=True)
            elif cmd == "stop":
                print("DONE stop", flush=True)
                request_stop()
                return

    opts = ServeOptions(http=HttpOptions(port=0, threads=2), workers=workers, pin_cpus=False, config=GatewayConfig())
    return run_server(host, opts, ready=ready)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(code)
