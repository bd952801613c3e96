"""A SELECT's stream reads: each stream's records, read from its log as Arrow as DuckDB asks for them.

A stream scan (``planner.plan.StreamScan``) is read like a store scan: its
partitions are planned first (``StreamReader.slices``: which offsets, whether
the log has reached the statement's bound, whether the partition exists; a
bound past the log's end is NOT_UP_TO_BOUND at once, since no wait reaches it),
each partition's outcome is recorded as a store partition's is, and failed
partitions are the statement's error unless partial results were asked for.
Then the records flow log → Arrow → DuckDB in batches of ``scan_batch_rows``
(one RecordBatchReader over the partitions, pseudo-columns added), so memory
is a batch's whatever the topic's size. The statement's budget is checked
between batches; an answer closed early ends the read (a Kafka consumer).

The Position of what was read is, per topic partition, the last offset the
scan covered (``PartitionSlice.last``), merged into the answer's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from planner.plan import StreamScan
from stores.catalog.streams import StreamSpec
from stores.iqv2.position import Position
from stores.log.record_batches import stream_schema
from stores.log.stream_reader import PartitionSlice, StreamReader, StreamReadError

from .arrow_rows import PSEUDO_FIELDS, Failure, position_json
from .arrow_scans import _repeated_int32, _repeated_text, reads_once
from .errors import GatewayInternalError, NotSupported, StateStoreNotAvailableError, translate
from .guards import StatementWatch
from .outcomes import PartitionOutcome
from .scans import Waiting
from .sources import Capabilities

__all__ = ["StreamRead", "read_stream", "stream_relation_schema", "empty_stream_table"]

def stream_relation_schema(spec: StreamSpec) -> pa.Schema:
    """The relation a stream scan is bound as: the stream's columns, its record columns, the pseudo-columns."""
    return pa.schema(list(stream_schema(spec)) + list(PSEUDO_FIELDS))


def empty_stream_table(spec: StreamSpec) -> pa.Table:
    """The relation with no rows (what a statement's shape is described over)."""
    return stream_relation_schema(spec).empty_table()


@dataclass
class StreamRead:
    """One stream scan: its readable partitions, its failed ones, what it covered, and the open reads."""

    scan: StreamScan
    spec: StreamSpec
    reader: StreamReader
    slices: list[PartitionSlice]
    failures: list[Failure]
    position: Position
    batch_rows: int
    watch: StatementWatch
    _open: list[Iterator[pa.RecordBatch]] = field(default_factory=list)
    _closed: bool = False

    def schema(self) -> pa.Schema:
        return stream_relation_schema(self.spec)

    def bind(self, lease: Any, sql: str, *, tables: bool) -> None:
        """The relation on ``lease``: a stream DuckDB reads once, or a table when it is read more than once."""
        reader = self.relation()
        lease.bind(self.scan.relation, reader if not tables and reads_once(sql, self.scan.relation)
                   else reader.read_all())

    def relation(self) -> pa.RecordBatchReader:
        gen = self._batches()
        self._open.append(gen)
        return pa.RecordBatchReader.from_batches(self.schema(), gen)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        schema = self.schema()
        name = self.spec.name
        for part in self.slices:
            position = position_json(part.position)
            batches = self.reader.batches(part, self.scan.query, self.batch_rows)
            self._open.append(batches)
            try:
                for batch in batches:
                    if not self.watch.alive():
                        self.watch.trip(self.watch.reason or "timeout")
                        # an interrupt, so the statement fails with the watch's reason (duck.duck_error)
                        raise RuntimeError(f"INTERRUPT: {self.watch.error(f'reading stream {name!r}')}")
                    yield _with_pseudo(schema, batch, part.partition, position)
            except StreamReadError as exc:
                raise RuntimeError(f"reading stream {name!r}: {exc}") from None
            finally:
                batches.close()
        if self.scan.include_failures and self.failures:
            yield _failure_rows(schema, self.failures)

    def close(self) -> None:
        """End every read still open (a Kafka consumer per partition being read); idempotent."""
        if self._closed:
            return
        self._closed = True
        for gen in reversed(self._open):
            with contextlib.suppress(Exception):  # a generator DuckDB is still inside refuses: it ends with it
                gen.close()  # type: ignore[attr-defined]


