"""Gateway.open in another process reads the store files while this process keeps writing them.

Every row the reader sees must agree with the position reported beside it
(batch n writes value n at offset n), so a reader never mixes two batches
within a store partition and never goes backwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import make_app

ROOT = Path(__file__).resolve().parents[2]
COUNTERS = StoreSpec("counters", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT, nullable=False),
                     (Column("v", SqlType.BIGINT),), partitions=3, source_topics=("ticks",))
BATCHES = 40

READER = """
import json, sys, time
from gateway import Gateway
from stores import Position
g = Gateway.open(sys.argv[1])
print("ready", flush=True)
seen, bad, last = set(), 0, {}
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    res = g.sql("SELECT _partition, _position, v FROM counters")
    for part, pos, v in res.rows():
        off = Position.from_json(pos).offset("ticks", 0)
        if v != off or off < last.get(part, -1):
            bad += 1
        last[part] = off
        seen.add(off)
    if res.position.offset("ticks", 0) == int(sys.argv[2]):
        break
    time.sleep(0.002)
print(json.dumps({"bad": bad, "seen": sorted(seen), "final": res.position.offset("ticks", 0)}), flush=True)
"""


def test_reader_process_sees_whole_batches_while_the_app_writes(tmp_path: Path) -> None:
    app = make_app(tmp_path / "state", (COUNTERS,), app_id="ro-writes")
    app.start()
    try:
        w = app.writer("counters")
        w.write_batch(1, [Change(k, (1,)) for k in range(30)], Position.from_map({"ticks": {0: 1}}))
        proc = subprocess.Popen([sys.executable, "-c", READER, str(app.state_dir), str(BATCHES)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
            for n in range(2, BATCHES + 1):
                w.write_batch(n, [Change(k, (n,)) for k in range(30)], Position.from_map({"ticks": {0: n}}))
                time.sleep(0.03)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-2000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert report["bad"] == 0
        assert report["final"] == BATCHES
        assert len(report["seen"]) >= 2  # it really read while the batches were being written
    finally:
        app.close()
