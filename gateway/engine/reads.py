"""A SELECT's store reads: every scan's IQv2 requests run, their per-partition answers gathered, one owner.

``read_scans`` runs each ``StoreScan`` of a plan (``scans.run_scan``:
waiting for a position bound within the statement's budget), turns the
answers into the store relation's rows (``arrow_rows.collect``) and records
each partition's outcome. A range scan is read as Arrow streams
(``arrow_scans``): each partition's stream holds a read transaction until it
is read or closed, so the ``Reads`` that holds them is their one owner, and
``close()`` ends every snapshot however the statement ends. A stream's
records are read the same way, from its log (``stream_reads.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.plan import Plan, StoreScan
from stores.catalog.schema import StoreSpec
from stores.catalog.streams import streams_of
from stores.engine.arrow_reads import ArrowRows
from stores.iqv2.position import Position
from stores.iqv2.result import QueryResult

from .arrow_rows import ScanRows, StoreShapeMoved, collect
from .arrow_scans import as_arrow_requests, close_streams, reads_once, relation_reader, streamable
from .bounds import check_bound_topics
from .config import GatewayConfig
from .duck import Lease
from .errors import GatewayInternalError
from .guards import StatementWatch
from .moment import Moment, align, mark_unaligned, unaligned_error
from .outcomes import PartitionOutcome, partition_error, record_outcomes
from .scans import Answers, Waiting, run_scan
from .sources import Capabilities, Source
from .staleness import mark_stale
from .stream_reads import StreamRead, read_stream

__all__ = ["Reads", "read_scans", "statement_bound"]


@dataclass
class Reads:
    """What a statement read: per scan its rows (or streams), the merged Position, the partition outcomes."""

    scans: list[tuple[StoreScan, ScanRows]] = field(default_factory=list)
    position: Position = field(default_factory=Position.empty)
    partitions: list[PartitionOutcome] = field(default_factory=list)
    streamed: set[str] = field(default_factory=set)  # relations read as Arrow streams
    streams: list[StreamRead] = field(default_factory=list)  # the statement's stream scans (stream_reads.py)
    moment: Moment | None = None  # how the reads came to one Position (None: each store at its latest)
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def relations(self) -> dict[str, str]:
        """Relation name → store name (error messages name stores, never ``__iq_scan_0``)."""
        return {scan.relation: scan.store for scan, _ in self.scans} | {s.scan.relation: s.scan.stream
                                                                        for s in self.streams}

    @property
    def in_memory(self) -> bool:
        """Every scan's rows are Python rows in hand (no stream): what the fast path and the evaluator take."""
        return not self.streamed and not self.streams and not any(rows.streams for _, rows in self.scans)

    def bind(self, lease: Lease, sql: str, *, tables: bool = False) -> None:
        """Point each scan's relation name on ``lease`` at its data: a stream DuckDB reads once as it runs, or a
        table when the SQL reads the relation more than once (a self-join) or ``tables`` asks for one (a
        relation handed to the caller runs any number of times)."""
        for scan, rows in self.scans:
            if scan.relation in self.streamed:
                failures = rows.to_arrow(True, with_rows=False) if scan.include_failures and rows.failures else None
                answered = rows.to_arrow(False) if rows.rows else None  # partitions a peer answered as rows
                reader = relation_reader(rows.schema(), rows.spec, list(rows.streams), failures, scan.order,
                                         scan.limit, answered)
                once = not tables and reads_once(sql, scan.relation)
                lease.bind(scan.relation, reader if once else reader.read_all())
            else:
                lease.bind(scan.relation, rows.to_arrow(scan.include_failures))
        for stream in self.streams:
            stream.bind(lease, sql, tables=tables)

    def close(self) -> None:
        """End every snapshot (idempotent; a stream read to the end has ended its own)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _, rows in self.scans:
            close_streams(rows.streams)
        for stream in self.streams:
            stream.close()


def statement_bound(plan: Plan, settings: Mapping[str, Any], request_bound: Position | None,
                    catalog: Mapping[str, StoreSpec]) -> Position:
    """The statement's position bound: its ``AS OF POSITION``, the session's, the request's; checked against the
    topics its stores read (a bound naming none of them is a mistake, said so)."""
    from .statement import bound_from

    bound = plan.position_bound.position
    bound = bound.merge(bound_from(settings.get("position_bound")))
    bound = bound.merge(request_bound)
    if not bound.is_empty():
        streams = streams_of(catalog)
        check_bound_topics(bound, [catalog[scan.store] for scan in plan.scans] +
                           [streams[scan.stream] for scan in plan.streams],
                           [*catalog.values(), *streams.values()])
    return bound


def read_scans(source: Source, plan: Plan, catalog: Mapping[str, StoreSpec], bound: Position, config: GatewayConfig,
               waiting: Waiting | None, partial: bool, watch: StatementWatch,
               one_moment: float | None = None, staleness: tuple[int, dict[tuple[str, int], int]] | None = None
               ) -> Reads:
    """Run every scan of ``plan``; with ``partial`` False a needed failed partition is the statement's error.

    ``one_moment`` (a monotonic deadline): bring reads that share a source topic-partition to one Position
    (``moment.align``), waiting at most until then; None reads every store at its latest. ``staleness``: the
    session's max_staleness and the time lag of each local copy (``staleness.mark_stale``)."""
    reads = Reads()
    runs: list[tuple[StoreScan, StoreScan]] = []
    answered: list[Answers] = []
    try:
        for scan in plan.scans:
            run = scan
            if plan.fast_path is None and config.arrow_scans and streamable(scan, catalog[scan.store]):
                run = as_arrow_requests(scan, config.scan_batch_rows)
                reads.streamed.add(scan.relation)
            runs.append((scan, run))
            answered.append(run_scan(source, run, bound, waiting))
        if staleness is not None:
            mark_stale(answered, [scan.store for scan in plan.scans], staleness[1], staleness[0], _close_answer)
        if one_moment is not None and answered:
            reads.moment = align(source, answered, [scan.store for scan in plan.scans], watch, one_moment,
                                 _close_answer)
            if not reads.moment.aligned:
                if not partial:
                    raise unaligned_error(reads.moment)
                mark_unaligned(answered, reads.moment, _close_answer)
        outcomes: dict[tuple[str, int], PartitionOutcome] = {}
        while answered:
            (scan, run), answers = runs.pop(0), answered.pop(0)
            try:
                rows = collect(catalog[scan.store], answers, None if run is not scan else scan.order,
                               None if run is not scan else scan.limit)
            except StoreShapeMoved:
                raise
            except ValueError as exc:
                raise GatewayInternalError(str(exc)) from exc
            reads.scans.append((scan, rows))
            for _, answer in answers:
                reads.position = reads.position.merge(answer.position)
                record_outcomes(outcomes, scan.store, answer)
        if plan.streams:
            caps, streams = Capabilities.of(source), streams_of(catalog)
            for stream_scan in plan.streams:
                read = read_stream(caps, stream_scan, streams[stream_scan.stream], bound, config.scan_batch_rows,
                                   waiting, watch, outcomes)
                reads.streams.append(read)
                reads.position = reads.position.merge(read.position)
        watch.check("reading the stores")
        reads.partitions = [outcomes[k] for k in sorted(outcomes)]
        if not partial:
            needed = [f for scan, rows in reads.scans if not scan.include_failures for f in rows.failures]
            needed += [f for read in reads.streams if not read.scan.include_failures for f in read.failures]
            if needed:
                raise partition_error(needed, waiting.note if waiting is not None else "")
        return reads
    except BaseException:
        for answers in answered:  # read, not yet collected: their snapshots end here
            for _, answer in answers:
                for qr in answer.partition_results.values():
                    _close_answer(qr)
        reads.close()  # every snapshot ends with the statement
        raise


def _close_answer(qr: QueryResult) -> None:
    """End the snapshot an answered partition holds (an Arrow stream holds a read transaction)."""
    if not qr.is_failure and isinstance(qr.result, ArrowRows):
        qr.result.close()
