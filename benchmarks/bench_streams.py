"""Pull queries on streams (issue 51 item 2): a stream's records read from the embedded log into DuckDB.

Figures, each beside a baseline measured in the same run:

- a whole-topic scan (``SELECT count(*), sum(amount) FROM orders``: every record read, converted to Arrow and
  aggregated by DuckDB) in records/s, against reading the same records from the log alone (``EventLog.read_raw``:
  the checksums and the JSON parse, no conversion; the ceiling);
- a read narrowed by its WHERE (one partition's last 1,000 records: ``partition = 0 AND offset >= …``) in ms,
  against the whole-topic scan: what pushing partitions and offsets into the read saves;
- the peak RSS growth of a fresh process (``Gateway.open`` on the state dir, as a serving process reads) scanning
  the whole stream, against the log's size on disk: memory is a batch's, not the topic's (goal <= 100 MB).

Every wait is bounded; the scratch directory is removed at exit.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Figure, scratch_dir

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]
QUICK, FULL = 200_000, 1_000_000
PARTITIONS = 4
SCAN = "SELECT count(*), sum(amount) FROM orders"


def _fill(root: Path, records: int) -> tuple[object, Path]:
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.catalog.schema import Column, SqlType
    from stores.catalog.streams import StreamSpec
    from stores.log.eventlog import EventLog

    log = EventLog(root / "log")
    log.create_topic("orders", partitions=PARTITIONS)
    rng = random.Random(51)
    step = 50_000
    for lo in range(0, records, step):
        log.append_batch("orders", [(f"c{rng.randrange(10_000):05d}",
                                     {"amount": round(rng.uniform(1, 200), 2), "item": rng.choice(["pen", "mug"])},
                                     1_700_000_000_000 + i) for i in range(lo, min(records, lo + step))])
    spec = StreamSpec("orders", "orders", Column("key", SqlType.VARCHAR),
                      (Column("amount", SqlType.DOUBLE), Column("item", SqlType.VARCHAR)), partitions=PARTITIONS)
    state = root / "state"
    app = StreamsApp(StoreTopology([], streams=[spec], log=log), application_id="bench-streams", state_dir=state)
    app.start()
    app.close(30)  # the state dir keeps stream.json and app.json (where the log is): any process can read it
    return log, state


def _peak_growth_mb(state: Path, records: int) -> float:
    code = ("import sys; sys.path.insert(0, %r)\n"
            "def hwm():\n"
            "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
            "from gateway import Gateway\n"
            "gw = Gateway.open(%r)\n"
            "gw.sql('SELECT count(*) FROM orders WHERE partition = 0 AND offset < 10').rows()\n"
            "before = hwm()\n"
            "assert gw.sql(%r).rows()[0][0] == %d\n"
            "print(hwm() - before)\n" % (str(ROOT), str(state), SCAN, records))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def run(quick: bool = False) -> list[Figure]:
    from gateway import Gateway

    records = QUICK if quick else FULL
    root = scratch_dir("iqgate-bench-streams-")
    log, state = _fill(root, records)
    started = time.perf_counter()
    read = sum(1 for p in range(PARTITIONS) for _ in log.read_raw("orders", p, 0))  # type: ignore[attr-defined]
    raw_s = time.perf_counter() - started
    assert read == records
    gw = Gateway.open(state)
    try:
        started = time.perf_counter()
        assert gw.sql(SCAN).rows()[0][0] == records
        scan_s = time.perf_counter() - started
        last = log.end_offsets("orders")[0]  # type: ignore[attr-defined]
        narrowed = f"SELECT count(*), sum(amount) FROM orders WHERE partition = 0 AND offset >= {last - 1000}"
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            assert gw.sql(narrowed).rows()[0][0] == 1000
            samples.append(time.perf_counter() - started)
        narrow_s = sorted(samples)[len(samples) // 2]
    finally:
        gw.close()
    growth = _peak_growth_mb(state, records)
    log_mb = sum(f.stat().st_size for f in (root / "log").rglob("*.rec")) / 2**20
    return [
        Figure("stream scan into DuckDB (SELECT count(*), sum(amount) FROM orders)", records / scan_s, "records/s",
               records / raw_s, "the log alone (EventLog.read_raw of every record)", ">= 0.4x",
               met=raw_s / scan_s >= 0.4),
        Figure("narrowed read: one partition's last 1,000 records (partition = 0 AND offset >= …)", narrow_s * 1000,
               "ms", scan_s * 1000, "the whole-topic scan", "<= 0.05x", met=narrow_s <= 0.05 * scan_s),
        Figure("peak RSS growth of a process scanning the whole stream", growth, "MB", log_mb,
               "the log's records on disk", "<= 100 MB", met=growth <= 100),
    ]


if __name__ == "__main__":
    for f in run(quick="--quick" in sys.argv):
        ratio = "" if f.ratio is None else f" ({f.ratio:.3g}x {f.baseline_name})"
        print(f"{f.name}: {f.value:,.1f} {f.unit}{ratio}  goal {f.goal}")
