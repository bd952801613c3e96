"""Stores of every kind written the way the pipeline writes them (ChangelogWriter over the embedded log, no Spark),
a seeded workload per kind, and a model of each store's answer computed from the workload alone: the oracle the
live feeds are held to at every progress Position."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.changelog import changelog_topic
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.live import Changes, Progress, Rebuilt, Snapshot
from stores.log.eventlog import EventLog
from stores.pipeline.changelogs import ChangelogWriters

APP = "shop"
MIN = 60_000

SPECS: dict[str, StoreSpec] = {
    "kv": StoreSpec("kv", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR),
                    (Column("total", SqlType.DOUBLE), Column("n", SqlType.BIGINT), Column("vip", SqlType.BOOLEAN)),
                    3, ("orders",)),
    "tkv": StoreSpec("tkv", StoreKind.TIMESTAMPED_KEY_VALUE, Column("k", SqlType.BIGINT),
                     (Column("amount", SqlType.DOUBLE), Column("tags", "ARRAY<VARCHAR>")), 2, ("orders",)),
    "win": StoreSpec("win", StoreKind.WINDOW, Column("k", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),), 2,
                     ("orders",), window_size_ms=MIN, window_advance_ms=MIN),
    "ses": StoreSpec("ses", StoreKind.SESSION, Column("k", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),), 2,
                     ("orders",), gap_ms=30_000),
    "ver": StoreSpec("ver", StoreKind.VERSIONED, Column("k", SqlType.VARCHAR), (Column("price", SqlType.DOUBLE),), 3,
                     ("orders",), history_retention_ms=10 * MIN),
    "ck": StoreSpec("ck", StoreKind.KEY_VALUE, (Column("region", SqlType.VARCHAR), Column("day", SqlType.DATE)),
                    (Column("qty", SqlType.BIGINT),), 2, ("orders",)),
}
KINDS = tuple(SPECS)


class LiveTopology(StoreTopology):
    """What ChangelogWriters and live feeds read of a pipeline's Topology: its log, changelogs on."""

    changelogs = True
    log: EventLog


def open_app(state_dir: Path, log: EventLog, *specs: StoreSpec) -> tuple[StreamsApp, ChangelogWriters]:
    topology = LiveTopology(list(specs))
    topology.log = log
    app = StreamsApp(topology, application_id=APP, state_dir=str(state_dir))
    app.start()
    return app, ChangelogWriters(topology, app)


def source_position(i: int) -> Position:
    """Batch ``i``'s source Position; batches 3, 8, 13, … repeat the one before (Spark's no-data batches)."""
    j = i - (1 if i % 5 == 3 else 0)
    return Position.from_map({"orders": {0: 10 * j + 9, 1: 10 * j + 4}})


def _keys(kind: str) -> list[Any]:
    if kind == "tkv":
        return list(range(100, 124))
    if kind == "ck":
        return [(r, date(2026, 1, d)) for r in ("eu", "us", "apac") for d in range(1, 7)]
    return [f"c{k:02d}" for k in range(24)]


