"""Session windows visible while open (issue 16 item 4): update-mode sessions, merged as Kafka Streams merges them.

Spark's ``session_window`` only runs in append mode: a session reaches the
store once the watermark passes its end, while the store's Position already
covers the records in it — a read bounded at such a record's offset would
not see it. ksqlDB and Kafka Streams show a session as soon as its first
record arrives and update it with every record. This module does that with
one stateful operator keyed by the record key (``applyInPandasWithState``):

- the state is the key's sessions ``[start, end, count, slots…]`` (JSON text): per aggregate a sum, a
  running min or max, or an avg's sum and non-null count (sessions only grow and merge: nothing to retract);
- each record at time ``t`` joins every session with ``start - gap <= t <= end + gap``
  into one (``start``/``end`` are the first and last record times, as in Kafka);
- per batch the operator emits, per key, the sessions that are new or changed
  and a delete for every session that was merged away;
- foreachBatch writes those rows (upserts and tombstones) with the batch's Position.

So a Position covers exactly the records whose effect is in the store, for
open sessions too. Sessions older than ``retention_ms`` behind the key's
newest record are dropped from the operator's state (not from the store): a
record that late starts a new session, as a Kafka session store past its
retention would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["session_output_columns", "merge_sessions", "open_session_rows", "session_values"]


def session_output_columns(n_sums: int) -> list[str]:
    return ["k", "ws", "we", "cnt", *(f"s{i}" for i in range(n_sums)), "deleted"]


def _widths(functions: Sequence[str]) -> list[int]:
    return [2 if fn == "avg" else 1 for fn in functions]


def _slots(fn: str, v: Any) -> list[Any]:
    """One record's state slots for an aggregate: sum (the value), min/max (the value), avg (sum, non-null count)."""
    if fn == "sum":
        return [v if v is not None else 0]
    if fn == "avg":
        return [v if v is not None else 0, 0 if v is None else 1]
    return [v]


def _combine(fn: str, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    if fn in ("sum", "avg"):
        return [x + y for x, y in zip(a, b)]
    vals = [x for x in (a[0], b[0]) if x is not None]
    return [(min if fn == "min" else max)(vals) if vals else None]


def merge_sessions(sessions: list[list[Any]], events: Sequence[tuple[int, Sequence[Any]]], gap: int,
                   functions: Sequence[str] | None = None) -> list[list[Any]]:
    """Sessions ``[start, end, count, slots…]`` after the events ``(time, values)``, in time order.

    ``functions`` names each value's aggregate (default: all ``sum``): a sum or min/max has one slot, an avg
    two (its sum and non-null count). Pure, so it is tested without Spark: an event within ``gap`` of a
    session (either side) joins it, and sessions it bridges merge into one.
    """
    out = [list(s) for s in sessions]
    for t, vals in events:
        fns = list(functions) if functions is not None else ["sum"] * len(vals)
        widths = _widths(fns)
        joined = [s for s in out if s[0] - gap <= t <= s[1] + gap]
        merged = [t, t, 1, *[x for fn, v in zip(fns, vals) for x in _slots(fn, v)]]
        for s in joined:
            merged[0] = min(merged[0], s[0])
            merged[1] = max(merged[1], s[1])
            merged[2] += s[2]
            at = 3
            for fn, w in zip(fns, widths):
                merged[at:at + w] = _combine(fn, merged[at:at + w], s[at:at + w])
                at += w
            out.remove(s)
        out.append(merged)
    return sorted(out, key=lambda s: (s[0], s[1]))


def session_values(session: Sequence[Any], functions: Sequence[str]) -> list[Any]:
    """A session's state → its aggregate values (an avg is its sum over its non-null count, None when empty)."""
    out, at = [], 3
    for fn, w in zip(functions, _widths(functions)):
        if fn == "avg":
            total, n = session[at], session[at + 1]
            out.append(total / n if n else None)
        else:
            out.append(session[at])
        at += w
    return out


def open_session_rows(key: tuple[Any, ...], frames: Iterator[Any], state: Any, *, timestamp: str,
                      sums: Sequence[str], kinds: Sequence[str], gap: int, retention: int,
                      functions: Sequence[str] | None = None) -> Iterator[Any]:
    """The ``applyInPandasWithState`` function: the key's changed sessions and deletes of merged-away ones.

    ``sums`` are the aggregated columns (one per aggregate), ``functions`` their aggregates (default sum).
    """
    import pandas as pd

    fns = list(functions) if functions is not None else ["sum"] * len(sums)
    pdf = pd.concat(list(frames), ignore_index=True)
    pdf = pdf[pdf[timestamp].notna()]
    before = [list(s) for s in json.loads(state.get[0])] if state.exists else []
    times = pd.to_datetime(pdf[timestamp], utc=True).astype("int64") // 1_000_000
    events = []
    for i, t in enumerate(times.tolist()):
        vals = []
        for c, k in zip(sums, kinds):
            v = pdf[c].iloc[i]
            vals.append(None if v is None or v != v else (int(v) if k == "int" else float(v)))
        events.append((int(t), vals))
    events.sort(key=lambda e: e[0])
    after = merge_sessions(before, events, gap, fns)
    newest = max((s[1] for s in after), default=None)
    kept = [s for s in after if newest is None or s[1] >= newest - retention]
    if kept:
        state.update((json.dumps(kept),))
    else:
        state.remove()
    old = {(s[0], s[1]): s for s in before}
    new = {(s[0], s[1]): s for s in after}
    rows = []
    for ident, s in new.items():
        if old.get(ident) != s:
            rows.append((key[0], s[0], s[1], s[2], *session_values(s, fns), False))
    for ident in old.keys() - new.keys():
        rows.append((key[0], ident[0], ident[1], None, *([None] * len(sums)), True))
    yield pd.DataFrame(rows, columns=session_output_columns(len(sums)))
