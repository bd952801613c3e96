"""The processes of ``test_batch_cuts``: a producer and the planners of several queries against one cut ledger.

A module of its own so that the spawned interpreters import only this (and the ledger), not the test module.
"""

from __future__ import annotations

import random
import time
from typing import Any

from stores.pipeline.batch_cuts import SharedCuts, batch_ends

__all__ = ["PARTS", "RUN_S", "appender", "planner"]

PARTS = 3  # partitions of the simulated topic
RUN_S = 2.0  # how long the planners plan, once every process is ready (spawned interpreters start slowly)


def appender(ends: Any, go: Any) -> None:
    """The producer: every ~2 ms up to 7 records in each partition (the log's ends, shared memory)."""
    rng = random.Random(1)
    go.wait()
    stop_at = time.time() + RUN_S + 0.2
    while time.time() < stop_at:
        with ends.get_lock():
            for p in range(PARTS):
                ends[p] += rng.randint(0, 7)
        time.sleep(0.002)


def planner(ledger_path: str, ends: Any, limit: int | None, from_zero: bool, go: Any, seed: int,
            out: Any) -> None:
    """One query's planner for ``RUN_S``: each batch's (start, end, log end seen, log end after)."""
    rng = random.Random(seed)
    cuts = SharedCuts(ledger_path, None, 0.5, "test")
    go.wait()
    stop_at = time.time() + RUN_S
    with ends.get_lock():
        start = {p: 0 if from_zero else ends[p] for p in range(PARTS)}
    batches = []
    while time.time() < stop_at:
        looked_at = time.time()
        with ends.get_lock():
            seen = {p: ends[p] for p in range(PARTS)}
        avail = {("orders", p): (start[p], seen[p]) for p in range(PARTS)}
        end = {int(p): e for p, e in batch_ends(["orders"], avail, limit, cuts, {"orders": "e1"},
                                                 looked_at)["orders"].items()}
        with ends.get_lock():
            after = {p: ends[p] for p in range(PARTS)}
        batches.append((start, end, seen, after))
        start = end
        time.sleep(rng.uniform(0.0, 0.02))  # a batch's work
    cuts.close()
    out.put((limit, batches))
