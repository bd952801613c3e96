"""SparkRuntime: runs one streaming query per store and reports to the StreamsApp (KIP-696/662/671).

Each store's query is a "unit" (Kafka's stream thread). A monitor thread
watches the queries; a failed one goes to ``app.handle_uncaught`` with its
error classified by the stable code in Spark's error text (the Python
exception type does not survive Spark): ``MISSING_SOURCE_TOPIC`` becomes
MissingSourceTopicException. RUNNING is reported once every query has
caught up with the log as it was when the query started.

Faults (issue 21: the disk full, an I/O error, a read-only file system, the
source unreachable; see ``faults.py``) never reach the handler: the store's
ingest is paused, its reads keep answering at its last Position, and the
query is restarted from its checkpoint with backoff (1, 2, 4, 5, 5 … s, times a jitter of 1-1.5) until
it applies a batch again — exactly once, since the writer skips batches it
already applied. A store whose query fails for any other reason goes to the
handler when the user set one (KIP-671), else fails alone: the other stores
keep running (docs/DESIGN.md §8).

Recovery (issue 13): a store whose partition files were damaged, lost, or
lag the checkpoint's last committed batch is rebuilt by replaying its source
into a new generation beside the current one (``app.generations``), with
its own checkpoint; the current generation keeps answering (its lost
partitions NOT_ACTIVE) until the new one reaches the Position the old one
had, then the app swaps it in atomically. Files deleted while running are
noticed within a second; a write that finds a file damaged triggers the same.

RUNNING (issue 13 item 8) means every query has run its first trigger and
every store has caught up with the source as it was when its query started;
until then the monitor reports catch-up progress (records reached of the
target, records/s, ETA) per store in the app's health.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..app import layout
from ..iqv2.errors import MissingSourceTopicException, StreamsException
from ..iqv2.position import Position
from .batch_cuts import bind_ledger_ref, prepare_ledger, unbind_ledger_ref
from .changelogs import ChangelogWriters
from .faults import SourceTruncatedException, classify_failure, fault_reason, is_corruption
from .materializer import BatchSink, last_committed_batch, position_from_offsets, read_batch_offsets
from .runtime_shared import SharedQueries
from .shared_query import QueryGroup
from .side_state import SIDE_STATE_FILE
from .side_state import behind as side_state_behind
from .stream_rows import MISSING_SOURCE_TOPIC
from .upgrades import begin_upgrade

__all__ = ["SparkRuntime", "classify_failure", "SourceTruncatedException", "warm_python_workers"]

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 5.0
RESUMED_AFTER_S = 2.0  # a restarted query up this long with nothing left to read counts as resumed
FILE_CHECK_S = 1.0  # how often the store files are checked for deletion while running
PROGRESS_S = 1.0  # how often catch-up progress is computed while a store is behind


class _Unit:
    """One store's streaming query and its progress toward RUNNING."""

    def __init__(self, decl: Any) -> None:
        self.decl = decl
        self.name = decl.spec.name
        self.generation = 0  # the store's current generation
        self.building: int | None = None  # the generation being rebuilt, if any
        self.rebuild_target: Position = Position.empty()
        self.rebuild_reason = ""
        self.started = False  # has the query run its first trigger since it (re)started?
        self.files_checked = 0.0
        self.progress_at = 0.0
        self.progress_sample: tuple[float, int] | None = None
        self.query: Any = None
        self.target: Position = Position.empty()
        self.caught_up = False
        self.batches = 0
        self.retry_at: float | None = None  # monotonic time of the next restart while paused by a fault
        self.backoff = 0.0
        self.started_at = 0.0
        self.batches_at_start = 0
        self.group: QueryGroup | None = None  # the shared query it is a member of (None: a query of its own)


