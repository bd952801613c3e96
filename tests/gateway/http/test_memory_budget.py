"""One hostile statement cannot take the server's memory: a real ``iqgate serve`` process, its RSS watched.

Before the budget, a self-join on a 300k-key store grew a server to 24 GB and the kernel killed it. Here the
server runs with ``--max-memory 256MB``; statements over it fail with OUT_OF_MEMORY (507) or are refused
before they run (STATEMENT_TOO_LARGE), the server keeps answering, and its peak RSS grows by no more than
the budget (plus the scans it legitimately reads).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stores import Column, Position, SqlType, StoreKind, StoreSpec, StoreTopology, StreamsApp
from stores.engine.change import Change
from tests.gateway.gwfixtures import Http

ROOT = Path(__file__).resolve().parents[3]
BUDGET_MB = 256


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) // 1024  # MB
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Http, int]]:
    state = tmp_path_factory.mktemp("memory") / "state"
    spec = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR),
                     (Column("revenue", SqlType.DOUBLE),), partitions=2, source_topics=("orders",))
    app = StreamsApp(StoreTopology([spec]), application_id="memory-budget", state_dir=state, synchronous="NORMAL")
    app.start()
    app.writer("revenue").write_batch(0, [Change(f"customer-{i:06d}", (float(i),)) for i in range(20_000)],
                                      Position.from_map({"orders": {0: 1}}))
    app.close(10)
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state), "--port", "0",
                             "--max-memory", f"{BUDGET_MB}MB", "--statement-timeout-ms", "60000", "--workers", "1"],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for _ in range(20):  # the serving line comes after a few informational ones
            lines.append(proc.stderr.readline())
            m = re.search(r"on (http://127\.0\.0\.1:\d+)", lines[-1])
            if m or not lines[-1]:
                break
        assert m, f"the server did not start: {''.join(lines)}"
        yield Http(m.group(1)), proc.pid
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.mark.parametrize(("sql", "status", "code"), [
    ("SELECT list_sum(range(100000000))", 400, "STATEMENT_TOO_LARGE"),
    ("SELECT count(DISTINCT a.customer || b.customer) FROM revenue a, revenue b", 507, "OUT_OF_MEMORY"),
    ("SELECT string_agg(a.customer || b.customer, ',') FROM revenue a, revenue b", 507, "OUT_OF_MEMORY"),
])
def test_a_statement_over_budget_fails_and_the_server_stays_healthy(server: tuple[Http, int], sql: str,
                                                                    status: int, code: str) -> None:
    http, pid = server
    assert http.sql("SELECT count(*) FROM revenue")[0] == 200  # warm: scans and DuckDB loaded
    before = _status(pid)
    got, _, body = http.sql(sql)
    assert got == status and body["error"]["code"] == code, body
    after = _status(pid)
    assert after["VmHWM"] - before["VmHWM"] <= BUDGET_MB + 200, (before, after)
    ok, _, body = http.sql("SELECT count(*) FROM revenue")
    assert ok == 200 and body["rows"] == [[20_000]]
    deadline = time.monotonic() + 10
    while _status(pid)["VmRSS"] > before["VmRSS"] + 150 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _status(pid)["VmRSS"] <= before["VmRSS"] + 150, json.dumps((before, _status(pid)))
