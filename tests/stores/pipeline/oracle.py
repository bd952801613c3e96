"""The oracle: what each store must hold at a Position, computed by DuckDB over the log records up to it.

Also the readers that pull a whole store out through IQv2 queries, so the
comparison goes through the same API users query.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa

from stores import (
    MultiVersionedKeyQuery,
    Position,
    RangeQuery,
    State,
    StateQueryRequest,
    StreamsApp,
    TimestampedRangeQuery,
    WindowRangeQuery,
)
from stores.log.source import SourceLog

FOREVER = (-(2**62), 2**62)


def log_table(con: duckdb.DuckDBPyConnection, log: SourceLog, topic: str, position: Position,
              fields: tuple[str, ...], name: str) -> None:
    """Table ``name`` of the records of ``topic`` with offset <= position (key, fields, ts, partition, offset)."""
    rows = []
    for p in range(log.partitions(topic)):
        last = position.offset(topic, p)
        if last is None:
            continue
        for r in log.read(topic, p, 0, last + 1):
            v = r.value or {}
            rows.append((r.key, *[v.get(f) for f in fields], r.value is None, r.timestamp, p, r.offset))
    cols = ", ".join(["key VARCHAR"] + [f"{f} {t}" for f, t in _types(fields)] +
                     ["tombstone BOOLEAN", "ts BIGINT", "part INTEGER", "off BIGINT"])
    con.execute(f"CREATE OR REPLACE TABLE {name} ({cols})")
    if rows:  # through Arrow: executemany runs one statement per row (minutes for tens of thousands on a busy machine)
        names = ["key", *fields, "tombstone", "ts", "part", "off"]
        con.register(f"{name}_rows", pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}))
        con.execute(f"INSERT INTO {name} SELECT * FROM {name}_rows")
        con.unregister(f"{name}_rows")


def _types(fields: tuple[str, ...]) -> list[tuple[str, str]]:
    known = {"amount": "DOUBLE", "item": "VARCHAR", "name": "VARCHAR", "age": "BIGINT"}
    return [(f, known[f]) for f in fields]


# Liveness deadlines, not speed checks: a condition is awaited until it holds, so a longer deadline costs
# nothing when things work; it only spares a loaded CI machine (2 cores, Spark restarting queries) a false
# failure. IQGATE_TEST_PATIENCE=1 gives the deadlines as written.
PATIENCE = float(os.environ.get("IQGATE_TEST_PATIENCE", "2"))


def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    timeout_s *= PATIENCE
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.05) + 1):
        if cond():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


def wait_for_state(app: Any, state: State, timeout_s: float = 90.0) -> None:
    wait_until(lambda: app.state is state or app.state.has_completed_shutdown(), f"state {state}", timeout_s)
    assert app.state is state, f"app is {app.state}, expected {state}"


def caught_up(app: Any, log: SourceLog, stores: tuple[str, ...]) -> bool:
    pos = app.positions()
    for s in stores:
        for t in app.catalog()[s].source_topics:
            for p, o in log.last_offsets(t).items():
                if pos[s].offset(t, p) is None or pos[s].offset(t, p) < o:
                    return False
    return True


def _all(app: Any, store: str, query: Any) -> tuple[Position, list[Any]]:
    res = app.query(StateQueryRequest.in_store(store).with_query(query))
    rows = []
    for p, qr in sorted(res.partition_results.items()):
        assert qr.is_success, f"{store} partition {p}: {qr.failure_reason} {qr.failure_message}"
        rows.extend(qr.result)
    return res.position, rows


def read_revenue(app: Any) -> tuple[Position, dict[str, tuple[float, int, int]]]:
    pos, rows = _all(app, "revenue", TimestampedRangeQuery.with_no_bounds())
    return pos, {kv.key: (round(kv.value.value.revenue, 6), kv.value.value.orders, kv.value.timestamp) for kv in rows}


def expected_revenue(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[float, int, int]]:
    q = "SELECT key, round(sum(amount), 6), count(*), max(ts) FROM orders_log GROUP BY key"
    return {k: (s, n, t) for k, s, n, t in con.execute(q).fetchall()}


def read_per_min(app: Any) -> tuple[Position, dict[tuple[str, int, int], tuple[float, int]]]:
    pos, rows = _all(app, "revenue_per_min", WindowRangeQuery.with_window_start_range(*FOREVER))
    return pos, {(kv.key.key, kv.key.window.start, kv.key.window.end): (round(kv.value.revenue, 6), kv.value.orders)
                 for kv in rows}


def expected_per_min(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, int, int], tuple[float, int]]:
    q = ("SELECT key, ts // 60000 * 60000 AS ws, round(sum(amount), 6), count(*) FROM orders_log "
         "GROUP BY key, ws")
    return {(k, ws, ws + 60000): (s, n) for k, ws, s, n in con.execute(q).fetchall()}


def read_history(app: Any, keys: list[str]) -> dict[str, list[tuple[float, str, int]]]:
    out = {}
    for k in keys:
        res = app.query(StateQueryRequest.in_store("last_order").with_query(
            MultiVersionedKeyQuery.with_key(k).with_ascending_timestamps()))
        recs = [r for qr in res.partition_results.values() if qr.is_success and qr.result is not None
                for r in qr.result]
        out[k] = [(r.value.amount, r.value.item, r.timestamp) for r in recs]
    return out


def expected_history(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[float, str, int]]]:
    """Versions by event time; of two records with one timestamp the later in the log wins."""
    q = ("SELECT key, amount, item, ts FROM (SELECT *, row_number() OVER (PARTITION BY key, ts ORDER BY off DESC) "
         "AS rn FROM orders_log) WHERE rn = 1 ORDER BY key, ts")
    out: dict[str, list[tuple[float, str, int]]] = {}
    for k, a, i, t in con.execute(q).fetchall():
        out.setdefault(k, []).append((a, i, t))
    return out


def read_profiles(app: Any) -> tuple[Position, dict[str, tuple[str, int]]]:
    pos, rows = _all(app, "profiles", RangeQuery.with_no_bounds())
    return pos, {kv.key: (kv.value.name, kv.value.age) for kv in rows}


def expected_profiles(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, int]]:
    q = ("SELECT key, name, age, tombstone FROM (SELECT *, row_number() OVER (PARTITION BY key ORDER BY off DESC) "
         "AS rn FROM profiles_log) WHERE rn = 1")
    return {k: (n, a) for k, n, a, dead in con.execute(q).fetchall() if not dead}


def check_all(app: Any, log: SourceLog, *, profiles: bool = True) -> dict[str, int]:
    """Compare every shop store with the oracle at the store's own Position; returns sizes for sanity checks."""
    con = duckdb.connect()
    pos, rev = read_revenue(app)
    log_table(con, log, "orders", pos, ("amount", "item"), "orders_log")
    assert rev == expected_revenue(con), "revenue differs from the oracle"
    pos2, per_min = read_per_min(app)
    log_table(con, log, "orders", pos2, ("amount", "item"), "orders_log")
    assert per_min == expected_per_min(con), "revenue_per_min differs from the oracle"
    want_hist = expected_history(con)
    assert read_history(app, sorted(want_hist)) == want_hist, "last_order differs from the oracle"
    prof: dict[str, Any] = {}
    if profiles:
        pos3, prof = read_profiles(app)
        log_table(con, log, "profiles", pos3, ("name", "age"), "profiles_log")
        assert prof == expected_profiles(con), "profiles differs from the oracle"
    return {"revenue": len(rev), "per_min": len(per_min), "orders": sum(n for _, n, _ in rev.values()),
            "profiles": len(prof)}


def first_load(topology: Any, source: SourceLog, application_id: str, state_dir: Any, stores: tuple[str, ...]
               ) -> StreamsApp:
    """Run a pipeline until it has caught up with ``source`` and close it: the "before" of an upgrade test."""
    app = StreamsApp(topology, application_id=application_id, state_dir=state_dir)
    app.start()
    wait_for_state(app, State.RUNNING, 240)  # a loaded machine: Python workers can take long
    wait_until(lambda: caught_up(app, source, stores), "the first load", 240)
    assert app.close(60)
    return app