class SparkRuntime(SharedQueries):
    """The Runtime a Spark ``Topology`` gives its StreamsApp."""

    def __init__(self, topology: Any, app: Any) -> None:
        self.topology = topology
        self.app = app
        self.spark = topology.spark
        self.state_dir = Path(app.state_dir)
        self.units = {d.spec.name: _Unit(d) for d in topology.declarations()}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None
        self._failed: set[str] = set()
        self._member_failures: dict[str, BaseException] = {}  # members a shared query's sink gave up on
        self.groups: list[QueryGroup] = []
        self.abandoned_members: dict[str, str] = {}
        self._writers = ChangelogWriters(topology, app)  # store changelogs (issue 17)

    # -- Runtime protocol ----------------------------------------------------------
    def start(self) -> None:
        ref = getattr(self.topology, "cut_ref", None)
        if ref is not None:  # the sources' planners share the app's cut ledger (issue 47: batch_cuts.py)
            ledger = layout.cut_ledger_path(self.state_dir)
            try:
                prepare_ledger(ledger)
            except (OSError, sqlite3.Error) as exc:  # the queries then plan alone; they say so themselves
                log.warning("cannot prepare the batch cut ledger %s: %s", ledger, exc)
            bind_ledger_ref(ref, ledger)
        self._monitor = threading.Thread(target=self._run, name=f"iqgate-{self.app.application_id}-spark",
                                         daemon=True)
        self._monitor.start()

    def replace(self, unit: str) -> None:
        """REPLACE_THREAD: restart the failed query from its checkpoint."""
        if unit not in self.units:
            raise StreamsException(f"cannot replace unknown unit {unit!r}; units are {sorted(self.units)}")
        u = self.units[unit]
        if u.group is None and u.query is not None and u.query.isActive:
            u.query.stop()
        self._recover(u)
        self._failed.discard(unit)
        self._start_unit(u)

    def stop(self, timeout_s: float) -> None:
        with self._lock:  # no query starts after this point (see _start_unit)
            self._stopping.set()
            queries = list({id(u.query): (u.name, u.query) for u in self.units.values()
                            if u.query is not None}.values())
        deadline = time.monotonic() + max(0.0, timeout_s)
        for name, q in queries:
            try:
                q.stop()
            except Exception as exc:  # noqa: BLE001 - stopping regardless
                if "stopped SparkContext" in str(exc):  # the JVM is ending on its own (a SIGTERM to the whole
                    log.info("query of store %s: Spark had already stopped", name)  # group): nothing to stop
                else:
                    log.exception("stopping query of store %s failed", name)
        m = self._monitor
        if m is not None and m is not threading.current_thread():
            m.join(max(0.0, deadline - time.monotonic()))
        try:
            self._writers.close()
        except Exception:  # noqa: BLE001 - stopping regardless
            log.exception("closing the store changelogs failed")
        ref = getattr(self.topology, "cut_ref", None)
        if ref is not None:
            unbind_ledger_ref(ref)

    # -- the monitor thread ---------------------------------------------------------
    def _run(self) -> None:
        recover = getattr(self.topology.log, "recover", None)
        if recover is not None:  # the embedded log: cut torn tails a crash left before any query reads it
            try:
                recover()
            except Exception:  # noqa: BLE001 - a fault here shows up again, classified, when the queries read
                log.exception("repairing the event log failed")
        warm_python_workers(self.spark)
        self._plan_groups()
        for u in self.units.values():
            if self._stopping.is_set():
                return
            if u.group is None or u.group.query is None:
                self._await_wave()
            self._launch(u)
        # Each check is a py4j call that competes for the GIL with foreachBatch: poll gently once RUNNING.
        while not self._stopping.wait(0.5 if self.app.state.value == "RUNNING" else 0.2):
            self._handle_member_failures()
            for u in list(self.units.values()):
                if u.name in self._failed:
                    continue
                if u.retry_at is not None:
                    if time.monotonic() >= u.retry_at:
                        self._launch(u)
                    continue
                q = u.query
                if q is None:
                    continue
                if not q.isActive:
                    if self._stopping.is_set():
                        return
                    err = q.exception()
                    self._failure(u, err if err is not None else StreamsException(
                        f"the streaming query of store {u.name!r} stopped unexpectedly"))
                    continue
                self._check(u)
            self._maybe_running()

    def checkpoint(self, u: _Unit) -> Path:
        """The checkpoint the unit's query runs on: the generation being rebuilt, its shared query's, its own."""
        if u.building is None and u.group is not None:
            return u.group.checkpoint
        return layout.checkpoint_dir(self.state_dir, u.name, u.building if u.building is not None else u.generation)

    def _check(self, u: _Unit) -> None:
        """One monitor round for a running query: first trigger, catch-up, swap, lost files, progress."""
        now = time.monotonic()
        if not u.started:
            u.started = self._first_trigger_done(u)
        if u.started and not u.caught_up and self._target_reached(u):
            u.caught_up = True
        self._maybe_swap(u)
        self._maybe_resumed(u)
        if u.building is None and now - u.files_checked >= FILE_CHECK_S:
            u.files_checked = now
            lost = self.app.check_store_files(u.name)
            if lost:
                log.warning("store %s: partition file(s) lost while running (%s); rebuilding it from its source",
                            u.name, "; ".join(f"partition {p}: {w}" for p, w in sorted(lost.items())))
                self._restart(u)
                return
        if (not u.caught_up or u.building is not None) and now - u.progress_at >= PROGRESS_S:
            u.progress_at = now
            self._report_progress(u, now)

    def _launch(self, u: _Unit) -> None:
        """Check the sources, recover the store, start its query; a failure is classified like a query's."""
        u.retry_at = None
        try:
            self._check_topics(u)
            if not begin_upgrade(self, u):  # refused (issue 20 item 4): the old version answers, nothing runs
                self._failed.add(u.name)
                return
            self._recover(u)
            self._start_unit(u)
        except BaseException as exc:  # noqa: BLE001 - goes to the fault path or the handler
            if self._stopping.is_set():
                return
            self._failure(u, exc)

    def _restart(self, u: _Unit) -> None:
        """Stop the unit's query and launch it again (recovering or rebuilding the store first)."""
        q = u.query if u.group is None else None  # a member of a shared query leaves it (see _recover)
        if q is not None:
            try:
                if q.isActive:
                    q.stop()
            except Exception:  # noqa: BLE001 - stopping regardless
                log.exception("stopping query of store %s failed", u.name)
        self._launch(u)

    def _failure(self, u: _Unit, exc: BaseException) -> None:
        if is_corruption(exc) and self.app.check_store_files(u.name, integrity=True):
            self._launch(u)  # the damaged files were moved aside: _recover rebuilds the store
            return
        reason = fault_reason(exc)
        if reason is not None and not isinstance(classify_failure(exc), MissingSourceTopicException):
            self._pause(u, reason)
            return
        self._failed.add(u.name)
        self._fail(classify_failure(exc), u.name)

    def _pause(self, u: _Unit, reason: str) -> None:
        """A fault: stop the query, keep serving, restart it later (backoff); a shared query pauses every member."""
        q = u.query
        if q is not None:
            try:
                if q.isActive:
                    q.stop()
            except Exception:  # noqa: BLE001 - stopping regardless
                log.exception("stopping query of store %s failed", u.name)
        # Jitter (one factor per pause, so a shared query's members stay together): queries that failed together
        # (one fault seen by several) do not all restart at the same moment, again and again. (It was added
        # against java.io.OptionalDataException at concurrent starts, whose cause is fixed where it was:
        # session.register_sources.)
        jitter = random.uniform(1.0, 1.5)
        for m in self._members(u) if u in self._members(u) else [u]:
            if m is not u and m.retry_at is not None:
                continue  # already paused by this same failure
            m.backoff = min(RETRY_MAX_S, max(RETRY_FIRST_S, m.backoff * 2))
            delay = m.backoff * jitter
            m.retry_at = time.monotonic() + delay
            m.caught_up = False
            log.warning("store %s: ingest paused by a fault, retrying in %.1f s: %s", m.name, delay, reason)
            self.app.health.set(m.name, "paused", reason, retry_s=round(delay, 1))

    def _maybe_resumed(self, u: _Unit) -> None:
        """After a restart: resumed once a batch applied, or once up a while with nothing left to read."""
        h = self.app.health.get(u.name)
        if h.status == "running":
            return
        if h.status == "paused" and not (u.batches > u.batches_at_start or (
                u.caught_up and time.monotonic() - u.started_at >= RESUMED_AFTER_S)):
            return
        if h.status == "starting" and not u.caught_up:
            return
        if h.status in ("starting", "paused"):
            # under the lock the swap holds (_maybe_swap): the batch thread and the monitor both get here, and a
            # "rebuilding" decided before a swap must not land after the swap's "running"
            with self._lock:
                if self.app.health.get(u.name).status != h.status:
                    return  # changed meanwhile (the swap said running, or a new pause)
                if h.status == "paused":
                    log.warning("store %s: ingest resumed after %s", u.name, h.reason)
                u.backoff = 0.0
                if u.building is not None:
                    self.app.health.set(u.name, "rebuilding", u.rebuild_reason)
                else:
                    self.app.health.set(u.name, "running")

    def _fail(self, exc: BaseException, unit: str) -> None:
        exc = self._explain(exc, self.units[unit]) if unit in self.units else exc
        log.error("store query %s failed: %s", unit, exc)
        if isinstance(exc, (MissingSourceTopicException, SourceTruncatedException)):
            self.app.handle_uncaught(exc, unit)  # KIP-662: the client's sources are gone
        else:
            self.app.handle_store_failure(exc, unit)

    def _explain(self, exc: BaseException, u: _Unit) -> BaseException:
        """A failure without a stable code whose source topic is gone is KIP-662's, whatever the error said.

        The error text does not always survive: a Python source process that died (librdkafka can crash when
        a topic it reads is deleted) reaches us as a bare EOF with no message.
        """
        if isinstance(exc, (MissingSourceTopicException, SourceTruncatedException)):
            return exc
        src = self.topology.log
        try:
            topics = src.list_topics()
        except Exception:  # noqa: BLE001 - the source itself is unreachable: keep the original error
            return exc
        missing = [t for t in u.decl.spec.source_topics if t not in topics]
        if not missing:
            return exc
        new = MissingSourceTopicException(
            f"{MISSING_SOURCE_TOPIC}: source topic(s) {', '.join(map(repr, missing))} of store {u.name!r} no longer "
            f"exist in {src.describe()} (the query failed with: {str(exc).splitlines()[0] if str(exc) else exc!r})")
        new.__cause__ = exc
        return new

    def _check_topics(self, u: _Unit) -> None:
        """KIP-662 before a query starts: a source topic that does not exist fails the unit, it is not created."""
        src = self.topology.log
        topics = src.list_topics()
        for t in u.decl.spec.source_topics:
            if t not in topics:
                raise MissingSourceTopicException(
                    f"{MISSING_SOURCE_TOPIC}: source topic {t!r} of store {u.name!r} does not exist in "
                    f"{src.describe()}")

    def _recover(self, u: _Unit) -> None:
        """Rebuild, beside the current generation, a store whose files are lost, damaged or behind its checkpoint."""
        u.generation = self.app.current_generation(u.name)
        if u.building is not None:
            return  # a rebuild in progress goes on from its own checkpoint
        reason = self.app.rebuild_needed(u.name)
        ck = self.checkpoint(u)
        if reason is None and u.group is not None and u.name in u.group.detached:
            reason = "it left its shared query after a failed write"
        if reason is None:
            reason = self.abandoned_members.pop(u.name, None)
        committed = last_committed_batch(ck)
        if reason is None and u.decl.driver_plan is not None:  # a table aggregate's or a join's state beside Spark's
            reason = side_state_behind(ck / SIDE_STATE_FILE, committed)
        if reason is None:
            applied = self.app.writer(u.name).last_batch_id()
            if committed is None:
                planned = (ck / "offsets").is_dir() and any(p.name.isdigit() for p in (ck / "offsets").iterdir())
                if applied is None or planned:
                    return  # a fresh store, or a first batch applied but not yet committed: Spark replays it
            elif applied is not None and applied >= committed:
                return
            reason = f"its partitions applied batch {applied} but its checkpoint committed {committed}"
        target = self.app.max_position(u.name)
        if committed is not None:
            try:
                target = target.merge(position_from_offsets(read_batch_offsets(ck, committed)[0]))
            except (OSError, ValueError) as exc:
                log.warning("store %s: cannot read the checkpoint's last offsets (%s)", u.name, exc)
        self._detach(u)  # a member of a shared query rebuilds on a query of its own
        g = self.app.begin_rebuild(u.name, reason)
        shutil.rmtree(layout.checkpoint_dir(self.state_dir, u.name, g), ignore_errors=True)
        self._writers.begin(u.name, g)  # its changelog starts over with its checkpoint
        u.building, u.rebuild_target, u.rebuild_reason = g, target, reason

    def _maybe_swap(self, u: _Unit) -> None:
        """Swap the rebuilt generation in once it has every record the old one had (no read goes back in time)."""
        if u.building is None:
            return
        pos = self.app.min_position(u.name, building=True)
        if not pos.covers(u.rebuild_target):
            return
        with self._lock:
            if u.building is None:
                return
            old = layout.checkpoint_dir(self.state_dir, u.name, u.generation)
            self.app.finish_rebuild(u.name)
            u.generation, u.building = u.building, None
        if old != self.checkpoint(u):
            shutil.rmtree(old, ignore_errors=True)

    def _first_trigger_done(self, u: _Unit) -> bool:
        """Has the query run a trigger since it started? (RUNNING waits for it: issue 13 item 8.)"""
        if u.batches > u.batches_at_start:
            return True
        try:
            status = u.query.status
        except Exception:  # noqa: BLE001 - a query stopping
            return False
        msg = str(status.get("message", ""))
        return msg.startswith("Waiting") and not status.get("isTriggerActive", False)

    def _report_progress(self, u: _Unit, now: float) -> None:
        """Records reached of the target (the source's end when the query started), records/s and ETA."""
        pos = self.app.min_position(u.name, building=u.building is not None)
        target = u.target.merge(u.rebuild_target) if u.building is not None else u.target
        want = sum(o + 1 for t in target.topics() for o in target.partition_positions(t).values())
        got = sum(min((pos.offset(t, p) if pos.offset(t, p) is not None else -1), o) + 1
                  for t in target.topics() for p, o in target.partition_positions(t).items())
        rate = None
        if u.progress_sample is not None and now > u.progress_sample[0]:
            rate = max(0.0, (got - u.progress_sample[1]) / (now - u.progress_sample[0]))
        u.progress_sample = (now, got)
        eta = round((want - got) / rate, 1) if rate else None
        self.app.health.progress(u.name, {
            "phase": "rebuilding" if u.building is not None else "catching up",
            "reached": got, "target": want, "records_per_s": None if rate is None else round(rate, 1),
            "eta_s": eta, "query_started": u.started,
            "position": pos.to_json_map(), "target_position": target.to_json_map(),
            **({"upcoming_columns": upcoming} if (upcoming := self.app.upgrades.upcoming_columns(u.name)) else {})})

    def _start_unit(self, u: _Unit) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self._start_unit_locked(u)

    def _start_unit_locked(self, u: _Unit) -> None:
        u.caught_up = False
        u.started = False
        u.progress_sample = None
        u.target = self._log_end(u)
        if u.group is not None:
            u.batches_at_start = u.batches
            u.query = self._group_query(u.group)
            u.started_at = time.monotonic()
            return
        ck = self.checkpoint(u)
        gen = u.building
        sink = BatchSink(u.decl, ck, lambda: self._writers.get(u.name, gen), self._applied)
        ck.mkdir(parents=True, exist_ok=True)
        writer = (sink.frame().writeStream.queryName(f"{self.app.application_id}-{u.name}-{os.getpid()}")
                  .outputMode(u.decl.output_mode).foreachBatch(sink)
                  .option("checkpointLocation", str(ck))
                  .trigger(processingTime=self.topology.trigger))
        u.batches_at_start = u.batches
        u.query = writer.start()
        u.started_at = time.monotonic()
        if gen is None:
            self._writers.prepare(u.name)  # while Spark runs the first batch

    def _log_end(self, u: _Unit) -> Position:
        """Where the source ends now: the query counts as caught up once its store reaches it."""
        src = self.topology.log
        topics = src.list_topics()
        return Position.from_map({t: src.last_offsets(t) for t in u.decl.spec.source_topics if t in topics})

    def _target_reached(self, u: _Unit) -> bool:
        try:
            pos = self.app.min_position(u.name, building=u.building is not None)
        except Exception:  # noqa: BLE001 - stores closing
            return False
        return pos.covers(u.target)

    def _applied(self, store: str, batch_id: int, position: Position) -> None:
        u = self.units[store]
        u.batches += 1
        u.started = True
        self.app.health.applied(store)
        if not u.caught_up and self._target_reached(u):
            u.caught_up = True
        self._maybe_swap(u)
        self._maybe_resumed(u)
        self._maybe_running()

    def _maybe_running(self) -> None:
        """RUNNING once every query ran its first trigger and every store caught up (failed stores aside)."""
        if self._stopping.is_set():
            return
        # a store being upgraded answers with its old version meanwhile: its rebuild does not hold RUNNING back
        upgrading = self.app.upgrades.pending
        if all(u.caught_up or u.name in self._failed or u.name in upgrading for u in self.units.values()) and \
                any(u.name not in self._failed for u in self.units.values()):
            self.app.mark_running()