def workload(kind: str, batches: int, seed: int = 7) -> list[list[Change]]:
    """Seeded batches of changes: upserts, deletes, a row changed twice in one batch (the later wins), and per kind
    windows, sessions merged away, and out-of-order versions, tombstones and overwritten versions."""
    rnd = random.Random(f"{kind}-{seed}")
    keys = _keys(kind)
    out: list[list[Change]] = []
    for i in range(batches):
        chosen = rnd.sample(keys, rnd.randint(0, 8)) if i % 4 != 2 else []  # some batches change nothing
        b: list[Change] = []
        for k in chosen:
            if kind == "kv":
                b.append(Change(k, None) if rnd.random() < 0.2 else
                         Change(k, (round(rnd.uniform(0, 100), 2), rnd.randint(0, 9), rnd.random() < 0.5)))
            elif kind == "tkv":
                b.append(Change(k, None) if rnd.random() < 0.2 else
                         Change(k, (round(rnd.uniform(0, 100), 2), [f"t{rnd.randint(0, 3)}"] * rnd.randint(0, 2)),
                                timestamp=1_700_000_000_000 + i * 1000 + rnd.randint(0, 999)))
            elif kind == "ck":
                b.append(Change(k, None) if rnd.random() < 0.2 else Change(k, (rnd.randint(0, 50),)))
            elif kind == "win":
                ws = MIN * rnd.randint(max(0, i - 3), i + 1)
                b.append(Change(k, None if rnd.random() < 0.15 else (rnd.randint(1, 40),), window_start=ws,
                                timestamp=ws + 5))
            elif kind == "ses":
                ws = 1000 * rnd.randint(0, 30)
                we = ws + 1000 * rnd.randint(0, 20)
                b.append(Change(k, None if rnd.random() < 0.2 else (rnd.randint(1, 9),), window_start=ws,
                                window_end=we, timestamp=we))
            else:  # versioned: versions in time order, some late, some tombstones, some overwriting a valid_from
                vf = 1_000_000 + MIN * (i + rnd.choice((1, 1, 1, 0, -2, -5)))
                b.append(Change(k, None if rnd.random() < 0.15 else (round(rnd.uniform(1, 9), 2),), timestamp=vf))
        if chosen and rnd.random() < 0.5:  # the same row twice in one batch: the later wins
            b.append(b[0]._replace(value=None if rnd.random() < 0.4 else b[-1].value if len(b) > 1 and
                                   kind in ("kv", "ck", "win", "ses") else b[0].value))
        out.append(b)
    return out


class Model:
    """A store's answer after each batch, from the changes alone: rows by identity, in stored forms
    (TIMESTAMP epoch ms, DATE days) and ``spec.columns()`` order."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.rows: dict[Any, tuple[Any, ...]] = {}
        self.versions: dict[Any, dict[int, tuple[Any, ...] | None]] = {}

    def _keycols(self, key: Any) -> tuple[Any, ...]:
        if self.spec.composite:
            return tuple((d - date(1970, 1, 1)).days if isinstance(d, date) else d for d in key)
        return (key,)

    def apply(self, changes: list[Change]) -> None:
        kind = self.spec.kind
        for ch in changes:
            key = tuple(ch.key) if isinstance(ch.key, (tuple, list)) else ch.key
            if kind in (StoreKind.WINDOW, StoreKind.SESSION):
                we = ch.window_end if ch.window_end is not None else ch.window_start + (self.spec.window_size_ms or 0)
                ident = (key, ch.window_start, we)
                if ch.value is None:
                    self.rows.pop(ident, None)
                else:
                    self.rows[ident] = (key, ch.window_start, we, *ch.value)
            elif kind is StoreKind.VERSIONED:
                self.versions.setdefault(key, {})[ch.timestamp] = ch.value
                vf = max(self.versions[key])
                latest = self.versions[key][vf]
                if latest is None:
                    self.rows.pop(key, None)
                else:
                    self.rows[key] = (key, *latest, vf, None)
            elif ch.value is None:
                self.rows.pop(key, None)
            elif kind is StoreKind.TIMESTAMPED_KEY_VALUE:
                self.rows[key] = (*self._keycols(key), *ch.value, ch.timestamp)
            else:
                self.rows[key] = (*self._keycols(key), *ch.value)

    def answer(self) -> set[tuple[Any, ...]]:
        return {_hashable(r) for r in self.rows.values()}


def _hashable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def identity_of(spec: StoreSpec) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    names = [c.name for c in spec.columns()]
    idx = [names.index(c.name) for c in spec.key_columns()]
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        idx += [names.index("window_start"), names.index("window_end")]
    return lambda row: tuple(row[i] for i in idx)


class Subscriber:
    """Applies a feed's events as a client would: the rows it holds by identity, and its Position."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.ident = identity_of(spec)
        self.rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.position: Position | None = None
        self.progress: list[Position] = []
        self.in_snapshot = False
        self.rebuilt = 0

    def apply(self, ev: Any) -> None:
        if isinstance(ev, Rebuilt):
            self.rebuilt += 1
            self.spec, self.ident = ev.spec, identity_of(ev.spec)
            self.rows.clear()
        elif isinstance(ev, Snapshot):
            if not self.in_snapshot:
                self.rows.clear()
                self.in_snapshot = True
            for r in ev.rows:
                self.rows[self.ident(r)] = r[:-2]
            if ev.last:
                self.in_snapshot = False
                self.position = ev.position
        elif isinstance(ev, Changes):
            for r in ev.upserts:
                self.rows[self.ident(r)] = r[:-2]
            for r in ev.deletes:
                self.rows.pop(self.ident(r), None)
            if ev.complete:
                self.position = ev.position
        elif isinstance(ev, Progress):
            self.position = ev.position
            self.progress.append(ev.position)

    def answer(self) -> set[tuple[Any, ...]]:
        return {_hashable(r) for r in self.rows.values()}


