"""Child processes of the multi-process stores tests: ``python store_procs.py <command> ...``.

Every loop here is bounded in count and time, so a child can never outlive its test for long.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from stores.app.streams import StoreTopology, StreamsApp  # noqa: E402
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec  # noqa: E402
from stores.engine.change import Change  # noqa: E402
from stores.iqv2.position import Position  # noqa: E402
from stores.iqv2.state import State  # noqa: E402

TOPIC = "src"


def consistency_specs(partitions: int = 2) -> list[StoreSpec]:
    """Batch b sets every key to value b and the position to {src: {0: b}}: data and position must agree."""
    return [
        StoreSpec("kv", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),
                  Column("pad", SqlType.VARCHAR)), partitions=partitions, source_topics=(TOPIC,)),
    ]


def batch(b: int, keys: int) -> list[Change]:
    return [Change(k, (b, "x" * 64)) for k in range(keys)]


def write_batches(state_dir: str, app_id: str, batches: int, keys: int, max_s: float) -> None:
    """Write batches 1..batches (or until max_s), then close."""
    app = StreamsApp(StoreTopology(consistency_specs()), app_id, state_dir, synchronous="NORMAL")
    app.start()
    w = app.writer("kv")
    start = w.last_batch_id() or 0
    deadline = time.monotonic() + max_s
    print("started", flush=True)
    for b in range(start + 1, start + batches + 1):
        w.write_batch(b, batch(b, keys), Position.from_map({TOPIC: {0: b}}))
        if time.monotonic() > deadline:
            break
    print("done", flush=True)
    app.close(timeout_s=30)


def wait_for_shutdown(state_dir: str, app_id: str, coord: str, max_s: float) -> None:
    """Start an app and report when another instance's SHUTDOWN_APPLICATION reaches it."""
    app = StreamsApp(StoreTopology(consistency_specs(1)), app_id, state_dir, coordination_base=coord,
                     shutdown_poll_s=0.05)
    app.start()
    print(app.state.value, flush=True)
    reached = app._fsm.wait_for({State.ERROR}, max_s)
    print(app.state.value if reached else "TIMEOUT", flush=True)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "write":
        write_batches(args[0], args[1], int(args[2]), int(args[3]), float(args[4]))
    elif cmd == "wait-shutdown":
        wait_for_shutdown(args[0], args[1], args[2], float(args[3]))
    else:
        raise SystemExit(f"unknown command {cmd}")
