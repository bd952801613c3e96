"""``iqgate serve`` as a real process for tests: started with the caller's flags, its HTTP URL and PG port read from
what it prints, stopped at the end (the tests of early ends and of served streams share it)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from benchmarks.procs import stop_serve

__all__ = ["served_process"]

ROOT = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def served_process(state: Path, err: Path, flags: Sequence[str]) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """``iqgate serve --state-dir STATE --port 0 --pg-port 0 FLAGS`` (stderr to ``err``): (process, url, pg port)
    once both ports are printed (60 s at most); terminated when the block ends."""
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state),
                                 "--port", "0", "--pg-port", "0", *flags],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f, text=True)
    try:
        url = pg = None
        deadline = time.monotonic() + 60
        while (url is None or pg is None) and time.monotonic() < deadline and proc.poll() is None:
            text = err.read_text()
            m = re.search(r"on (http://127\.0\.0\.1:\d+) \(", text)
            p = re.search(r"PostgreSQL protocol on 127\.0\.0\.1:(\d+)", text)
            url, pg = (m.group(1) if m else None), (int(p.group(1)) if p else None)
            time.sleep(0.1)
        assert url and pg, err.read_text()[-3000:]
        yield proc, url, pg
    finally:
        stop_serve(proc)
