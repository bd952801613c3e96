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
query is restarted from its checkpoint with backoff (1, 2, 4, 5, 5 … s) until
it applies a batch again — exactly once, since the writer skips batches it
already applied. A store whose query fails for any other reason goes to the
handler when the user set one (KIP-671), else fails alone: the other stores
keep running (DESIGN §8).

Recovery happens before a query starts: a store whose partition files lag
the checkpoint's last committed batch (a lost or replaced file) is wiped
together with its checkpoint and rebuilt by replaying the log.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..iqv2.errors import MissingSourceTopicException, StreamsException
from ..iqv2.position import Position
from .faults import fault_reason
from .materializer import BatchSink, last_committed_batch
from .stream_rows import MISSING_SOURCE_TOPIC, SOURCE_TRUNCATED

__all__ = ["SparkRuntime", "classify_failure", "SourceTruncatedException"]

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 5.0
RESUMED_AFTER_S = 2.0  # a restarted query up this long with nothing left to read counts as resumed


class SourceTruncatedException(StreamsException):
    """Records the checkpoint had read are gone (log truncated, or the topic recreated)."""


def classify_failure(exc: BaseException) -> BaseException:
    """Map a failed query's error to our exception type by the stable code in its text."""
    text = str(exc)
    for code, cls in ((MISSING_SOURCE_TOPIC, MissingSourceTopicException),
                      (SOURCE_TRUNCATED, SourceTruncatedException)):
        at = text.find(code + ":")
        if at >= 0:
            detail = text[at:].splitlines()[0]
            new = cls(detail)
            new.__cause__ = exc if isinstance(exc, BaseException) else None
            return new
    if isinstance(exc, StreamsException):
        return exc
    new = StreamsException(f"streaming query failed: {text.splitlines()[0] if text else type(exc).__name__}")
    new.__cause__ = exc
    return new


class _Unit:
    """One store's streaming query and its progress toward RUNNING."""

    def __init__(self, decl: Any, checkpoint: Path) -> None:
        self.decl = decl
        self.name = decl.spec.name
        self.checkpoint = checkpoint
        self.query: Any = None
        self.target: Position = Position.empty()
        self.caught_up = False
        self.batches = 0
        self.retry_at: float | None = None  # monotonic time of the next restart while paused by a fault
        self.backoff = 0.0
        self.started_at = 0.0
        self.batches_at_start = 0


