"""A read-only serving worker allocates Arrow buffers with malloc in few arenas (issue 14 item 2).

Threads taking turns at scans otherwise each kept their high-water mark
(pyarrow's mimalloc keeps a thread's freed pages for that thread):
gateway.serving.http_server.lean_allocators says what it measured.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_lean_worker_allocates_arrow_buffers_with_malloc() -> None:
    code = ("import pyarrow as pa\n"
            "before = pa.default_memory_pool().backend_name\n"
            "from gateway.serving.http_server import lean_allocators\n"
            "lean_allocators()\n"
            "t = pa.table({'x': pa.array(range(100_000))})\n"
            "assert pa.compute.sum(t['x']).as_py() == 4_999_950_000\n"
            "print(before, pa.default_memory_pool().backend_name, pa.total_allocated_bytes() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after, allocated = out.stdout.split()
    assert before != "system" and (after, allocated) == ("system", "True")
