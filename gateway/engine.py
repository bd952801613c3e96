"""The engine every face goes through: SQL → Plan → IQv2 requests → Arrow → DuckDB → Result.

The steps, each in the module named after it: parse and plan (``planner``),
run the IQv2 requests per partition (``scans``), turn the per-partition
results into Arrow (``arrow_rows``), run the residual SQL in DuckDB
(``duck``), and hand back a ``Result`` that the faces render
(``http.renderers``, ``dbapi``, ``cli``). Statements that read no store
(SET, SHOW, DESCRIBE, EXPLAIN) are answered by ``statements``.

One engine, so the Python API, HTTP and DB-API give the same rows, the same
positions and the same errors for the same statement. The engine reads only:
it runs against a ``Queryable`` (a StreamsApp in this process, or a
StateDirReader over another process's store files).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import planner
from planner.plan import Plan, StatementKind, StoreScan
from planner.systables import SystemContext
from stores.app.protocol import Queryable
from stores.catalog.schema import StoreSpec
from stores.iqv2.position import Position, PositionBound, PositionError
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.state import State

from . import statements
from .arrow_faithful import faithful_relation
from .arrow_rows import ScanRows, StoreShapeMoved, collect, point_row_maker, point_store_row
from .arrow_scans import as_arrow_requests, close_streams, reads_once, relation_reader, streamable
from .bounds import check_bound_topics
from .cancel import Cancellation
from .config import GatewayConfig, Session, as_position
from .describe import shape_columns
from .duck import DuckPool, ThreadCursors, arrow_batches, duck_error, fetch_chunks, fetch_rows, row_limit_error
from .errors import BadRequest, GatewayInternalError, StateStoreMigratedError, translate
from .guards import Guards, StatementWatch
from .outcomes import partition_error, record_outcomes
from .residual_eval import MAX_ROWS as RESIDUAL_EVAL_ROWS
from .residual_programs import Programs
from .result import PartitionOutcome, PointAnswer, Result
from .routing.membership import partition_rows
from .scans import Waiting, probe_query, read_point, run_scan
from .system_tables import register_system_tables, store_rows
from .upgrading import not_yet_available

__all__ = ["Gateway", "Session"]

# How many times a statement is planned again when a store changes shape under it (a swap to a rebuilt
# generation); more than one swap of one store within a statement's time is not a thing to wait out
_REPLANS = 2


class Gateway:
    """Runs SQL over the stores of one application. Thread-safe: every request gets its own DuckDB cursor."""

    def __init__(self, source: Queryable, *, config: GatewayConfig | None = None) -> None:
        if not isinstance(source, Queryable):
            raise TypeError(f"Gateway needs a Queryable (StreamsApp or StateDirReader), got {type(source).__name__}")
        self.source = source
        self.config = config or GatewayConfig()
        self._pool = DuckPool(memory_limit_bytes=self.config.max_memory_bytes)
        self._cursors = ThreadCursors(self._pool)
        self._programs = Programs()  # simple residuals answered without DuckDB (residual_eval.py)
        self._guards = Guards(self.config.max_memory_bytes)
        self._waiters = threading.BoundedSemaphore(self.config.max_waiters)
        self._outcomes: dict[tuple[str, int], PartitionOutcome] = {}  # point's, per store partition
        self._row_makers: dict[Any, Any] = {}  # point's, per lane (lanes hash by identity: a spec hashes slowly)
        self._owns_source = False

    @classmethod
    def open(cls, state_dir: str | Path, **config: Any) -> Gateway:
        """A gateway reading another process's store files read-only (several may run at once)."""
        from stores.app.reader import StateDirReader

        gw = cls(StateDirReader(Path(state_dir)), config=GatewayConfig.of(None, **config))
        gw._owns_source = True
        return gw

    # -- introspection -----------------------------------------------------------
    @property
    def state(self) -> State:
        return self.source.state

    def catalog(self) -> Mapping[str, StoreSpec]:
        try:
            return self.source.catalog()
        except Exception as exc:  # noqa: BLE001 - e.g. a corrupt store.json in a state dir
            mapped = translate(exc)
            raise (mapped or GatewayInternalError(f"cannot read the store catalog: {exc}")) from exc

    def session(self, **settings: Any) -> Session:
        """Per-connection SET settings; pass it as ``session=`` (or call ``session.sql``)."""
        s = Session(self)
        for name, value in settings.items():
            s.set(name, value)
        return s

    def explain(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> str:
        plan = self._plan(text, params, self._settings(None))
        if plan.kind is StatementKind.EXPLAIN:
            return plan.explain or ""
        return planner.explain_text(plan)

    def store_positions(self) -> dict[str, dict[int, Position | None]]:
        """Per store partition, the position it has reached, or None where the partition cannot say.

        Asked through IQv2 itself (a point lookup of a key that need not
        exist), so it works for any Queryable without a side channel.
        """
        out: dict[str, dict[int, Position | None]] = {}
        for name, spec in self.catalog().items():
            parts: dict[int, Position | None] = {p: None for p in range(spec.partitions)}
            try:
                answer = self.source.query(StateQueryRequest.in_store(name).with_query(probe_query(spec)))
            except Exception:  # noqa: BLE001 - an app that cannot answer reports no positions
                out[name] = parts
                continue
            for p, qr in answer.partition_results.items():
                parts[p] = qr.position
            out[name] = parts
        return out

    def close(self) -> None:
        self._pool.close()
        if self._owns_source:
            self.source.close()  # type: ignore[attr-defined]

    # -- the statement path ----------------------------------------------------------
    def sql(
        self,
        text: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        position: Position | Mapping[str, Any] | str | None = None,
        *,
        partial: bool | None = None,
        wait_ms: int | None = None,
        session: Session | Mapping[str, Any] | None = None,
        max_rows: int | None = None,
        stream: bool = False,
        arrow: bool = False,
        cancelled: Callable[[], bool] | None = None,
        context: SystemContext | None = None,
        cancel: Cancellation | None = None,
    ) -> Result:
        """Run one statement within its budget (time from now, memory, the client still there).

        ``stream=True`` lets large results reach the caller chunk by chunk
        (NDJSON); ``arrow=True`` materializes Arrow instead of Python rows
        (Arrow IPC). Either way the rows, limits and errors are the same.
        ``cancelled`` is polled while the statement runs (an HTTP client that
        disconnected): when it says True the statement is interrupted.
        ``cancel`` lets another thread stop the statement at once (a PG
        CancelRequest; ``StatementCancelled``).
        ``context`` is who asks, as information_schema / pg_catalog and the
        PostgreSQL catalog functions report it (the PG port: schema
        ``public``, the client's settings); default: iqgate's own faces.
        """
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("the SQL text is empty")
        if cancel is not None:
            cancel.check()
        settings = self._settings(session)
        if not settings and not wait_ms:  # defaults only: the point lane (it never waits, so no watch is needed)
            point = self._point_lookup(text, params, position, max_rows)
            if point is not None:
                return point
        cfg = self.config
        timeout_ms = min(cfg.statement_timeout_ms,
                         _int_setting(settings, "statement_timeout_ms", cfg.statement_timeout_ms))
        watch = self._guards.watch(timeout_ms, cancelled)
        if cancel is not None:
            watch.why_cancelled = "canceling statement due to user request"
            cancel.on_cancel(lambda: watch.trip("cancelled"))
        handed_over = False
        try:
            for attempt in range(_REPLANS + 1):
                catalog = self.catalog()
                try:
                    result = self._statement(text, params, session, settings, catalog, position, partial, wait_ms,
                                             max_rows, stream, arrow, watch, context)
                except (StoreShapeMoved, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    # planned on a catalog a store's swap to a rebuilt generation has replaced since: plan again.
                    # Arrow's errors: a column whose type changed, read on the row path, fails to convert
                    if self.catalog() == catalog:  # the same catalog read other columns: not a swap
                        if not isinstance(exc, StoreShapeMoved):
                            raise
                        raise GatewayInternalError(str(exc)) from exc
                    if attempt == _REPLANS:
                        raise StateStoreMigratedError(
                            f"{exc}; the store changed shape {attempt + 1} times while this statement ran "
                            "(swaps to rebuilt generations): retry it") from exc
                    continue
                handed_over = result.streaming
                return result
            raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
        finally:
            if not handed_over:
                watch.close()

    def _statement(self, text: str, params: Any, session: Session | Mapping[str, Any] | None,
                   settings: dict[str, Any], catalog: Mapping[str, StoreSpec], position: Any, partial: bool | None,
                   wait_ms: int | None, max_rows: int | None, stream: bool, arrow: bool, watch: StatementWatch,
                   context: SystemContext | None) -> Result:
        """One statement on one catalog (``sql`` plans it again when a store changed shape under it)."""
        plan = self._plan(text, params, settings, catalog, watch)
        watch.check("planning the statement")
        kind = plan.kind
        if kind is StatementKind.SET:
            return statements.set_result(plan, session, settings, self._pool.cursor)
        if kind is StatementKind.EXPLAIN:
            return statements.explain_result(plan, self._pool.cursor)
        if kind is StatementKind.SHOW_TABLES:
            return statements.show_tables(catalog, self._pool.cursor)
        if kind is StatementKind.DESCRIBE:
            return statements.describe(catalog[plan.describe or ""], self._pool.cursor)
        return self._select(plan, catalog, settings, position, partial, wait_ms, max_rows, stream, arrow, watch,
                            context=context)

    @property
    def statements_interrupted(self) -> dict[str, int]:
        """How many statements were interrupted, by reason (timeout, cancelled, memory): for /metrics."""
        return dict(self._guards.tripped)

    def result_columns(self, text: str, *, session: Session | Mapping[str, Any] | None = None,
                       context: SystemContext | None = None) -> list[tuple[str, str]]:
        """The (name, type) columns ``sql(text, …)`` answers with, without reading a store or binding parameters.

        What a PostgreSQL client's Describe of a prepared statement asks
        before it binds anything; ``[]`` for statements without rows (SET).
        """
        settings = self._settings(session)
        catalog = self.catalog()
        try:
            shape = planner.plan_shape(text, catalog)
        except Exception as exc:  # noqa: BLE001 - planner errors become gateway errors
            mapped = not_yet_available(self.source, exc) or translate(exc)
            if mapped is None:
                raise GatewayInternalError(f"planning failed: {type(exc).__name__}: {exc}") from exc
            raise mapped from exc
        return shape_columns(shape, catalog, settings, context, self._pool.cursor)

    def parameter_types(self, text: str) -> dict[int, str]:
        """``{n: type}`` for the ``$n`` parameters whose type the statement decides (``id = $1``: the key's type),
        as PostgreSQL names types: what a PG client's Describe of a prepared statement is told (planner.param_types)."""
        return planner.parameter_types(text, self.catalog())

    # -- planning ---------------------------------------------------------------------
    def _settings(self, session: Session | Mapping[str, Any] | None) -> dict[str, Any]:
        if session is None:
            s: dict[str, Any] = {}
        elif isinstance(session, Session):
            s = session.settings
        elif isinstance(session, Mapping):
            s = Session.validated(session)
        else:
            raise BadRequest(f"session must be a Session or a mapping of settings, got {type(session).__name__}")
        if not self.config.table_scans:
            s["table_scans"] = False
        return s

    def _plan(self, text: str, params: Any, settings: Mapping[str, Any],
              catalog: Mapping[str, StoreSpec] | None = None, watch: StatementWatch | None = None) -> Plan:
        """The statement's plan; with ``watch``, parsing and analysis stop once its budget is spent (a megabyte
        of SQL is seconds of Python that no DuckDB interrupt reaches)."""
        try:
            return planner.plan(text, self.catalog() if catalog is None else catalog, params=params,
                                session=settings, attach_interrupt=watch.attach if watch is not None else None)
        except planner.PlanningInterrupted:
            if watch is None:  # only a watch interrupts planning
                raise
            raise watch.error("planning the statement") from None
        except Exception as exc:  # noqa: BLE001 - planner and store errors become gateway errors
            mapped = not_yet_available(self.source, exc) or translate(exc)
            if mapped is None:
                raise GatewayInternalError(f"planning failed: {type(exc).__name__}: {exc}") from exc
            raise mapped from exc

    # -- SELECT -----------------------------------------------------------------------
    def point(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
              position: Position | Mapping[str, Any] | str | None = None, *, max_rows: int | None = None
              ) -> PointAnswer | None:
        """A plain point lookup's whole answer, as ``sql`` gives it, or None: then ``sql`` answers (or fails).

        Why: for the statement services and BI tools send most, planning a
        whole Plan and walking the general steps cost several times the one
        SQLite read that answers it (issue 14). The point lane
        (planner/point_lanes.py) binds the key; the source reads it
        (``StreamsApp.point_read``); the row is what ``sql`` would answer,
        with the same position and partition outcome. Anything out of the
        ordinary (not planned yet, a wrong parameter, a partition that is not
        local, behind the bound or failing, no idle connection, too many rows)
        is None, and ``sql``'s general way says why. The default session
        only (``sql``'s own settings take the general way). Its budget: the
        lane never waits (a busy partition is None), so a lookup ends in
        microseconds and the statement watch is not needed.
        """
        catalog = self.catalog()
        lane = planner.point_lane(text, catalog)
        if lane is None:
            return None
        key = lane.key(params)
        if key is None:
            return None
        bound = lane.bound
        if position is not None:
            extra = _bound_from(position)
            if extra is not None and not extra.is_empty():
                bound = PositionBound.at(bound.position.merge(extra))
        if not bound.is_unbounded():
            check_bound_topics(bound.position, [catalog[lane.store]], catalog.values())
        partition = lane.partition(key)
        got = read_point(self.source, lane.store, partition, key, bound)
        if got is None:
            return None
        reached, value, ts = got
        if value is not None and (not isinstance(value, tuple) or len(value) != len(lane.spec.values)):
            return None  # not the shape it was planned on: the general way says so (StoreShapeMoved)
        if lane.program is not None:
            return self._point_program(lane, params, key, value, ts, partition, reached, max_rows)
        shaped = self._row_makers.get(lane)
        if shaped is None:
            if len(self._row_makers) > 4096:
                self._row_makers.clear()
            shaped = self._row_makers[lane] = point_row_maker(lane.spec, lane.columns)
        columns, row_of = shaped
        rows = [] if value is None else [row_of(key, value, ts, partition, reached)]
        if len(rows) > self._row_limit(max_rows):
            return None  # the general way raises the row limit
        return PointAnswer(columns, rows, reached, [self._outcome(lane.store, partition, reached)])

    def _point_program(self, lane: planner.PointLane, params: Any, key: Any, value: tuple[Any, ...] | None, ts: Any,
                       partition: int, reached: Position, max_rows: int | None) -> PointAnswer | None:
        """``point`` for a residual the gateway evaluates (``_select``'s residual program) over the looked-up row:
        once DuckDB's first answer taught the columns (residual_programs.py), else None (DuckDB answers)."""
        program = lane.program
        columns = self._programs.columns(program)
        if columns is None:
            return None
        scan_rows = [] if value is None else [point_store_row(lane.spec)(key, value, ts, partition, reached)]
        out = self._programs.evaluate(program, lane.residual_values(params), scan_rows)
        if out is None or len(out) > self._row_limit(max_rows):
            return None
        return PointAnswer(tuple(columns), out, reached, [self._outcome(lane.store, partition, reached)])

    def _row_limit(self, max_rows: int | None) -> int:
        cfg = self.config
        return min(cfg.max_rows, max_rows if max_rows is not None else cfg.max_rows)

    def _outcome(self, store: str, partition: int, reached: Position) -> PartitionOutcome:
        """A partition's outcome for ``point``, the same object until its position moves (faces cache what they
        render of it by identity)."""
        key = (store, partition)
        outcome = self._outcomes.get(key)
        if outcome is None or outcome.position is not reached:
            if len(self._outcomes) > 65536:
                self._outcomes.clear()
            outcome = self._outcomes[key] = PartitionOutcome(store, partition, None, None, reached)
        return outcome

    def _point_lookup(self, text: str, params: Any, position: Any, max_rows: int | None) -> Result | None:
        """``point``'s answer as a Result (``sql``'s own point lane), or None."""
        answer = self.point(text, params, position, max_rows=max_rows)
        return None if answer is None else answer.result(self._pool.cursor)

    def _select(self, plan: Plan, catalog: Mapping[str, StoreSpec], settings: Mapping[str, Any], position: Any,
                partial: bool | None, wait_ms: int | None, max_rows: int | None, stream: bool, arrow: bool,
                watch: StatementWatch, *, context: SystemContext | None = None) -> Result:
        cfg = self.config
        limit_rows = min(cfg.max_rows, _int_setting(settings, "max_rows", cfg.max_rows),
                         max_rows if max_rows is not None else cfg.max_rows)
        if limit_rows < 0:
            raise BadRequest(f"max_rows must be >= 0, got {max_rows}")
        if partial is None:
            partial = bool(settings.get("partial_results", cfg.partial_results))
        wait = wait_ms if wait_ms is not None else _int_setting(settings, "wait_for_bound_ms", 0)
        if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
            raise BadRequest(f"wait_ms must be a non-negative integer, got {wait!r}")
        wait = min(wait, cfg.max_wait_ms, watch.timeout_ms)

        bound = plan.position_bound.position
        bound = bound.merge(_bound_from(settings.get("position_bound")))
        bound = bound.merge(_bound_from(position))
        if not bound.is_empty():
            check_bound_topics(bound, [catalog[scan.store] for scan in plan.scans], catalog.values())

        scans: list[tuple[StoreScan, ScanRows]] = []
        merged = Position.empty()
        outcomes: dict[tuple[str, int], PartitionOutcome] = {}
        waiting = Waiting(self.source, wait, watch, self._waiters, cfg.max_waiters) if wait > 0 else None
        streamed: set[str] = set()  # relations read as Arrow streams (arrow_scans.py)
        try:
            for scan in plan.scans:
                run = scan
                if plan.fast_path is None and cfg.arrow_scans and streamable(scan, catalog[scan.store]):
                    run = as_arrow_requests(scan, cfg.scan_batch_rows)
                    streamed.add(scan.relation)
                answers = run_scan(self.source, run, bound, waiting)
                spec = catalog[scan.store]
                try:
                    rows = collect(spec, answers, None if run is not scan else scan.order,
                                   None if run is not scan else scan.limit)
                except StoreShapeMoved:
                    raise
                except ValueError as exc:
                    raise GatewayInternalError(str(exc)) from exc
                scans.append((scan, rows))
                for _, answer in answers:
                    merged = merged.merge(answer.position)
                    record_outcomes(outcomes, scan.store, answer)
            watch.check("reading the stores")
            partitions = [outcomes[k] for k in sorted(outcomes)]
            if not partial:
                needed = [f for scan, rows in scans if not scan.include_failures for f in rows.failures]
                if needed:
                    raise partition_error(needed, waiting.note if waiting is not None else "")

            if plan.fast_path is not None and len(scans) == 1:
                columns, out = scans[0][1].project(plan.fast_path)
                if len(out) > limit_rows:
                    raise row_limit_error(limit_rows)
                return Result(columns=columns, position=merged, partitions=partitions,
                              statement=StatementKind.SELECT, rows=out, cursor_factory=self._pool.cursor)
            program = plan.residual_program
            learn = False
            if (program is not None and len(scans) == 1 and not streamed and not scans[0][1].streams
                    and len(scans[0][1].rows) <= RESIDUAL_EVAL_ROWS):
                columns = self._programs.columns(program)
                if columns is not None and (not arrow or all(t in _ARROW_READY for _, t in columns)):
                    out = self._programs.evaluate(program, plan.residual_values, scans[0][1].rows)
                    if out is not None:
                        if len(out) > limit_rows:
                            raise row_limit_error(limit_rows)
                        return Result(columns=columns, position=merged, partitions=partitions,
                                      statement=StatementKind.SELECT, rows=out, cursor_factory=self._pool.cursor)
                learn = not arrow and not self._programs.known(program)
            system = (lambda cur: register_system_tables(cur, plan.system_tables, catalog, context, settings,
                                                         lambda: partition_rows(self.source),
                                                         lambda: store_rows(self.source, catalog))
                      ) if plan.system_tables else None
            streams = [r for _, rows in scans for r in rows.streams]
            result = self._residual(plan, scans, merged, partitions, limit_rows, watch, stream, arrow, system=system,
                                    streamed=streamed, streams=streams)
            if not result.streaming:
                close_streams(streams)
            if learn and not result.streaming:
                self._programs.learn(program, plan.residual_values, scans[0][1].rows, result.columns, result.rows())
            return result
        except BaseException:
            for _, rows in scans:  # every snapshot ends with the statement (a LIMIT stops reading early)
                close_streams(rows.streams)
            raise

    def _residual(self, plan: Plan, scans: list[tuple[StoreScan, ScanRows]], position: Position,
                  partitions: list[PartitionOutcome], limit_rows: int, watch: StatementWatch,
                  stream: bool, arrow: bool, *, system: Callable[[Any], None] | None = None,
                  streamed: set[str] | None = None, streams: list[Any] | None = None) -> Result:
        """Run the residual SQL on a fresh cursor holding this request's scans; rows are DuckDB's own values.

        Scans in ``streamed`` are registered as record batch readers over the
        partitions' Arrow streams (read once, as DuckDB runs), or as a table
        read from them when the SQL names the relation more than once.
        """
        relations = {scan.relation: scan.store for scan, _ in scans}
        sql = plan.residual_sql or ""
        if not arrow and system is None and not streamed and not plan.long_chains:  # the thread's cursor, reused
            tables = {scan.relation: rows.to_arrow(scan.include_failures) for scan, rows in scans}
            columns, out, rest = self._cursors.run(tables, sql, limit_rows, watch, relations,
                                                   self.config.ndjson_batch_rows if stream else None)
            if rest is not None:  # more than a chunk: the rest streams from the cursor handed over to it
                return Result(columns=columns, chunks=rest.chunks, cursor=rest.cursor, position=position,
                              partitions=partitions, statement=StatementKind.SELECT, residual_sql=sql)
            return Result(columns=columns, rows=out, position=position, partitions=partitions,
                          statement=StatementKind.SELECT, residual_sql=sql, rerunnable=False,
                          cursor_factory=self._pool.cursor)
        cur = self._pool.cursor(plan.long_chains)
        watch.attach(cur.interrupt)
        handed_over = False
        try:
            for scan, rows in scans:
                if streamed and scan.relation in streamed:
                    failures = rows.to_arrow(True, with_rows=False) if scan.include_failures and rows.failures else None
                    answered = rows.to_arrow(False) if rows.rows else None  # partitions a peer answered as rows
                    reader = relation_reader(rows.schema(), rows.spec, list(rows.streams), failures, scan.order,
                                             scan.limit, answered)
                    cur.register(scan.relation, reader if reads_once(sql, scan.relation) else reader.read_all())
                else:
                    cur.register(scan.relation, rows.to_arrow(scan.include_failures))
            if system is not None:
                system(cur)
            common = dict(position=position, partitions=partitions, statement=StatementKind.SELECT, cursor=cur,
                          residual_sql=sql, rerunnable=not streamed,
                          on_close=(lambda: close_streams(streams)) if streams else None)
            if arrow:  # record batches as DuckDB produces them (issue 14: every output streams)
                rel = cur.sql(sql)
                columns = [(str(n), str(t)) for n, t in zip(rel.columns, rel.types)]
                reader = faithful_relation(rel).to_arrow_reader(self.config.scan_batch_rows)
                handed_over = True
                return Result(columns=columns, arrow_stream=(reader.schema, arrow_batches(
                    reader, limit_rows, watch, relations)), **common)
            cur.execute(sql)
            columns = [(str(d[0]), str(d[1])) for d in cur.description or ()]
            if stream:
                handed_over = True
                chunks = fetch_chunks(cur, self.config.ndjson_batch_rows, limit_rows, watch, relations)
                return Result(columns=columns, chunks=chunks, **common)
            out = fetch_rows(cur, limit_rows + 1)
            if len(out) > limit_rows:
                cur.abort()
                raise row_limit_error(limit_rows)
            watch.check()  # an interrupt may land only after a long scalar call: its reason still counts
            return Result(columns=columns, rows=out, **common)
        except duckdb.Error as exc:
            raise duck_error(exc, watch, relations) from exc
        finally:
            if not handed_over:
                watch.attach(None)


# Result types whose Arrow form the rows of a result built without DuckDB reproduce (result.py)
_ARROW_READY = frozenset({"BIGINT", "INTEGER", "DOUBLE", "VARCHAR", "BOOLEAN"})


def _bound_from(value: Any) -> Position | None:
    try:
        return as_position(value)
    except (PositionError, TypeError, ValueError) as exc:
        raise BadRequest(f"invalid position bound: {exc}") from exc


def _int_setting(settings: Mapping[str, Any], name: str, default: int) -> int:
    """A numeric session setting; unset and 0 ("no limit" in SESSION_SETTINGS) give ``default``."""
    v = settings.get(name)
    return default if not v else int(v)
