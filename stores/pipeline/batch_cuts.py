"""Shared batch cuts (issue 47): every streaming query of one app ends its micro-batches on one sequence of offsets.

Why: a SQL statement over several stores must read them at one input
Position. Stores are written by different streaming queries (other shapes or
output modes than their neighbours, rebuilt stores, more than
``stores_per_query`` of them), and each query's source picks its batch ends
in ``latestOffset`` on its own: two queries over ``orders`` end their batches
at 100, 150, 200 and at 120, 170, so their stores almost never hold the same
Position, nor one the other passed through — which is what reading a leading
store as of an earlier Position (its recent past) needs.

The rule. Per app a *cut ledger* (SQLite in WAL mode, ``checkpoints/@cuts/
ledger.db`` in the state dir: safe across the Python processes that plan the
queries' batches, one per query, and across restarts) holds per topic an
ordered sequence of *cuts*: full ``{partition: end offset}`` maps, each ≥
the one before it in every partition. In ``latestOffset(start, limit)`` a
source decides per topic, inside one write transaction (planners in
different processes decide one at a time, so no two record crossing cuts):

1. it ends at the *oldest* cut that is *ahead* of ``start`` (≥ in every
   partition, not equal), over the same partitions, within the read limit
   (its records past ``start`` no more than the limit's share for the topic)
   and no older than the query's age limit (``max_age_s``, or twice its own
   batch cycle when that is longer: ``SharedCuts.age_limit``; a query never
   ends on stale offsets for long: this is the freshness this costs). The
   oldest, not the newest: then
   every query stops at every cut that is fresh when it passes it, so the
   Position a store behind is at is one the stores ahead of it went through
   (and keep), unless it is older than ``max_age_s``. Taking the newest, a
   query a cut or two behind skipped the ones between, and a statement over
   its store and another's found no Position both had held: under continuous
   ingest the reader chased one skipped cut after another
   (tests/gateway/test_one_moment_spark.py failed with NO_COMMON_POSITION
   on a loaded machine). What it costs: a query two fresh cuts behind takes
   two batches to catch up instead of one;
2. else it ends where it would alone (everything available, or what the
   limit admits) and records that as the new cut when it is ≥ the newest cut
   (and not equal). A query catching up (a rebuild with admission control)
   thus uses its own ends, and joins the sequence once a fresh cut is within
   one batch of it.

A cut recorded after this reader looked at the log may be beyond what it saw:
another reader of the same app saw it in the same log, whose ends only grow,
so it is taken. One recorded before the reader looked cannot be beyond what
it saw unless the topic was recreated, and is skipped. Cuts are kept per
topic incarnation (the EventLog's epoch, Kafka's topic id): a recreated topic
starts a new sequence. The ledger keeps the last ``KEEP_CUTS`` cuts per topic.

Replays after a restart come from Spark's checkpoint (its offsets log), never
from here: the ledger is only asked for new batches. A ledger that cannot be
opened or written (damaged, a full disk, a lock held too long) never fails a
query: the source ends where it would alone, and says so in the log.

The path reaches the sources as an option: ``cutLedger`` (the file), or
``cutLedgerRef`` (a small file naming it, which the runtime writes once it
knows the app's state dir: a Topology's streams are built before the app
exists); ``cutMaxAgeMs`` the age limit. Without either path the source plans
alone, as before (``Topology(shared_cuts=False)``).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .stream_rows import admit

__all__ = [
    "Cut", "TopicPlan", "CutLedger", "SharedCuts", "choose_end", "batch_ends", "prepare_ledger", "new_ledger_ref", "bind_ledger_ref",
    "unbind_ledger_ref", "LEDGER_OPTION", "LEDGER_REF_OPTION", "MAX_AGE_OPTION", "DEFAULT_MAX_AGE_MS", "KEEP_CUTS", "MAX_AGE_CAP_S",
]

log = logging.getLogger(__name__)

LEDGER_OPTION = "cutLedger"
LEDGER_REF_OPTION = "cutLedgerRef"
MAX_AGE_OPTION = "cutMaxAgeMs"
#: A cut older than this is not taken (the query ends on what is available and records a new cut instead).
DEFAULT_MAX_AGE_MS = 1000
KEEP_CUTS = 1000  # cuts kept per topic (the newest)
MAX_AGE_CAP_S = 30.0  # a slow query's age limit (SharedCuts.age_limit) grows with its batch cycle up to this
BUSY_TIMEOUT_S = 2.0  # waiting longer for the ledger's lock than this, a query plans alone
WARN_EVERY_S = 60.0

Ends = dict[int, int]


@dataclass(frozen=True)
class Cut:
    """One recorded cut of a topic: its place in the sequence, when it was recorded (``time.time()``), its ends."""

    seq: int
    at: float
    ends: Ends


@dataclass(frozen=True)
class TopicPlan:
    """What a reader knows of one topic when it plans a batch.

    ``start`` the batch's start offsets, ``available`` the log's ends as the
    reader saw them, ``own`` where it would end alone (everything available,
    or what the read limit admits), ``budget`` the records the read limit
    allows past ``start`` for this topic (None: no limit), ``incarnation``
    the topic's epoch or id (a recreated topic's cuts are another sequence).
    """

    topic: str
    incarnation: str
    start: Ends
    available: Ends
    own: Ends
    budget: int | None = None


def _ge(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    """``a`` ≥ ``b`` in every partition of either (a partition missing is at 0)."""
    return all(a.get(p, 0) >= b.get(p, 0) for p in set(a) | set(b))


def _records(ends: Mapping[int, int], start: Mapping[int, int]) -> int:
    return sum(max(0, e - start.get(p, 0)) for p, e in ends.items())


def choose_end(plan: TopicPlan, fresh: Sequence[Cut], newest: Cut | None, looked_at: float, now: float,
               max_age_s: float) -> tuple[Ends, bool]:
    """The rule (see the module docstring) for one topic: ``(end, record it as the new cut?)``.

    ``fresh`` are the topic's recent cuts (this incarnation), newest first; ``newest`` the newest of all;
    ``looked_at`` when the reader read the log's ends (before it did), ``now`` the decision's time.
    """
    start = {p: plan.start.get(p, 0) for p in plan.own}
    for c in reversed(fresh):  # the oldest fresh cut ahead first (rule 1)
        age = now - c.at
        if not 0 <= age <= max_age_s:
            continue
        if set(c.ends) != set(plan.own) or not _ge(c.ends, start) or c.ends == start:
            continue
        if plan.budget is not None and _records(c.ends, start) > plan.budget:
            continue
        if c.at <= looked_at and not _ge(plan.available, c.ends):
            continue  # recorded before we looked, yet beyond what we saw: not this log (recreated?)
        return dict(c.ends), False
    own = dict(plan.own)
    if newest is None:
        return own, True
    return own, own != newest.ends and _ge(own, newest.ends) and set(own) >= set(newest.ends)


class CutLedger:
    """The per-app ledger of cuts: one SQLite file (WAL), one short write transaction per planned batch."""

    def __init__(self, path: str | os.PathLike[str], *, max_age_s: float = DEFAULT_MAX_AGE_MS / 1000,
                 keep: int = KEEP_CUTS, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.max_age_s = max_age_s
        self.keep = keep
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                 check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a cut lost to a power cut is recorded again: no fsync
                db.execute("CREATE TABLE IF NOT EXISTS cuts (topic TEXT NOT NULL, seq INTEGER NOT NULL, "
                           "incarnation TEXT NOT NULL, at REAL NOT NULL, ends TEXT NOT NULL, "
                           "PRIMARY KEY (topic, seq)) WITHOUT ROWID")
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def plan(self, topics: Sequence[TopicPlan], looked_at: float | None = None,
             max_age_s: float | None = None) -> dict[str, Ends]:
        """Each topic's batch end by the rule, deciding and recording in one transaction (``max_age_s``: this
        query's age limit, else the ledger's). Raises sqlite3/OS errors."""
        age = self.max_age_s if max_age_s is None else max_age_s
        db = self._open()
        db.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            seen = now if looked_at is None else looked_at
            out = {}
            for tp in topics:
                newest, fresh = self._recent(db, tp, now, age)
                end, record = choose_end(tp, fresh, newest, seen, now, age)
                if record:
                    self._record(db, tp, end, (newest.seq + 1) if newest is not None else 1, now)
                out[tp.topic] = end
            db.execute("COMMIT")
            return out
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _recent(self, db: sqlite3.Connection, tp: TopicPlan, now: float,
                max_age_s: float) -> tuple[Cut | None, list[Cut]]:
        """The topic's newest cut of this incarnation (None: none, or the newest is another incarnation's) and its
        cuts young enough to take, newest first."""
        newest: Cut | None = None
        fresh: list[Cut] = []
        rows = db.execute("SELECT seq, incarnation, at, ends FROM cuts WHERE topic = ? ORDER BY seq DESC",
                          (tp.topic,))
        for seq, inc, at, ends in rows:
            if inc != tp.incarnation:
                if newest is None:  # the newest is another incarnation's: a new sequence starts after it
                    return Cut(int(seq), float(at), {}), []
                break
            cut = Cut(int(seq), float(at), {int(p): int(o) for p, o in json.loads(ends).items()})
            if newest is None:
                newest = cut
            if now - cut.at > max_age_s:
                break  # recorded in order (at is taken inside the transaction): the older ones are older still
            fresh.append(cut)
        return newest, fresh

    def _record(self, db: sqlite3.Connection, tp: TopicPlan, end: Ends, seq: int, now: float) -> None:
        db.execute("DELETE FROM cuts WHERE topic = ? AND incarnation != ?", (tp.topic, tp.incarnation))
        db.execute("INSERT INTO cuts (topic, seq, incarnation, at, ends) VALUES (?, ?, ?, ?, ?)",
                   (tp.topic, seq, tp.incarnation, now, json.dumps({str(p): o for p, o in sorted(end.items())})))
        if seq > self.keep:
            db.execute("DELETE FROM cuts WHERE topic = ? AND seq <= ?", (tp.topic, seq - self.keep))

    def cuts(self, topic: str) -> list[Cut]:
        """Every cut the ledger holds for ``topic``, oldest first (for tests and diagnostics)."""
        rows = self._open().execute("SELECT seq, at, ends FROM cuts WHERE topic = ? ORDER BY seq", (topic,))
        return [Cut(int(s), float(a), {int(p): int(o) for p, o in json.loads(e).items()}) for s, a, e in rows]


class SharedCuts:
    """A source reader's handle on its app's cut ledger (driver side only: opened on first use, closed by stop()).

    Never fails the reader: without a ledger (no path yet, or one that cannot be used) it returns the reader's
    own ends, and warns at most once a minute.
    """

    def __init__(self, ledger: str | None, ref: str | None, max_age_s: float, source: str) -> None:
        self._path = ledger
        self._ref = ref
        self.max_age_s = max_age_s
        self.source = source
        self._ledger: CutLedger | None = None
        self._warned_at = -WARN_EVERY_S
        self._planned_at: float | None = None  # when this reader last planned a batch (its cycle: age_limit)

    @classmethod
    def from_options(cls, options: Any, source: str) -> SharedCuts | None:
        """From a source's options (None when neither ``cutLedger`` nor ``cutLedgerRef`` is given)."""
        ledger = options.get(LEDGER_OPTION) or None
        ref = options.get(LEDGER_REF_OPTION) or None
        if ledger is None and ref is None:
            return None
        raw = options.get(MAX_AGE_OPTION)
        try:
            age_ms = float(raw) if raw not in (None, "") else float(DEFAULT_MAX_AGE_MS)
        except ValueError:
            age_ms = -1.0
        if not age_ms >= 0:
            raise ValueError(f"{source} source: {MAX_AGE_OPTION} must be a number of milliseconds >= 0, got {raw!r}")
        return cls(ledger, ref, age_ms / 1000, source)

    def _resolve(self) -> CutLedger | None:
        if self._ledger is None:
            path = self._path
            if path is None and self._ref is not None:
                try:
                    path = Path(self._ref).read_text(encoding="utf-8").strip() or None
                except FileNotFoundError:
                    return None  # the runtime has not said where yet (or this is not the runtime's query)
            if path is None:
                return None
            self._ledger = CutLedger(path, max_age_s=self.max_age_s)
        return self._ledger

    def age_limit(self, now: float) -> float:
        """The oldest cut this query takes, in seconds: ``max_age_s``, or twice its own batch cycle when that is
        longer (at most ``MAX_AGE_CAP_S``).

        Why adaptive: a query whose batches take 3 s (a loaded machine, a big aggregation) plans every 3 s, and
        every cut the others recorded since its last plan is older than a fixed 1 s by then: it took none of
        them, ended on its own offsets, and its store shared no Position with the others (statements over both
        waited, then failed NO_COMMON_POSITION). Its freshness is its batch time's anyway; taking cuts up to two
        cycles old costs it about that much more, and nothing to the queries that keep up.
        """
        cycle = 0.0 if self._planned_at is None else max(0.0, now - self._planned_at)
        self._planned_at = now
        return min(MAX_AGE_CAP_S, max(self.max_age_s, 2 * cycle))

    def ends(self, topics: Sequence[TopicPlan], looked_at: float) -> dict[str, Ends]:
        """Each topic's batch end: the ledger's rule, or the reader's own ends when the ledger cannot be used."""
        try:
            ledger = self._resolve()
            if ledger is not None:
                return ledger.plan(topics, looked_at, self.age_limit(time.time()))
        except (sqlite3.Error, OSError, ValueError) as exc:
            if self._ledger is not None:
                self._ledger.close()  # opened again next time (a damaged file replaced, space freed)
            now = time.monotonic()
            if now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                msg = (f"iqgate {self.source} source: the batch cut ledger {self._ledger.path if self._ledger else ''} "
                       f"cannot be used ({exc}); this query ends its batches on its own offsets meanwhile")
                log.warning(msg)
                print(msg, file=sys.stderr, flush=True)  # the source runs in Spark's Python process: no log config
        return {tp.topic: dict(tp.own) for tp in topics}

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()


