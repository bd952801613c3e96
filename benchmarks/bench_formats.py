"""Memory while answering many rows, per output format (issue 14: every output streams).

For each of JSON, CSV, NDJSON and Arrow IPC over HTTP, the PostgreSQL port, and the in-process DB-API
(``fetchmany``), a fresh read-only worker (``iqgate serve --state-dir --workers 1``, or a Python process
holding ``Gateway.open``) answers ``SELECT *`` of 300k rows; the figure is how much its peak RSS (VmHWM)
grew over its RSS right before (goal <= 100 MB each), read by a client that keeps nothing. The baseline
is that RSS before. A format built whole in memory grows by hundreds of MB at this size.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_scans import IQGATE, ROOT, _fill, _post, _start, _stop
from benchmarks.common import Figure
from benchmarks.procs import free_port, status_kb, wait_http

__all__ = ["run"]

HTTP_FORMATS = {"JSON": "application/json", "CSV": "text/csv", "NDJSON": "application/x-ndjson",
                "Arrow IPC": "application/vnd.apache.arrow.stream"}

_DBAPI_CHILD = r"""
import sys
from pathlib import Path
from gateway import Gateway
from iqgate_client.dbapi import connect

def kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])

gw = Gateway.open(sys.argv[1])
con = connect(gateway=gw)
cur = con.cursor()
cur.execute("SELECT * FROM bench_scan WHERE id < 2000")
cur.fetchall()
before = kb("VmRSS")
cur.execute(f"SELECT * FROM bench_scan WHERE id < {int(sys.argv[2])}")
n = 0
while True:
    rows = cur.fetchmany(1000)
    if not rows:
        break
    n += len(rows)
print(before, kb("VmHWM"), n)
"""


def _http_growth(state: Path, sql: str, accept: str) -> tuple[float, float, int]:
    proc, port = _start(state, 1)
    try:
        _post(port, "SELECT * FROM bench_scan WHERE id < 2000", accept=accept)  # warm this format's path
        before = status_kb(proc.pid, "VmRSS")
        size = _post(port, sql, accept=accept)
        return before / 1024, (status_kb(proc.pid, "VmHWM") - before) / 1024, size
    finally:
        _stop(proc)


def _pg_growth(state: Path, sql: str) -> tuple[float, float, int]:
    import psycopg

    http, pg = free_port(), free_port()
    proc = subprocess.Popen(IQGATE + ["serve", "--state-dir", str(state), "--port", str(http), "--workers", "1",
                                      "--pg-port", str(pg)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_http(proc, http)
        with psycopg.connect(host="127.0.0.1", port=pg, user="iqgate", dbname="iqgate", autocommit=True,
                             connect_timeout=30) as con:
            con.execute("SELECT * FROM bench_scan WHERE id < 2000").fetchall()
            before = status_kb(proc.pid, "VmRSS")
            n = sum(1 for _ in con.cursor().stream(sql))  # the client keeps nothing
            return before / 1024, (status_kb(proc.pid, "VmHWM") - before) / 1024, n
    finally:
        _stop(proc)


def _dbapi_growth(state: Path, rows: int) -> tuple[float, float, int]:
    out = subprocess.run([sys.executable, "-c", _DBAPI_CHILD, str(state), str(rows)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    before, peak, n = (int(x) for x in out.stdout.split())
    return before / 1024, (peak - before) / 1024, n


def run(quick: bool) -> list[Figure]:
    keys = 50_000 if quick else 300_000
    sql = f"SELECT * FROM bench_scan WHERE id < {keys}"
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    figures = []
    with tempfile.TemporaryDirectory(prefix="iqgate-bench-formats-") as d:
        state = Path(d) / "state"
        _fill(state, keys)
        for name, accept in HTTP_FORMATS.items():
            before, grew, size = _http_growth(state, sql, accept)
            figures.append(Figure(f"server growth answering {keys:,} rows as {name}", grew, "MB", before,
                                  "the worker's RSS before", "<= 100 MB", grew <= 100,
                                  f"{size / 2**20:.0f} MB read by the client in 64 KB pieces"))
        before, grew, n = _pg_growth(state, sql)
        figures.append(Figure(f"server growth answering {keys:,} rows on the PG port", grew, "MB", before,
                              "the worker's RSS before", "<= 100 MB", grew <= 100 and n == keys,
                              "psycopg cursor.stream(), rows not kept"))
        before, grew, n = _dbapi_growth(state, keys)
        figures.append(Figure(f"in-process DB-API growth fetching {keys:,} rows (fetchmany)", grew, "MB", before,
                              "the process's RSS before", "<= 100 MB", grew <= 100 and n == keys,
                              "Gateway.open + iqgate_client.dbapi.connect(gateway=…), fetchmany(1000)"))
    return figures


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
