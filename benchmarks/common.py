"""Shared pieces of the benchmark scripts: a figure row and timing helpers.

Every figure is printed next to a baseline measured in the same run, because
absolute times on shared 2-core machines drift; the ratio is what we track.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Figure", "time_calls", "percentile", "scratch_dir"]


def scratch_dir(prefix: str) -> Path:
    """A temporary directory removed when the benchmark process exits (gigabytes of logs and stores at full
    sizes: a machine that runs the benchmarks again and again must not fill its disk)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


@dataclass(frozen=True)
class Figure:
    """One row of the benchmark table.

    ``ratio`` is value/baseline; ``goal`` is human text such as "<= 20 us" or
    ">= 0.8x"; ``met`` says whether the goal holds (None when it cannot be told).
    """

    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str | None = None
    goal: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d


def percentile(samples: list[float], p: float) -> float:
    s = sorted(samples)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def time_calls(fn: Callable[[], Any], n: int, *, warmup: int = 100, max_seconds: float = 20.0) -> list[float]:
    """Per-call wall times in seconds; bounded by ``n`` calls and ``max_seconds``."""
    for _ in range(min(warmup, n)):
        fn()
    out: list[float] = []
    deadline = time.perf_counter() + max_seconds
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
        if t0 > deadline:
            break
    return out


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")