WARM_FOR_S = 20.0  # Spark stops Python workers idle for a minute (PythonWorkerFactory): well inside that
WARM_JOB_GROUP = "iqgate-warm-python-workers"
_warmed_at: dict[str, float] = {}  # SparkContext.applicationId -> when its workers were last warmed (monotonic)


def warm_python_workers(spark: Any, now: float | None = None) -> bool:
    """Start Spark's Python workers and import the sources in them before the first batch needs them.

    Why (issue 13 item 8): the first batch after a (re)start paid for
    forking the Python workers and importing pyarrow, pyspark's data
    source API and our source in each: 2.5 s of a 2.7 s first batch on
    this machine (0.2 s once warm), and 6-20 s on a loaded one. Workers
    warmed less than ``WARM_FOR_S`` ago in this Spark application are still
    there: the job is skipped (issue 22: it cost 0.08-0.15 s of every start
    even then). True when the job ran.
    """
    try:
        sc = spark.sparkContext
        app = str(sc.applicationId)
        at = time.monotonic() if now is None else now
        last = _warmed_at.get(app)
        if last is not None and 0 <= at - last < WARM_FOR_S:
            return False
        n = max(1, int(sc.defaultParallelism))
        sc.setJobGroup(WARM_JOB_GROUP, "iqgate: start and warm the Python workers")
        try:
            sc.parallelize(range(n), n).map(_warm_python_worker).collect()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        _warmed_at[app] = time.monotonic()
        return True
    except Exception:  # noqa: BLE001 - only an optimisation; the first batch does it otherwise
        log.debug("warming Spark's Python workers failed", exc_info=True)
        return False


def _warm_python_worker(_: Any) -> int:
    """Runs in a Spark Python worker: import what reading a source needs there."""
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401

    from . import iqlog_source, kafka_source  # noqa: F401
    return 1
