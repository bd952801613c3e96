"""The victim of the live feeds' kill -9 test: a pipeline-like writer of one store until killed.

``python writer_child.py <state_dir> <log_dir> <kind> <batches> <pause_s>``: opens the app over the embedded log
(changelogs on) and, from the smallest batch any partition applied + 1 (a restart replays a batch some
partitions already hold: the changelog writer applies its logged record there), writes the seeded workload's
batches through the pipeline's changelog writers, printing ``wrote <i>`` after each. Bounded by ``batches``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from stores.log.eventlog import EventLog  # noqa: E402
from tests.stores.live.workload import SPECS, open_app, source_position, workload  # noqa: E402


def main() -> None:
    state_dir, log_dir, kind, batches, pause = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(
        sys.argv[5])
    spec = SPECS[kind]
    app, writers = open_app(Path(state_dir), EventLog(log_dir), spec)
    changes = workload(kind, batches, seed=5)
    done = [app.partition_store(kind, p).last_batch_id() for p in range(spec.partitions)]
    start = 0 if any(d is None for d in done) else min(done) + 1  # type: ignore[type-var]
    print(f"started {start}", flush=True)
    for i in range(start, batches):
        writers.get(kind, None).write_batch(i, changes[i], source_position(i))
        print(f"wrote {i}", flush=True)
        time.sleep(pause)
    app.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
