"""One command for every benchmark: ``python -m benchmarks.run [--quick] [--out FILE]``.

Prints one table — figure, iqgate's value, the baseline measured in the same
run, the ratio, the goal — and writes the same as JSON. Goals are reported,
never enforced: the numbers drift on shared machines, the ratios much less.
A benchmark that crashes makes the command fail, so the scripts cannot rot.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Figure

# Order: cheap in-process figures first, Spark last.
MODULES = (
    "benchmarks.bench_stores",
    "benchmarks.bench_history",
    "benchmarks.bench_planner",
    "benchmarks.bench_access",
    "benchmarks.bench_grants",
    "benchmarks.bench_gateway",
    "benchmarks.bench_duck",
    "benchmarks.bench_live",
    "benchmarks.bench_pg",
    "benchmarks.bench_flight",
    "benchmarks.bench_scans",
    "benchmarks.bench_streams",
    "benchmarks.bench_formats",
    "benchmarks.bench_dbapi",
    "benchmarks.bench_replicas",
    "benchmarks.bench_pipeline",
    "benchmarks.bench_joins",
    "benchmarks.bench_kafka",
    "benchmarks.bench_moment",
    "benchmarks.bench_statestore",
    "benchmarks.bench_memory",
    "benchmarks.bench_many_stores",
)


def machine() -> dict[str, object]:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "processor": platform.processor() or platform.machine(),
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v != v:  # NaN
        return "nan"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def render(figures: list[Figure]) -> str:
    head = ("figure", "iqgate", "unit", "baseline", "baseline is", "ratio", "goal", "met")
    rows = [head] + [
        (
            f.name, _fmt(f.value), f.unit, _fmt(f.baseline), f.baseline_name or "-",
            (_fmt(f.ratio) + "x") if f.ratio is not None else "-", f.goal or "-",
            {True: "yes", False: "NO", None: "-"}[f.met],
        )
        for f in figures
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def script(run_fn: Callable[..., list[Figure]], argv: list[str] | None = None) -> None:
    """The ``__main__`` of one benchmark module: ``python -m benchmarks.bench_x [--quick]``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes")
    args = ap.parse_args(argv)
    print(render(list(run_fn(quick=args.quick))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes; finishes in under 5 minutes on 2 cores")
    ap.add_argument("--only", action="append", default=[], help="run only modules whose name contains this")
    ap.add_argument("--out", default="benchmarks/results/latest.json", help="where to write the JSON")
    args = ap.parse_args(argv)

    figures: list[Figure] = []
    failed: list[str] = []
    started = time.time()
    for name in MODULES:
        if args.only and not any(o in name for o in args.only):
            continue
        t0 = time.perf_counter()
        print(f"== {name} ({'quick' if args.quick else 'full'}) ...", file=sys.stderr, flush=True)
        try:
            mod = importlib.import_module(name)
            got = list(mod.run(quick=args.quick))
        except Exception:  # noqa: BLE001 - report every broken benchmark, then fail
            traceback.print_exc()
            failed.append(name)
            continue
        figures += got
        print(f"   {len(got)} figures in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures.append(Figure("peak RSS of the benchmark process", peak_mb, "MB", note="includes Spark's Python side"))

    print(render(figures))
    report = {
        "mode": "quick" if args.quick else "full",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": machine(),
        "figures": [f.as_dict() for f in figures],
        "failed_modules": failed,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}", file=sys.stderr)
    if failed:
        print(f"benchmarks that crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