class SparkRuntime:
    """The Runtime a Spark ``Topology`` gives its StreamsApp."""

    def __init__(self, topology: Any, app: Any) -> None:
        self.topology = topology
        self.app = app
        self.spark = topology.spark
        self.checkpoints = Path(app.state_dir) / "checkpoints"
        self.units = {d.spec.name: _Unit(d, self.checkpoints / d.spec.name) for d in topology.declarations()}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None
        self._failed: set[str] = set()

    # -- Runtime protocol ----------------------------------------------------------
    def start(self) -> None:
        self._monitor = threading.Thread(target=self._run, name=f"iqgate-{self.app.application_id}-spark",
                                         daemon=True)
        self._monitor.start()

    def replace(self, unit: str) -> None:
        """REPLACE_THREAD: restart the failed query from its checkpoint."""
        if unit not in self.units:
            raise StreamsException(f"cannot replace unknown unit {unit!r}; units are {sorted(self.units)}")
        u = self.units[unit]
        if u.query is not None and u.query.isActive:
            u.query.stop()
        self._recover(u)
        self._failed.discard(unit)
        self._start_unit(u)

    def stop(self, timeout_s: float) -> None:
        with self._lock:  # no query starts after this point (see _start_unit)
            self._stopping.set()
            queries = [(u.name, u.query) for u in self.units.values() if u.query is not None]
        deadline = time.monotonic() + max(0.0, timeout_s)
        for name, q in queries:
            try:
                q.stop()
            except Exception:  # noqa: BLE001 - stopping regardless
                log.exception("stopping query of store %s failed", name)
        m = self._monitor
        if m is not None and m is not threading.current_thread():
            m.join(max(0.0, deadline - time.monotonic()))

    # -- the monitor thread ---------------------------------------------------------
    def _run(self) -> None:
        recover = getattr(self.topology.log, "recover", None)
        if recover is not None:  # the embedded log: cut torn tails a crash left before any query reads it
            try:
                recover()
            except Exception:  # noqa: BLE001 - a fault here shows up again, classified, when the queries read
                log.exception("repairing the event log failed")
        for u in self.units.values():
            if self._stopping.is_set():
                return
            self._launch(u)
        # Each check is a py4j call that competes for the GIL with foreachBatch: poll gently once RUNNING.
        while not self._stopping.wait(0.5 if self.app.state.value == "RUNNING" else 0.2):
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
                if not u.caught_up and self._target_reached(u):
                    u.caught_up = True
                self._maybe_resumed(u)
            self._maybe_running()

    def _launch(self, u: _Unit) -> None:
        """Check the sources, recover the store, start its query; a failure is classified like a query's."""
        u.retry_at = None
        try:
            self._check_topics(u)
            self._recover(u)
            self._start_unit(u)
        except BaseException as exc:  # noqa: BLE001 - goes to the fault path or the handler
            if self._stopping.is_set():
                return
            self._failure(u, exc)

    def _failure(self, u: _Unit, exc: BaseException) -> None:
        reason = fault_reason(exc)
        if reason is not None and not isinstance(classify_failure(exc), MissingSourceTopicException):
            self._pause(u, reason)
            return
        self._failed.add(u.name)
        self._fail(classify_failure(exc), u.name)

    def _pause(self, u: _Unit, reason: str) -> None:
        """A fault: stop the query, keep serving, restart it later (backoff)."""
        q = u.query
        if q is not None:
            try:
                if q.isActive:
                    q.stop()
            except Exception:  # noqa: BLE001 - stopping regardless
                log.exception("stopping query of store %s failed", u.name)
        u.backoff = min(RETRY_MAX_S, max(RETRY_FIRST_S, u.backoff * 2))
        u.retry_at = time.monotonic() + u.backoff
        u.caught_up = False
        log.warning("store %s: ingest paused by a fault, retrying in %.0f s: %s", u.name, u.backoff, reason)
        self.app.health.set(u.name, "paused", reason, retry_s=u.backoff)

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
            if h.status == "paused":
                log.warning("store %s: ingest resumed after %s", u.name, h.reason)
            u.backoff = 0.0
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
        """Rebuild a store whose files lag its checkpoint (lost file) by replaying the log from the start."""
        committed = last_committed_batch(u.checkpoint)
        applied = self.app.writer(u.name).last_batch_id()
        if committed is None:
            planned = (u.checkpoint / "offsets").is_dir() and any(
                p.name.isdigit() for p in (u.checkpoint / "offsets").iterdir())
            if applied is None or planned:
                return  # a fresh store, or a first batch applied but not yet committed: Spark replays it
        elif applied is not None and applied >= committed:
            return
        log.warning("store %s: partitions applied batch %s but the checkpoint committed %s; rebuilding from "
                    "the log", u.name, applied, committed)
        self.app.reset_store(u.name)
        shutil.rmtree(u.checkpoint, ignore_errors=True)

    def _start_unit(self, u: _Unit) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self._start_unit_locked(u)

    def _start_unit_locked(self, u: _Unit) -> None:
        u.caught_up = False
        u.target = self._log_end(u)
        sink = BatchSink(u.decl, u.checkpoint, lambda: self.app.writer(u.name), self._applied)
        u.checkpoint.mkdir(parents=True, exist_ok=True)
        writer = (u.decl.df.writeStream.queryName(f"{self.app.application_id}-{u.name}-{os.getpid()}")
                  .outputMode(u.decl.output_mode).foreachBatch(sink)
                  .option("checkpointLocation", str(u.checkpoint))
                  .trigger(processingTime=self.topology.trigger))
        u.query = writer.start()
        u.started_at = time.monotonic()
        u.batches_at_start = u.batches
        if self._target_reached(u):
            u.caught_up = True

    def _log_end(self, u: _Unit) -> Position:
        """Where the source ends now: the query counts as caught up once its store reaches it."""
        src = self.topology.log
        topics = src.list_topics()
        return Position.from_map({t: src.last_offsets(t) for t in u.decl.spec.source_topics if t in topics})

    def _target_reached(self, u: _Unit) -> bool:
        try:
            pos = self.app.positions().get(u.name, Position.empty())
        except Exception:  # noqa: BLE001 - stores closing
            return False
        for t in u.target.topics():
            for p, o in u.target.partition_positions(t).items():
                have = pos.offset(t, p)
                if have is None or have < o:
                    return False
        return True

    def _applied(self, store: str, batch_id: int, position: Position) -> None:
        u = self.units[store]
        u.batches += 1
        self.app.health.applied(store)
        if not u.caught_up and self._target_reached(u):
            u.caught_up = True
        self._maybe_resumed(u)
        self._maybe_running()

    def _maybe_running(self) -> None:
        if self._stopping.is_set():
            return
        if all(u.caught_up or u.name in self._failed for u in self.units.values()) and \
                any(u.name not in self._failed for u in self.units.values()):
            self.app.mark_running()