class Writer:
    """Writes a store's workload batch by batch through the pipeline's changelog writers, recording the model's
    answer after each batch (keyed by batch id) for the checks."""

    def __init__(self, app: StreamsApp, writers: ChangelogWriters, spec: StoreSpec, changes: list[list[Change]],
                 generation: int | None = None) -> None:
        self.app, self.writers, self.spec, self.changes = app, writers, spec, changes
        self.generation = generation
        self.model = Model(spec)
        self.answers: dict[int, set[tuple[Any, ...]]] = {}
        self.done = 0
        self.lock = threading.Condition()

    def write(self, upto: int) -> None:
        while self.done < upto:
            i = self.done
            self.writers.get(self.spec.name, self.generation).write_batch(i, self.changes[i], source_position(i))
            self.model.apply(self.changes[i])
            with self.lock:
                self.answers[i] = self.model.answer()
                self.done += 1
                self.lock.notify_all()

    def answer_at(self, batch: int, timeout_s: float = 20.0) -> set[tuple[Any, ...]]:
        with self.lock:
            if not self.lock.wait_for(lambda: batch in self.answers, timeout_s):
                raise AssertionError(f"batch {batch} was never written")
            return self.answers[batch]

    def topic(self) -> str:
        return changelog_topic(APP, self.spec.name, self.generation or 0)


def batch_of(position: Position, topic: str) -> int:
    """The batch a feed's Position is at: the embedded changelog holds one record per batch from batch 0, so the
    record's offset in partition 0 is its batch id."""
    return position.partition_positions(topic)[0]


def pull_answer(gateway: Any, spec: StoreSpec) -> set[tuple[Any, ...]]:
    """``SELECT *`` through the gateway (a pull query), in stored forms: the store's own answer."""
    rows = gateway.sql(f"SELECT * FROM {spec.name}").rows()
    out = set()
    for r in rows:
        out.add(tuple(_stored(v) for v in r))
    return out


def _stored(v: Any) -> Any:
    if isinstance(v, datetime):
        return int(v.replace(tzinfo=v.tzinfo or timezone.utc).timestamp() * 1000)
    if isinstance(v, date):
        return (v - date(1970, 1, 1)).days
    if isinstance(v, list):
        return tuple(v)
    return v


def crash_mid_batch(app: StreamsApp, log: EventLog, spec: StoreSpec, i: int, changes: list[Change],
                    committed: set[int], generation: int = 0, logged: set[int] | None = None,
                    topic_id: str | None = None) -> None:
    """What a pipeline killed between two partitions' commits leaves: batch ``i``'s records in the changelog (all
    partitions, as the writer appends them first; ``logged``: only those) and the batch committed by the
    ``committed`` partitions only. ``topic_id``: stamp the records with another topic's id."""
    from stores.changelog import ChangelogRecord, EventLogChangelog
    from stores.engine.batch import changes_to_table, encode, split_by_partition
    from stores.engine.codec import ValueCodec

    where = f"store {spec.name!r} batch {i}"
    table = encode(spec, changes_to_table(spec, ValueCodec(spec), changes, where), where)
    cl = EventLogChangelog(log)
    topic = changelog_topic(APP, spec.name, generation)
    pos = source_position(i)
    records = {p: ChangelogRecord(spec, i, pos, share.observed, share.rows, topic_id or cl.topic_id(topic))
               for p, share in enumerate(split_by_partition(spec, table)) if logged is None or p in logged}
    cl.append(topic, records)
    for p in sorted(committed):
        app.partition_store(spec.name, p).apply_rows(i, records[p].rows, pos, records[p].observed)


def drain(feed: Any, sub: Subscriber, until: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Apply a feed's events until ``until()`` holds."""
    import time

    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"the feed did not get there within {timeout_s} s (at {sub.position})")
        ev = feed.poll(0.2)
        if ev is not None:
            sub.apply(ev)