def batch_ends(topics: Sequence[str], avail: Mapping[tuple[str, int], tuple[int, int]], max_rows: int | None,
               cuts: SharedCuts | None, incarnations: Mapping[str, Any], looked_at: float) -> dict[str, Any]:
    """A batch's end offsets ``{topic: {"<partition>": end}}`` from ``(start, available end)`` per partition.

    Alone: everything available, or what ``max_rows`` (the read limit) admits. With shared cuts: the app's
    cut ledger decides, within the same limit. Both sources (iqlog, iqkafka) plan through this.
    """
    own = admit(dict(avail), max_rows) if max_rows is not None else dict(avail)

    def of(m: Mapping[tuple[str, int], tuple[int, int]], t: str, i: int) -> Ends:
        return {p: v[i] for (tt, p), v in m.items() if tt == t}

    if cuts is None:
        ends = {t: of(own, t, 1) for t in topics}
    else:
        spare = 0  # the limit's records no topic took, shared over the topics
        if max_rows is not None:
            spare = max(0, max_rows - sum(e - s for s, e in own.values())) // max(1, len(topics))
        plans = [TopicPlan(topic=t, incarnation=str(incarnations.get(t) or ""), start=of(avail, t, 0),
                           available=of(avail, t, 1), own=of(own, t, 1),
                           budget=None if max_rows is None else _records(of(own, t, 1), of(avail, t, 0)) + spare)
                 for t in topics]
        ends = cuts.ends(plans, looked_at)
    return {t: {str(p): e for p, e in sorted(ends.get(t, {}).items())} for t in topics}


