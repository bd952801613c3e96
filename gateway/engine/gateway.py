"""The engine every face goes through: SQL → Plan → IQv2 requests → Arrow → DuckDB → a lazy Result.

A statement's way through, in the order ``sql`` takes it (ARCHITECTURE.md
draws it): ``Statement.of`` gathers what the caller gave; the point lane
answers a known point lookup (``routes.takes_point_lane``); otherwise the
``Planner`` plans it, SET/SHOW/DESCRIBE/EXPLAIN are answered by
``statements``, a SELECT's scans are read (``reads.read_scans``: IQv2
requests per partition, waiting for a bound within its budget),
``routes.choose_route`` picks the fast path, the evaluator or DuckDB, and a
``Result`` holds the answer until the caller reads it in the form it wants.

One engine, so the Python API, HTTP, PG, DB-API and Flight give the same
rows, the same positions and the same errors for the same statement. It
reads only, from a source whose capabilities are declared (``sources.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import planner
from planner.plan import Plan, StatementKind
from planner.systables import SystemContext
from stores.catalog.schema import StoreSpec
from stores.catalog.streams import relation_spec
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.state import State

from . import statements
from .answers import DuckAnswer
from .arrow_rows import StoreShapeMoved, point_row_maker, point_store_row
from .bounds import check_bound_topics
from .cancel import Cancellation
from .config import GatewayConfig, Session
from .describe import shape_columns
from .duck import DuckPool, row_limit_error
from .errors import (
    BadRequest,
    GatewayInternalError,
    NoCommonPositionError,
    StateStoreMigratedError,
    StreamRequired,
    translate,
)
from .explain_position import explain_position_result
from .grants import CALLER, Grants, restricted
from .guards import Guards, StatementWatch
from .outcomes import PartitionOutcome
from .partitions import local_partition_rows
from .reads import Reads, read_scans, statement_bound
from .residual.programs import Programs
from .result import Result
from .routes import Route, choose_route, scan_rows, takes_point_lane
from .scans import Waiting, probe_query, read_point
from .sources import Capabilities, Source
from .staleness import MAX_STALENESS
from .statement import Budget, Form, Statement, bound_from, lane_takes
from .subscribing import Subscribing
from .system_tables import register_system_tables, store_rows
from .upgrading import not_yet_available

if TYPE_CHECKING:
    from ..access.principal import Principal

__all__ = ["Gateway", "Session"]

# How many times a statement is planned again when a store changes shape under it (a swap to a rebuilt
# generation); more than one swap of one store within a statement's time is not a thing to wait out
_REPLANS = 2
_POINT_LANE = "point lane"
STREAM_REQUIRED = ("a SUBSCRIBE (or SELECT … EMIT CHANGES) is a live answer that never ends: read it with "
                   "Gateway.subscribe(), over HTTP with Accept: application/x-ndjson or text/event-stream, over the "
                   "PG port with COPY (SUBSCRIBE …) TO STDOUT or DECLARE c CURSOR FOR SUBSCRIBE … and FETCH, or "
                   "with a DB-API cursor's execute() and fetches")
_ONE_MOMENT = frozenset({"snapshot", "monotonic"})  # the consistency levels that read several stores at one Position


def _reads_several_partitions(plan: Plan, catalog: Mapping[str, StoreSpec]) -> bool:
    """Can this statement's reads disagree? Only when it reads more than one store partition: several scans or
    requests, or one scan of a store with several partitions, each committed in its own transaction (a full scan
    could pair partition 0 after a batch with partition 1 before it)."""
    n = 0
    for scan in plan.scans:
        spec = catalog.get(scan.store)
        for request in scan.requests:
            n += len(request.partitions) if request.partitions is not None else (spec.partitions if spec else 2)
            if n > 1:
                return True
    return False


class Gateway(Subscribing):
    """Runs SQL over the stores of one application. Thread-safe: every statement leases its own DuckDB cursor."""

    def __init__(self, source: Source, *, config: GatewayConfig | None = None, activity: Any = None) -> None:
        """``activity``: where a serving process records the statements it runs (``begin(text) -> slot``,
        ``end(slot)``), so its supervisor can say what was running if it crashes."""
        self.capabilities = Capabilities.of(source)  # a TypeError naming what is missing if it is no source
        self._activity = activity
        self.source = source
        self.config = config or GatewayConfig()
        self.planner = planner.Planner()
        self._pool = DuckPool(memory_limit_bytes=self.config.max_memory_bytes)
        self._programs = Programs()  # simple residuals answered without DuckDB (residual/)
        self._guards = Guards(self.config.max_memory_bytes)
        self._waiters = threading.BoundedSemaphore(self.config.max_waiters)
        self._outcomes: dict[tuple[str, int], PartitionOutcome] = {}  # the point lane's, per store partition
        self._row_makers: dict[Any, Any] = {}  # the point lane's, per lane (lanes hash by identity)
        self._grants = Grants()  # users' views of the catalog and their limits (grants.py)
        self._owns_source = False
        self._live: Any = None  # live answers (live/service.py), made on the first subscription
        self._live_lock = threading.Lock()
        #: statements whose reads disagreed on a Position and were brought to one (read as of an earlier one,
        #: waited for a store behind, found none in time): /metrics and the benchmark say how often
        self.moments = {"read_as_of": 0, "waited": 0, "no_common_position": 0}

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

    def catalog_for(self, principal: Principal | None) -> Mapping[str, StoreSpec]:
        """The catalog as ``principal`` sees it: the stores they may read (all of them for None)."""
        return self._grants.catalog(principal, self.catalog())

    def config_for(self, principal: Principal | None) -> GatewayConfig:
        """The server's limits with ``principal``'s as ceilings (what a face's response budget is for them)."""
        return self._grants.config(principal, self.config)

    def session(self, **settings: Any) -> Session:
        """Per-connection SET settings; pass it as ``session=`` (or call ``session.sql``)."""
        s = Session(self)
        for name, value in settings.items():
            s.set(name, value)
        return s

    def explain(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
                principal: Principal | None = None) -> str:
        plan = self._plan(text, params, self._settings(None), self.catalog_for(principal))
        if plan.kind is StatementKind.EXPLAIN:
            return plan.explain or ""
        return planner.explain_text(plan)

    def store_positions(self, principal: Principal | None = None) -> dict[str, dict[int, Position | None]]:
        """Per store partition, the position it has reached, or None where the partition cannot say.

        Asked through IQv2 itself (a point lookup of a key that need not
        exist), so it works for any source without a side channel. Only the
        stores ``principal`` may read (every store for None).
        """
        out: dict[str, dict[int, Position | None]] = {}
        for name, spec in self.catalog_for(principal).items():
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

    def status(self) -> dict[str, Any] | None:
        """The source's health beside its KIP-696 state, or None where the source reports none."""
        status = self.capabilities.status
        return status() if status is not None else None

    @property
    def statements_interrupted(self) -> dict[str, int]:
        """How many statements were interrupted, by reason (timeout, cancelled, memory): for /metrics."""
        return dict(self._guards.tripped)

    def close(self) -> None:
        live = self._live
        if live is not None:
            live.close(feeds=self._owns_source)
        self._pool.close()
        if self._owns_source:
            self.source.close()  # type: ignore[attr-defined]

    # -- the statement path ------------------------------------------------------------
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
        form: Form | None = None,
        stream: bool = False,
        arrow: bool = False,
        cancelled: Callable[[], bool] | None = None,
        context: SystemContext | None = None,
        cancel: Cancellation | None = None,
        principal: Principal | None = None,
        seen: Position | None = None,
    ) -> Result:
        """Run one statement within its budget (time from now, memory, rows, the client still there).

        The Result is lazy: read it as rows, Arrow or a DuckDB relation and
        that is the work done (``result.py``). ``form`` says how it will be
        read, so errors surface here rather than on the first read
        (``Form``; ``stream=True`` is ``Form.ROWS``, ``arrow=True``
        ``Form.ARROW``). ``cancelled`` is polled while the statement runs (an
        HTTP client that disconnected); ``cancel`` lets another thread stop
        it at once (a PG CancelRequest: ``StatementCancelled``). ``context``
        is who asks, as information_schema / pg_catalog and the PostgreSQL
        catalog functions report it (the PG port: schema ``public``).
        ``principal`` is the user asking (``gateway.access``): the statement
        sees only the stores they may read (``grants.py``) and runs within
        their limits; None is a caller with every grant.
        ``seen``: the Position of the session's last answer where the caller
        keeps it (an HTTP session token); a ``Session`` keeps its own. With
        ``consistency = 'monotonic'`` the answer is never older.
        """
        if cancel is not None:
            cancel.check()
        result: Result | None = None
        settings = self._settings(session)
        if form is None:
            form = Form.ARROW if arrow else Form.ROWS if stream else Form.ANY
        monotonic = settings.get("consistency") == "monotonic"
        if monotonic and isinstance(session, Session):
            seen = session.seen if seen is None else seen.merge(session.seen)
        if monotonic and seen is not None and not seen.is_empty():
            given = bound_from(position)  # never older than the session's last answer: its Position is a bound
            position = seen if given is None else given.merge(seen)
        stmt = Statement.of(text, params, position, partial=partial, wait_ms=wait_ms, max_rows=max_rows,
                            session=session, settings=settings, form=form, cancelled=cancelled, cancel=cancel,
                            context=context, principal=principal)
        activity = self._activity
        slot = activity.begin(text) if activity is not None else None
        caller = CALLER.set(principal) if principal is not None else None  # a routed source forwards in its name
        try:
            result = None
            if takes_point_lane(stmt):  # before the statement watch: the lane never waits
                result = self._point(stmt.text, stmt.params, stmt.position, stmt.max_rows, stmt.principal)
            if result is None:
                result = self._run(stmt)
        finally:
            if caller is not None:
                CALLER.reset(caller)
            if slot is not None and (result is None or not result.streaming):
                activity.end(slot)
        if slot is not None and result.streaming:  # it runs on while it is read: ended with its answer
            result.on_end(lambda: activity.end(slot))
        if monotonic and isinstance(session, Session):
            session.observe(result.position)
        return result

    def _run(self, stmt: Statement) -> Result:
        budget = stmt.budget(self._grants.config(stmt.principal, self.config))
        watch = self._guards.watch(budget.timeout_ms, stmt.cancelled, budget.memory_bytes)
        if stmt.cancel is not None:
            watch.why_cancelled = "canceling statement due to user request"
            stmt.cancel.on_cancel(lambda: watch.trip("cancelled"))
        handed_over = False
        try:
            for attempt in range(_REPLANS + 1):
                catalog = self.catalog_for(stmt.principal)  # the user's: a store they may not read does not exist
                try:
                    result = self._statement(stmt, budget, catalog, watch)
                except (StoreShapeMoved, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    # planned on a catalog a store's swap to a rebuilt generation has replaced since: plan again.
                    # Arrow's errors: a column whose type changed, read on the row path, fails to convert
                    if self.catalog_for(stmt.principal) == catalog:  # the same catalog read other columns: no swap
                        if not isinstance(exc, StoreShapeMoved):
                            raise
                        raise GatewayInternalError(str(exc)) from exc
                    if attempt == _REPLANS:
                        raise StateStoreMigratedError(
                            f"{exc}; the store changed shape {attempt + 1} times while this statement ran "
                            "(swaps to rebuilt generations): retry it") from exc
                    continue
                handed_over = result.streaming  # its answer owns the watch now
                return result
            raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
        finally:
            if not handed_over:
                watch.close()

    def _statement(self, stmt: Statement, budget: Budget, catalog: Mapping[str, StoreSpec],
                   watch: StatementWatch) -> Result:
        """One statement on one catalog (``_run`` plans it again when a store changed shape under it)."""
        plan = self._plan(stmt.text, stmt.params, stmt.settings, catalog, watch)
        watch.check("planning the statement")
        if plan.system_tables and restricted(stmt.principal):
            self._grants.check_system(stmt.principal, plan.system_tables)
        kind = plan.kind
        if kind is StatementKind.SET:
            return statements.set_result(plan, stmt.session, dict(stmt.settings), self._pool)
        if kind is StatementKind.EXPLAIN and plan.explain_position and plan.inner is not None:
            reads = self._read(plan.inner, stmt, budget, catalog, watch, explaining=True)
            reads.close()
            return explain_position_result(reads, self._pool)
        if kind is StatementKind.EXPLAIN:
            return statements.explain_result(plan, self._pool)
        if kind is StatementKind.SHOW_TABLES:
            return statements.show_tables(catalog, self._pool)
        if kind is StatementKind.DESCRIBE:
            return statements.describe(relation_spec(catalog, plan.describe or ""), self._pool)
        if kind is StatementKind.SUBSCRIBE:
            raise StreamRequired(STREAM_REQUIRED)
        return self._select(plan, stmt, budget, catalog, watch)

    def _read(self, plan: Plan, stmt: Statement, budget: Budget, catalog: Mapping[str, StoreSpec],
              watch: StatementWatch, *, explaining: bool = False) -> Reads:
        """Read a SELECT's scans, at one Position where the session's consistency asks for it (``moment.py``);
        ``explaining`` (EXPLAIN POSITION): always, and a failure to agree is shown rather than raised."""
        bound = statement_bound(plan, stmt.settings, stmt.position, catalog)
        level = stmt.settings.get("consistency", "snapshot")
        wait_ms = budget.wait_ms
        if not wait_ms and level == "monotonic" and not bound.is_empty():
            wait_ms = min(self.config.consistency_wait_ms, budget.timeout_ms)
        waiting = Waiting(self.source, self.capabilities, wait_ms, watch, self._waiters,
                          self.config.max_waiters) if wait_ms > 0 else None
        one_moment = None
        if explaining or (level in _ONE_MOMENT and _reads_several_partitions(plan, catalog)):
            wait = budget.wait_ms or self.config.consistency_wait_ms
            one_moment = min(time.monotonic() + wait / 1000, watch.deadline)
        partial = explaining or stmt.partial_results(self.config)
        stale_ms = stmt.settings.get("max_staleness") if level == "bounded_staleness" else None
        staleness = token = None
        if stale_ms:
            token = MAX_STALENESS.set(stale_ms)  # a routed source asks a fresher copy (staleness.py)
            lags = self.capabilities.partition_lags
            if lags is not None:  # a replica on its own: no other copy, a stale one fails
                staleness = (stale_ms, {(i.store, i.partition): i.time_lag_ms for i in lags()})
        try:
            reads = read_scans(self.source, plan, catalog, bound, self.config, waiting, partial, watch, one_moment,
                               staleness)
        except NoCommonPositionError:
            self.moments["no_common_position"] += 1
            raise
        finally:
            if token is not None:
                MAX_STALENESS.reset(token)
        moment = reads.moment
        if moment is not None and moment.rounds:
            self.moments["read_as_of"] += 1
            self.moments["waited"] += moment.slept
            self.moments["no_common_position"] += not moment.aligned
        return reads

    def _select(self, plan: Plan, stmt: Statement, budget: Budget, catalog: Mapping[str, StoreSpec],
                watch: StatementWatch) -> Result:
        reads = self._read(plan, stmt, budget, catalog, watch)
        try:
            route, columns = choose_route(plan, reads, stmt, self._programs)
            if route is Route.FAST_PATH:
                columns, rows = reads.scans[0][1].project(plan.fast_path or ())
                return self._in_hand(columns, rows, reads, budget, route)
            if route is Route.EVALUATOR:
                rows = self._programs.evaluate(plan.residual_program, plan.residual_values,  # type: ignore[arg-type]
                                               *scan_rows(reads))
                if rows is not None:
                    return self._in_hand(columns, rows, reads, budget, route)
            return self._duckdb(plan, stmt, budget, catalog, reads, watch)
        except BaseException:
            reads.close()
            raise

    def _in_hand(self, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]], reads: Reads,
                 budget: Budget, route: Route) -> Result:
        reads.close()
        if len(rows) > budget.max_rows:
            raise row_limit_error(budget.max_rows)
        return Result.in_hand(list(columns), rows, reads.position, reads.partitions, pool=self._pool,
                              route=route.value)

    def _duckdb(self, plan: Plan, stmt: Statement, budget: Budget, catalog: Mapping[str, StoreSpec], reads: Reads,
                watch: StatementWatch) -> Result:
        """The residual SQL in DuckDB, started as the statement's form says (``answers.DuckAnswer``)."""
        system = None
        if plan.system_tables:
            def partition_rows() -> list[tuple[Any, ...]]:  # a user's own stores only, never probing another's
                return local_partition_rows(self.source, self.capabilities,
                                            catalog if restricted(stmt.principal) else None)

            def system(lease: Any) -> None:
                register_system_tables(lease, plan.system_tables, catalog, stmt.context, stmt.settings,
                                       partition_rows, lambda: store_rows(self.capabilities, catalog))
        cfg = self.config
        answer = DuckAnswer(self._pool, plan.long_chains, plan.residual_sql or "", reads, watch, budget.max_rows,
                            cfg.scan_batch_rows, cfg.ndjson_batch_rows, system)
        program = plan.residual_program
        learn = (program is not None and stmt.form is not Form.ARROW and len(reads.scans) == program.sources
                 and reads.in_memory and not self._programs.known(program))
        # the reads in hand and the form open: run it now, once (binding it to learn its columns, then running it
        # when read, parsed and planned it twice: ~1.3x DuckDB's own cost per small statement)
        eager = stmt.form is Form.ANY and reads.in_memory
        if stmt.form is Form.ROWS or learn or eager:
            rows = answer.start_rows()
            if rows is not None:  # the whole answer, in hand
                if learn:
                    self._programs.learn(program, plan.residual_values, scan_rows(reads)[0],  # type: ignore[arg-type]
                                         answer.columns, rows, *scan_rows(reads)[1:])
                return Result.in_hand(answer.columns, rows, reads.position, reads.partitions, pool=self._pool,
                                      route=Route.DUCKDB.value, long_chains=plan.long_chains)
        elif stmt.form is Form.ARROW:
            answer.start_arrow()
        else:
            answer.bind()
        return Result(columns=answer.columns, position=reads.position, partitions=reads.partitions,
                      statement=StatementKind.SELECT, answer=answer, pool=self._pool, long_chains=plan.long_chains)

    # -- live answers ---------------------------------------------------------------------
    # -- the point lane ------------------------------------------------------------------
    def point(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
              position: Position | Mapping[str, Any] | str | None = None, *, max_rows: int | None = None,
              principal: Principal | None = None) -> Result | None:
        """A plain point lookup's whole answer, as ``sql`` gives it, or None: then ``sql`` answers (or fails).

        ``sql`` takes this lane itself; here it is on its own so tests can ask
        whether the lane answers. Why a lane: for the statement services and
        BI tools send most, planning a whole Plan and walking the general
        steps cost several times the one SQLite read that answers it (issue
        14). The lane (planner/point_lanes.py) binds the key; the source reads
        it (``PointReads``); the row is what the general way would answer,
        with the same position and partition outcome. Anything out of the
        ordinary (not planned yet, a wrong parameter, a partition that is not
        local, behind the bound or failing, no idle connection, too many rows)
        is None, and the general way says why. The lane never waits (a busy
        partition is None), so a lookup ends in microseconds and needs no
        statement watch: what an HTTP server may answer on its serving loop's own thread (serving/inline.py).
        ``principal`` as for ``sql``: the lane reads only a store they may read.
        """
        if not isinstance(text, str) or not lane_takes(None, self._settings(None)):
            return None
        bound = bound_from(position) if position is not None else None
        activity = self._activity
        slot = activity.begin(text) if activity is not None else None
        try:
            return self._point(text, params, bound, max_rows, principal)
        finally:
            if slot is not None:
                activity.end(slot)

    def _point(self, text: str, params: Any, position: Position | None, max_rows: int | None,
               principal: Principal | None) -> Result | None:
        catalog = self.catalog()
        lane = self.planner.point_lane(text, catalog)
        if lane is None:
            return None
        if principal is not None and not principal.everything and not self._grants.can_read(principal, lane.store):
            return None  # the general way plans it on the user's catalog: UNKNOWN_STORE, as for any unknown name
        key = lane.key(params)
        if key is None:
            return None
        bound = lane.bound
        extra = position
        if extra is not None and not extra.is_empty():
            bound = PositionBound.at(bound.position.merge(extra))
        if not bound.is_unbounded():
            check_bound_topics(bound.position, [catalog[lane.store]], catalog.values())
        partition = lane.partition(key)
        got = read_point(self.capabilities, lane.store, partition, key, bound)
        if got is None:
            return None
        reached, value, ts = got
        if value is not None and (not isinstance(value, tuple) or len(value) != len(lane.spec.values)):
            return None  # not the shape it was planned on: the general way says so (StoreShapeMoved)
        limit = self._row_limit(max_rows, principal)
        if lane.program is not None:
            columns = self._programs.columns(lane.program)
            if columns is None:  # DuckDB has not taught this program's columns yet: the general way answers
                return None
            scan_rows = [] if value is None else [point_store_row(lane.spec)(key, value, ts, partition, reached)]
            rows = self._programs.evaluate(lane.program, lane.residual_values(params), scan_rows)
            if rows is None or len(rows) > limit:
                return None
            return Result.in_hand(columns, rows, reached, [self._outcome(lane.store, partition, reached)],
                                  pool=self._pool, route=_POINT_LANE)
        shaped = self._row_makers.get(lane)
        if shaped is None:
            if len(self._row_makers) > 4096:
                self._row_makers.clear()
            shaped = self._row_makers[lane] = point_row_maker(lane.spec, lane.columns)
        columns, row_of = shaped
        rows = [] if value is None else [row_of(key, value, ts, partition, reached)]
        if len(rows) > limit:
            return None  # the general way raises the row limit
        return Result.in_hand(list(columns), rows, reached, [self._outcome(lane.store, partition, reached)],
                              pool=self._pool, route=_POINT_LANE)

    def _row_limit(self, max_rows: int | None, principal: Principal | None = None) -> int:
        cfg = self._grants.config(principal, self.config) if principal is not None else self.config
        return min(cfg.max_rows, max_rows if max_rows is not None else cfg.max_rows)

    def _outcome(self, store: str, partition: int, reached: Position) -> PartitionOutcome:
        """A partition's outcome for the point lane, the same object until its position moves (faces cache what
        they render of it by identity)."""
        key = (store, partition)
        outcome = self._outcomes.get(key)
        if outcome is None or outcome.position is not reached:
            if len(self._outcomes) > 65536:
                self._outcomes.clear()
            outcome = self._outcomes[key] = PartitionOutcome(store, partition, None, None, reached)
        return outcome

    # -- describing without running -----------------------------------------------------
    def result_columns(self, text: str, *, session: Session | Mapping[str, Any] | None = None,
                       context: SystemContext | None = None,
                       principal: Principal | None = None) -> list[tuple[str, str]]:
        """The (name, type) columns ``sql(text, …)`` answers with, without reading a store or binding parameters.

        What a PostgreSQL client's Describe of a prepared statement asks
        before it binds anything; ``[]`` for statements without rows (SET).
        """
        settings = self._settings(session)
        catalog = self.catalog_for(principal)
        try:
            shape = self.planner.plan_shape(text, catalog)
        except Exception as exc:  # noqa: BLE001 - planner errors become gateway errors
            mapped = not_yet_available(self.capabilities, exc) or translate(exc)
            if mapped is None:
                raise GatewayInternalError(f"planning failed: {type(exc).__name__}: {exc}") from exc
            raise mapped from exc
        if shape.system_tables and restricted(principal):
            self._grants.check_system(principal, shape.system_tables)
        return shape_columns(shape, catalog, settings, context, self._pool.cursor)

    def parameter_types(self, text: str, *, principal: Principal | None = None) -> dict[int, str]:
        """``{n: type}`` for the ``$n`` parameters whose type the statement decides (``id = $1``: the key's type),
        as PostgreSQL names types: what a PG client's Describe of a prepared statement is told (planner.param_types)."""
        return planner.parameter_types(text, self.catalog_for(principal))

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
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("the SQL text is empty")
        try:
            return self.planner.plan(text, self.catalog() if catalog is None else catalog, params=params,
                                     session=settings, attach_interrupt=watch.attach if watch is not None else None)
        except planner.PlanningInterrupted:
            if watch is None:  # only a watch interrupts planning
                raise
            raise watch.error("planning the statement") from None
        except Exception as exc:  # noqa: BLE001 - planner and store errors become gateway errors
            mapped = not_yet_available(self.capabilities, exc) or translate(exc)
            if mapped is None:
                raise GatewayInternalError(f"planning failed: {type(exc).__name__}: {exc}") from exc
            raise mapped from exc
