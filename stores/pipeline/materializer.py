"""The foreachBatch sink: one micro-batch of changed rows → Changes + Position → the store writer.

Exactly-once effect rests on two facts from the checkpoint (spark-notes.md):
``offsets/<batch_id>`` is written before foreachBatch runs and a replay after
a crash reuses the same batch id with the same offsets. So the Position of a
batch is read from that file (exclusive end offsets minus one), and the
writer skips any batch id a partition has already applied.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..engine.change import Change
from ..iqv2.position import Position

__all__ = [
    "read_batch_offsets", "position_from_offsets", "last_committed_batch", "BatchSink", "rows_to_changes",
]


def read_batch_offsets(checkpoint: str | Path, batch_id: int) -> tuple[list[dict[str, Any]], int | None]:
    """(source offsets, batch trigger time ms) of ``batch_id`` from the checkpoint's offsets log.

    The file is ``v1`` / metadata JSON / one line per source (``-`` when a
    source has no offset yet).
    """
    path = Path(checkpoint) / "offsets" / str(batch_id)
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise ValueError(f"{path}: not a Spark offsets log entry")
    meta = json.loads(lines[1])
    sources = [json.loads(line) for line in lines[2:] if line.strip() and line.strip() != "-"]
    return sources, meta.get("batchTimestampMs")


def position_from_offsets(sources: Iterable[Mapping[str, Any]]) -> Position:
    """Spark's exclusive end offsets (iqlog's or Kafka's ``{topic: {"p": end}}``) → last applied offsets.

    Keys that are not topics (iqlog's ``@epochs``) are skipped; a partition
    with nothing read (end 0) or a Kafka sentinel (negative) gets no entry.
    """
    raw: dict[str, dict[int, int]] = {}
    for src in sources:
        if not isinstance(src, Mapping):
            raise ValueError(f"source offsets must be a JSON object, got {src!r}")
        for topic, parts in src.items():
            if topic.startswith("@") or not isinstance(parts, Mapping):
                continue
            for p, end in parts.items():
                end = int(end)
                if end > 0:
                    cur = raw.setdefault(topic, {}).get(int(p), -1)
                    raw[topic][int(p)] = max(cur, end - 1)
    return Position.from_map(raw)


def last_committed_batch(checkpoint: str | Path) -> int | None:
    """The highest batch id in ``commits/`` (None if the query never committed a batch)."""
    d = Path(checkpoint) / "commits"
    if not d.is_dir():
        return None
    ids = [int(p.name) for p in d.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


def _projection(decl: Any) -> list[Any]:
    """Select the key, values and times with timestamps as epoch ms, so Arrow → Python is cheap and tz-free."""
    def ms(col: Any) -> Any:
        c = F.col(col) if isinstance(col, str) else col
        return F.when(c.isNull(), F.lit(None)).otherwise(F.unix_millis(c.cast("timestamp")))

    types = dict(decl.df.dtypes)
    cols: list[Any] = [F.col(decl.key_col).alias("__k")]
    for i, c in enumerate(decl.value_cols):
        col = F.col(f"`{c}`")
        cols.append((ms(col) if types[c].startswith("timestamp") else col).alias(f"__v{i}"))
    if decl.timestamp_col is not None:
        t = decl.timestamp_col
        cols.append((F.col(t) if types[t] == "bigint" else ms(t)).alias("__ts"))
    if decl.window_col is not None:
        cols.append(ms(F.col(decl.window_col)["start"]).alias("__ws"))
        cols.append(ms(F.col(decl.window_col)["end"]).alias("__we"))
    if decl.shape in ("latest", "versioned"):
        for c in ("topic", "partition", "offset"):
            if c in types:
                cols.append(F.col(c).alias(f"__{c}"))
    return cols


def rows_to_changes(decl: Any, data: Mapping[str, list[Any]], batch_ts: int | None) -> list[Change]:
    """Column lists (from Arrow) → Changes in the order the store must apply them.

    ``latest``: one change per key, the last record in log order; all-null
    values delete. ``versioned``: every record in log order (so of two
    versions with one timestamp the later record wins), all-null values as
    tombstones. Aggregates: one change per emitted row.
    """
    keys = data["__k"]
    n = len(keys)
    nv = len(decl.value_cols)
    vals = [data[f"__v{i}"] for i in range(nv)]
    ts = data.get("__ts")
    ws, we = data.get("__ws"), data.get("__we")
    spec = getattr(decl, "spec", None)
    gap = spec.gap_ms if decl.shape == "session" and spec is not None else None
    rows = range(n)
    if decl.shape in ("latest", "versioned") and "__offset" in data:
        tp, pp, op = data.get("__topic"), data["__partition"], data["__offset"]
        rows = sorted(rows, key=lambda i: (tp[i] if tp else "", pp[i], op[i]))
    out: list[Change] = []
    for i in rows:
        value: tuple[Any, ...] | None = tuple(v[i] for v in vals)
        if decl.shape in ("latest", "versioned") and all(x is None for x in value):  # type: ignore[union-attr]
            value = None
        t = ts[i] if ts is not None else batch_ts
        end = we[i] if we else None
        if gap and end is not None:
            end -= gap  # Spark's session end is last event + gap; Kafka's (and our stores') is the last event
        out.append(Change(keys[i], value, t, ws[i] if ws else None, end))
    if decl.shape == "latest":
        last: dict[Any, Change] = {}
        for ch in out:
            last.pop(ch.key, None)
            last[ch.key] = ch
        out = list(last.values())
    elif decl.shape == "versioned":
        out = [c for c in out if c.key is not None and c.timestamp is not None]
    return [c for c in out if c.key is not None]


class BatchSink:
    """The foreachBatch function of one store's query.

    ``on_applied(store, batch_id, position)`` tells the runtime how far the
    store has got (for the RUNNING criterion) after each successful write.
    """

    def __init__(self, decl: Any, checkpoint: Path, writer: Callable[[], Any],
                 on_applied: Callable[[str, int, Position], None]) -> None:
        self.decl = decl
        self.checkpoint = checkpoint
        self._writer = writer
        self._on_applied = on_applied
        self._projection = _projection(decl)
        self.last_batch_seconds = 0.0

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        sources, batch_ts = read_batch_offsets(self.checkpoint, batch_id)
        position = position_from_offsets(sources)
        # Always run the batch: the stateful operator commits its state only when the plan executes.
        table = batch_df.select(*self._projection).toArrow()
        data = {name: table.column(name).to_pylist() for name in table.column_names}
        changes = rows_to_changes(self.decl, data, batch_ts)
        self._writer().write_batch(batch_id, changes, position)
        self.last_batch_seconds = time.perf_counter() - t0
        self._on_applied(self.decl.spec.name, batch_id, position)