def read_stream(caps: Capabilities, scan: StreamScan, spec: StreamSpec, bound: Position, batch_rows: int,
                waiting: Waiting | None, watch: StatementWatch,
                outcomes: dict[tuple[str, int], PartitionOutcome]) -> StreamRead:
    """Plan one stream scan's partitions and record their outcomes; the records are read later, as DuckDB asks for
    them. ``waiting`` (a statement that may wait for its bound) is only told why it did not."""
    make = caps.stream_reader
    if make is None:
        raise NotSupported(f"stream {scan.stream!r} cannot be read here: this source has no reader of streams "
                           "(a replica serves stores only)")
    try:
        reader = make(scan.stream)
    except StreamReadError as exc:
        raise StateStoreNotAvailableError(str(exc), retryable=False) from None
    except Exception as exc:  # noqa: BLE001 - an unknown stream (KIP-216's UnknownStateStore) and the like
        mapped = translate(exc)
        if mapped is None:
            raise GatewayInternalError(f"stream {scan.stream!r}: {type(exc).__name__}: {exc}") from exc
        raise mapped from exc
    slices = _slices(reader, scan, bound)
    if waiting is not None and any(_behind(s) for s in slices):
        # the log is the stream's source: a bound past its end is one waiting cannot reach, answered at once as
        # a store's is (scans.Waiting.beyond_the_end), never holding a worker
        waiting.note = (f"the bound is past the end of stream {scan.stream!r}'s log (a record no one has written "
                        "yet): waiting cannot reach it")
    position = Position.empty()
    ok: list[PartitionSlice] = []
    failures: list[Failure] = []
    for s in slices:
        pos = s.position
        if s.failure is None:
            ok.append(s)
            position = position.merge(pos)
        else:
            failures.append(Failure(scan.stream, s.partition, s.failure, s.message or "", None))
        outcomes[(scan.stream, s.partition)] = PartitionOutcome(
            scan.stream, s.partition, None if s.failure is None else s.failure.label, s.message, pos)
    return StreamRead(scan, spec, reader, ok, failures, position, batch_rows, watch)


def _slices(reader: StreamReader, scan: StreamScan, bound: Position) -> list[PartitionSlice]:
    try:
        return reader.slices(scan.query, bound)
    except StreamReadError as exc:
        raise StateStoreNotAvailableError(str(exc), retryable=True) from None


def _behind(s: PartitionSlice) -> bool:
    return s.failure is not None and s.failure.label == "NOT_UP_TO_BOUND"


def _with_pseudo(schema: pa.Schema, batch: pa.RecordBatch, partition: int, position: str | None) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = list(batch.columns)
    arrays.append(_repeated_int32(partition, n))
    arrays.append(_repeated_text(position, n))
    arrays.append(pa.nulls(n, pa.string()))
    arrays.append(pa.nulls(n, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _failure_rows(schema: pa.Schema, failures: list[Failure]) -> pa.RecordBatch:
    """One row per failed partition: data columns null but ``partition``, the pseudo-columns saying why."""
    n = len(failures)
    width = len(schema) - 4
    arrays = [pa.array([f.partition for f in failures], type=pa.int32()) if schema.field(i).name == "partition"
              else pa.nulls(n, schema.field(i).type) for i in range(width)]
    arrays.append(pa.array([f.partition for f in failures], type=pa.int32()))
    arrays.append(pa.array([position_json(f.position) for f in failures], type=pa.string()))
    arrays.append(pa.array([f.reason.label for f in failures], type=pa.string()))
    arrays.append(pa.array([f.message for f in failures], type=pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
