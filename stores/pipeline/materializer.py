"""The foreachBatch sink: one micro-batch of changed rows → an Arrow change table + Position → the store writer.

Exactly-once effect rests on two facts from the checkpoint (spark-notes.md):
``offsets/<batch_id>`` is written before foreachBatch runs and a replay after
a crash reuses the same batch id with the same offsets. So the Position of a
batch is read from that file (exclusive end offsets minus one), and the
writer skips any batch id a partition has already applied.

The batch stays Arrow from Spark to the store: ``toArrow()``, a few vectorized
steps here (log order, tombstones, session ends), then the writer's columnar
path (engine/writer.py). No Python object per row.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..engine.batch import DELETED, KEY, TS, WE, WS, value_name
from ..iqv2.position import Position
from .side_state import SIDE_STATE_FILE
from .stream_rows import TOMBSTONE

log = logging.getLogger(__name__)

__all__ = [
    "read_batch_offsets", "position_from_offsets", "last_committed_batch", "BatchSink", "BatchTimes", "rows_to_table",
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

    if decl.shape in ("table_aggregate", "open_session", "join"):  # already projected by its declaration
        return [F.col(f"`{c}`") for c in decl.df.columns]
    types = dict(decl.df.dtypes)
    key_cols = getattr(decl, "key_cols", ()) or (decl.key_col,)
    if len(key_cols) > 1:  # a composite key: one struct, null when any part is (such rows are dropped, as null keys)
        parts = [F.col(f"`{k}`").alias(k) for k in key_cols]
        any_null = F.lit(False)
        for k in key_cols:
            any_null = any_null | F.col(f"`{k}`").isNull()
        cols: list[Any] = [F.when(any_null, F.lit(None)).otherwise(F.struct(*parts)).alias("__k")]
    else:
        cols = [F.col(decl.key_col).alias("__k")]
    for i, c in enumerate(decl.value_cols):
        col = F.col(f"`{c}`")
        cols.append((ms(col) if types[c].startswith("timestamp") else col).alias(f"__v{i}"))
    if decl.timestamp_col is not None:
        t = decl.timestamp_col
        cols.append((F.col(t) if types[t] == "bigint" else ms(t)).alias("__ts"))
    if decl.window_col is not None:
        cols.append(ms(F.col(decl.window_col)["start"]).alias("__ws"))
        cols.append(ms(F.col(decl.window_col)["end"]).alias("__we"))
    having = getattr(decl, "having", None)
    if having is not None:  # SQL's NULL does not qualify either
        cols.append(F.coalesce(F.expr(having), F.lit(False)).alias("__keep"))
    if decl.shape in ("latest", "versioned"):
        for c in ("topic", "partition", "offset"):
            if c in types:
                cols.append(F.col(c).alias(f"__{c}"))
        if getattr(decl, "tombstones", None) == "kafka":  # the record's value was null: a delete (Kafka's rule)
            cols.append(F.col(TOMBSTONE).alias("__tomb"))
    return cols


def rows_to_table(decl: Any, table: pa.Table, batch_ts: int | None) -> pa.Table:
    """The projected batch (Arrow) → the writer's change table (engine/batch.py), in the order the store applies it.

    ``latest``: every record in log order, so the last one of a key wins;
    a tombstone (``__tomb``: the record's value was null) deletes, or with
    ``tombstones="all_null"`` (no ``__tomb``) a record whose values are all
    null (a store without value columns then never deletes).
    ``versioned``: every record with a timestamp in log order (of two
    versions with one timestamp the later record wins), tombstones by the
    same rule. Aggregates: one change per emitted row, record time the
    ``timestamp`` column's or else the batch's. Rows without a key are
    dropped, as Kafka Streams drops null-key records.
    """
    names = table.column_names
    if decl.shape == "open_session":  # update-mode sessions: changed sessions and deletes of merged-away ones
        return _open_session_table(decl, table)
    latest = decl.shape in ("latest", "versioned")
    if latest and "__offset" in names:
        order = [(c, "ascending") for c in ("__topic", "__partition", "__offset") if c in names]
        table = table.take(pc.sort_indices(table, order))
    n = len(table)
    values = {value_name(i): table.column(f"__v{i}") for i in range(len(decl.value_cols))}
    if "__ts" in names:
        ts = table.column("__ts")
    else:
        ts = pa.nulls(n, pa.int64()) if batch_ts is None else pa.array(np.full(n, batch_ts, dtype=np.int64))
    cols: dict[str, Any] = {KEY: table.column("__k"), **values, TS: ts}
    if "__ws" in names:
        cols[WS] = table.column("__ws")
        we = table.column("__we")
        spec = getattr(decl, "spec", None)
        if decl.shape == "session" and spec is not None and spec.gap_ms:
            # Spark's session end is last event + gap; Kafka's (and our stores') is the last event
            we = pc.subtract(we, pa.scalar(spec.gap_ms, we.type))
        cols[WE] = we
    keep = pc.is_valid(cols[KEY])
    if latest and "__tomb" in names:
        cols[DELETED] = pc.fill_null(table.column("__tomb"), False)
    elif latest:
        cols[DELETED] = (_all_null(list(values.values()), n) if values
                         else pa.array(np.zeros(n, dtype=bool)))
    elif "__keep" in names:  # an aggregate row that fails the HAVING filter deletes its key (a tombstone)
        cols[DELETED] = pc.invert(table.column("__keep"))
    if decl.shape == "versioned":
        keep = pc.and_(keep, pc.is_valid(ts))
    out = pa.table(cols)
    return out if pc.all(keep).as_py() else out.filter(keep)


def _open_session_table(decl: Any, table: pa.Table) -> pa.Table:
    """The session step's rows (``k, ws, we, cnt, s0…, deleted``) → the session store's change table."""
    n = len(decl.spec.values)
    cols: dict[str, Any] = {KEY: table.column("k"), WS: table.column("ws"), WE: table.column("we"),
                            TS: table.column("we"), value_name(0): table.column("cnt")}
    for i in range(1, n):
        cols[value_name(i)] = table.column(f"s{i - 1}")
    cols[DELETED] = pc.fill_null(table.column("deleted"), False)
    out = pa.table(cols)
    keep = pc.is_valid(out.column(KEY))
    return out if pc.all(keep).as_py() is not False else out.filter(keep)


def rows_to_empty(decl: Any) -> pa.Table:
    """An empty change table of the store: the batch's Position and id are recorded even with nothing to write."""
    cols: dict[str, Any] = {KEY: pa.array([], _KEY_INPUT.get(decl.spec.key.type.value, pa.string()))}
    for i in range(len(decl.spec.values)):
        cols[value_name(i)] = pa.nulls(0)
    return pa.table(cols)


_KEY_INPUT = {"BIGINT": pa.int64(), "INTEGER": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
              "TIMESTAMP": pa.int64(), "DATE": pa.int64(), "BLOB": pa.binary()}


def open_driver(decl: Any, checkpoint: Path) -> Any:
    """The driver side of ``decl`` over the side state in ``checkpoint`` (a table aggregate's, or a join's)."""
    from .join_state import JoinState, JoinStatePlan
    from .table_aggregate import AggregatePlan, TableAggregator

    plan = decl.driver_plan
    if isinstance(plan, AggregatePlan):
        return TableAggregator(plan, checkpoint / SIDE_STATE_FILE)
    if isinstance(plan, JoinStatePlan):
        return JoinState(plan, checkpoint / SIDE_STATE_FILE)
    raise TypeError(f"store {decl.spec.name!r}: no driver for {type(plan).__name__}")


def _all_null(columns: list[Any], n: int) -> Any:
    acc = pc.is_null(columns[0])
    for c in columns[1:]:
        acc = pc.and_(acc, pc.is_null(c))
    return acc


@dataclass(frozen=True)
class BatchTimes:
    """When one batch reached each step of the sink (``time.perf_counter()``), and the Position it wrote.

    ``started``: foreachBatch was called (Spark has planned the batch and written its offsets, not yet run its
    job); ``collected``: Spark's job ran and its rows are here as Arrow; ``written``: the store (and its
    changelog) committed the batch, so a read bounded by ``position`` succeeds from then on.
    """

    batch_id: int
    started: float
    collected: float
    written: float
    position: Position


class BatchSink:
    """The foreachBatch function of one store's query, whose streaming frame is ``frame()``.

    ``on_applied(store, batch_id, position)`` tells the runtime how far the
    store has got (for the RUNNING criterion) after each successful write.
    """

    def __init__(self, decl: Any, checkpoint: Path, writer: Callable[[], Any],
                 on_applied: Callable[[str, int, Position], None]) -> None:
        self.decl = decl
        self.checkpoint = checkpoint
        self._writer = writer
        self._on_applied = on_applied
        self.last_batch_seconds = 0.0
        self._driver: Any = None  # a table aggregate's or a join's driver side (its side state), opened on first use

    def frame(self) -> DataFrame:
        """The store's DataFrame projected to the columns the sink reads, for ``writeStream``.

        Why in the streaming plan and not per batch: a ``select`` on each batch's
        DataFrame is analysed by Spark anew every batch (~4 ms of py4j and
        analysis on 2 cores: ~1.5% of a small batch's freshness, issue 22).
        A projection after the stateful operator leaves its state as it is.
        """
        return self.decl.df.select(*_projection(self.decl))

    def driver(self) -> Any:
        """The driver side of a store kept in side state (table aggregates, joins), on this checkpoint."""
        if self._driver is None:
            self._driver = open_driver(self.decl, self.checkpoint)
        return self._driver

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        sources, batch_ts = read_batch_offsets(self.checkpoint, batch_id)
        position = position_from_offsets(sources)
        # Always run the batch: the stateful operator commits its state only when the plan executes.
        table = batch_df.toArrow()
        t1 = time.perf_counter()
        writer = self._writer()
        if self.decl.driver_plan is not None:
            rows = self.driver().apply(batch_id, table, batch_ts)
        else:
            rows = rows_to_table(self.decl, table, batch_ts)
        if rows is not None:
            writer.write_table(batch_id, rows, position)
        else:  # nothing to change (or already applied): the Position still advances
            writer.write_table(batch_id, rows_to_empty(self.decl), position)
        t2 = time.perf_counter()
        self.last_batch_seconds = t2 - t0
        # ``extra``: the batch's moments and Position, for whoever breaks freshness down (the pipeline benchmark:
        # append -> batch start -> Spark's job done -> written -> visible); no log record without debug logging
        log.debug("store %s batch %d: %d rows; Spark job + toArrow %.3f s, store write %.3f s", self.decl.spec.name,
                  batch_id, len(table), t1 - t0, t2 - t1,
                  extra={"batch_times": BatchTimes(batch_id, t0, t1, t2, position)})
        self._on_applied(self.decl.spec.name, batch_id, position)