def prepare_ledger(path: Path) -> None:
    """Create the ledger (WAL mode, its table) before any query plans, so their first plans do not race for it.

    A file that is no SQLite database is deleted and made again: the ledger holds no state anything depends on
    (a query with no cut to take records one), and a damaged one would only make every query plan alone.
    """
    ledger = CutLedger(path)
    try:
        ledger.plan([])
    except sqlite3.DatabaseError as exc:
        ledger.close()
        log.warning("the batch cut ledger %s is damaged (%s); it starts over", path, exc)
        for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            f.unlink(missing_ok=True)
        ledger.plan([])
    finally:
        ledger.close()


def _refs_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"iqgate-cut-ledgers-{uid}"


def new_ledger_ref() -> Path:
    """A fresh place for a Topology's ledger reference (the file itself is written by ``bind_ledger_ref``)."""
    return _refs_dir() / f"{uuid.uuid4().hex}.ref"


def bind_ledger_ref(ref: Path, ledger: Path) -> None:
    """Say where the ledger is: written atomically, read by the sources' planners in Spark's Python processes."""
    ref.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
    tmp.write_text(str(Path(ledger).resolve()), encoding="utf-8")
    os.replace(tmp, ref)


def unbind_ledger_ref(ref: Path) -> None:
    """Remove a ledger reference (a planner that already found its ledger keeps it)."""
    try:
        ref.unlink()
    except FileNotFoundError:
        pass
