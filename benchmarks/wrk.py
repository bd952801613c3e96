"""``wrk`` (Debian package ``wrk``) as the benchmarks' HTTP load generator when it is installed.

Why: wrk is compiled and event-driven, so at a few thousand requests/s it
needs a small share of one core; a Python load generator on the same 2-core
machine takes CPU the server would use and its own GIL adds to the latency
it reports. CI has no wrk: callers keep a Python fallback (benchmarks.load).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

__all__ = ["WrkRun", "available", "run_wrk"]

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}

# round robin over the request bodies the caller gives (a Lua table), as POSTs of JSON
_POST_SCRIPT = """
local bodies = {__BODIES__}
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[(n % #bodies) + 1])
end
"""


@dataclass(frozen=True)
class WrkRun:
    """One wrk run: requests/s, latency percentiles in seconds, how many requests, how many not 2xx/3xx or failed."""

    rps: float
    p50: float
    p99: float
    requests: int
    errors: int


def available() -> bool:
    return shutil.which("wrk") is not None


def _seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if m is None:
        raise ValueError(f"wrk printed a latency I cannot read: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _lua_string(body: bytes) -> str:
    return '"' + body.decode().replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_wrk(url: str, connections: int, seconds: float, bodies: list[bytes] | None = None,
            threads: int = 1) -> WrkRun:
    """``wrk --latency`` against ``url`` for ``seconds``: GETs, or POSTs of ``bodies`` round robin."""
    script = None
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
            "--latency"]
    try:
        if bodies:
            with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
                f.write(_POST_SCRIPT.replace("__BODIES__", ", ".join(_lua_string(b) for b in bodies)))
                script = f.name
            args += ["-s", script]
        out = subprocess.run([*args, url], capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    finally:
        if script is not None:
            os.unlink(script)
    rps = float(re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"^\s+(\d+) requests in", out, re.M).group(1))  # type: ignore[union-attr]
    p50 = _seconds(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _seconds(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return WrkRun(rps, p50, p99, requests, errors)
