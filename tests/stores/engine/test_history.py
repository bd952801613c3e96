"""A store partition read as of an earlier Position it held answers exactly what it answered then (issue 47).

Differential: random batches (inserts, updates, deletes, several changes of one row in a batch, empty batches,
a versioned store's retention dropping old versions, window and session deletes) go into a real SQLite file;
after each one every query type the kind answers (ArrowQuery included) is read the ordinary way and recorded
with the Position; then every recorded Position is read back through ``query(..., snapshot=...)`` and must
give the same answers and that Position. Also: pruning (POSITION_NOT_KEPT, what it says), a file made before
history (a writer migrates it; a reader without history keeps only the current state), history a writer did
not keep is never trusted.
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from stores.catalog.schema import StoreKind
from stores.engine import Retention, open_partition
from stores.engine.base import PartitionStore
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.query import RangeQuery
from stores.iqv2.result import FailureReason
from tests.stores.engine.history_cases import KINDS, UNBOUNDED, answers, plain, queries, random_batch, spec_of

BATCHES = 24
_WHOLE = {StoreKind.KEY_VALUE: "all", StoreKind.TIMESTAMPED_KEY_VALUE: "ts all", StoreKind.WINDOW: "starts 0..100",
          StoreKind.SESSION: "sessions of 3", StoreKind.VERSIONED: "all versions"}


def _advance(rng: random.Random, offsets: list[int]) -> Position:
    """The next batch's Position over two source partitions: each moves on or not (both may stay put)."""
    for p in range(2):
        if rng.random() < 0.7:
            offsets[p] += rng.randrange(1, 4)
    return Position.from_map({"t": {0: offsets[0], 1: offsets[1]}, "other": {0: 1}})


def _write_and_record(store: PartitionStore, kind: StoreKind, rng: random.Random, first: int, n: int,
                      offsets: list[int], seen: dict[Position, dict[str, object]]) -> None:
    qs = queries(kind)
    for i in range(first, first + n):
        store.apply_batch(i, random_batch(kind, rng, i), _advance(rng, offsets))
        positions, got = answers(store, qs)
        assert len(positions) == 1
        seen[positions.pop()] = got  # a Position held across batches: its newest state is the one read as of it


def _check_all(store: PartitionStore, kind: StoreKind, seen: dict[Position, dict[str, object]]) -> None:
    qs = queries(kind)
    for position, want in seen.items():
        positions, got = answers(store, qs, snapshot=position)
        assert positions == {position}
        for name in want:
            assert got[name] == want[name], (kind, position, name)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kept_position_reads_back_what_was_current_then(tmp_path: Path, kind: StoreKind, seed: int) -> None:
    rng = random.Random(seed * 100 + KINDS.index(kind))
    store = open_partition(spec_of(kind), 0, tmp_path / "p.db", synchronous="OFF")
    try:
        seen: dict[Position, dict[str, object]] = {}
        offsets = [0, 0]
        _write_and_record(store, kind, rng, 0, BATCHES // 2, offsets, seen)
        _check_all(store, kind, seen)  # halfway: as of the recent past, then more history on top
        _write_and_record(store, kind, rng, BATCHES // 2, BATCHES - BATCHES // 2, offsets, seen)
        _check_all(store, kind, seen)
        kept = store.kept_positions()
        assert kept[0] == store.current_position() and set(kept) == set(seen) and len(kept) == len(seen)
        assert all(a.covers(b) and a != b for a, b in zip(kept, kept[1:])), "newest first"
        # a snapshot naming one source partition: the newest state with that offset; other topics are ignored
        name = _WHOLE[kind]
        for position in kept:
            part0 = Position.from_map({"t": {0: position.offset("t", 0)}, "elsewhere": {3: 9}})
            newest = next(p for p in kept if p.offset("t", 0) == position.offset("t", 0))
            r = store.query(dict(queries(kind))[name], UNBOUNDED, snapshot=part0)
            assert r.is_success and r.position == newest
            assert plain(r.result) == seen[newest][name]
    finally:
        store.close()


def _filled(tmp_path: Path, kind: StoreKind = StoreKind.KEY_VALUE, batches: int = 10, **options: object) -> PartitionStore:
    store = open_partition(spec_of(kind, **options), 0, tmp_path / "p.db", synchronous="OFF")
    for i in range(batches):
        store.apply_batch(i, [Change(k, (i * 10 + k, "x"), 1000 + i) for k in range(i % 3, 8, 2)] +
                          [Change(i % 7, None, 1000 + i)], Position.from_map({"t": {0: 10 * (i + 1)}}))
    return store


def _undo_batches(store: PartitionStore) -> set[int]:
    with sqlite3.connect(store.path) as c:
        undo = {b for (b,) in c.execute(f"SELECT DISTINCT b FROM {store.TABLE}_undo")}
        assert undo <= {b for (b,) in c.execute("SELECT b FROM history")}
    return undo


@pytest.mark.parametrize("kind", [StoreKind.KEY_VALUE, StoreKind.VERSIONED])
def test_history_older_than_kept_is_not_kept_and_says_so(tmp_path: Path, kind: StoreKind) -> None:
    store = _filled(tmp_path, kind, history_batches=3)
    try:
        at = lambda o: Position.from_map({"t": {0: o}})  # noqa: E731
        assert store.kept_positions() == [at(100), at(90), at(80), at(70)]
        assert len(_undo_batches(store)) <= 3
        for o in (70, 80, 90, 100):
            assert store.query(RangeQuery.with_no_bounds() if kind is not StoreKind.VERSIONED else
                               queries(kind)[-2][1], UNBOUNDED, snapshot=at(o)).position == at(o)
        r = store.query(queries(kind)[0][1], UNBOUNDED, snapshot=at(40))
        assert r.failure_reason is FailureReason.POSITION_NOT_KEPT and r.failure_reason.retryable
        assert r.position == at(100)
        msg = r.failure_message
        assert str(at(40)) in msg and "current position is " + str(at(100)) in msg
        assert "oldest position it keeps is " + str(at(70)) in msg and "older than the history it keeps" in msg
        r = store.query(queries(kind)[0][1], UNBOUNDED, snapshot=at(85))  # between two batches: never held
        assert r.failure_reason is FailureReason.POSITION_NOT_KEPT
        assert "never held exactly that position" in r.failure_message and str(at(80)) in r.failure_message
    finally:
        store.close()


def test_history_kept_by_time_and_by_count(tmp_path: Path) -> None:
    store = _filled(tmp_path, batches=6, history_batches=2, history_ms=60_000)
    try:
        assert len(store.kept_positions()) == 6  # all six (the first from the empty Position) within the minute
    finally:
        store.close()
    store = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF",
                           history=Retention(batches=0, ms=1500))
    try:
        store.apply_batch(6, [Change(1, (1, "y"))], Position.from_map({"t": {0: 70}}))
        assert len(store.kept_positions()) == 7
        time.sleep(1.6)
        store.apply_batch(7, [Change(2, (2, "y"))], Position.from_map({"t": {0: 80}}))
        assert store.kept_positions() == [Position.from_map({"t": {0: 80}}), Position.from_map({"t": {0: 70}})]
        assert _undo_batches(store) == {7}  # the one batch younger than 1.5 s (tagged with the version before it)
    finally:
        store.close()


def test_no_history_when_switched_off_and_what_was_kept_is_dropped(tmp_path: Path) -> None:
    _filled(tmp_path).close()
    store = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF",
                           history=Retention(0, 0))
    try:
        assert store.kept_positions() == [store.current_position()] and not _undo_batches(store)
        store.apply_batch(10, [Change(1, (1, "z"))], Position.from_map({"t": {0: 110}}))
        assert len(store.kept_positions()) == 1
        r = store.query(RangeQuery.with_no_bounds(), UNBOUNDED, snapshot=Position.from_map({"t": {0: 100}}))
        assert r.failure_reason is FailureReason.POSITION_NOT_KEPT
    finally:
        store.close()
    with pytest.raises(ValueError, match="history batches"):
        open_partition(spec_of(StoreKind.KEY_VALUE, history_batches=-1), 0, tmp_path / "q.db")


def test_a_file_made_before_history_is_migrated_by_its_writer(tmp_path: Path) -> None:
    store = _filled(tmp_path, batches=3)
    before = {n: v for n, v in answers(store, queries(StoreKind.KEY_VALUE))[1].items()}
    store.close()
    with sqlite3.connect(tmp_path / "p.db") as c:  # the file as an iqgate without history left it
        c.execute("DROP TABLE kv_undo")
        c.execute("DROP TABLE history")
    at = lambda o: Position.from_map({"t": {0: o}})  # noqa: E731
    reader = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", read_only=True)
    try:
        assert reader.kept_positions() == [at(30)]
        assert answers(reader, queries(StoreKind.KEY_VALUE), snapshot=at(30)) == ({at(30)}, before)
        assert reader.query(RangeQuery.with_no_bounds(), UNBOUNDED,
                            snapshot=at(20)).failure_reason is FailureReason.POSITION_NOT_KEPT
        for _ in range(2):  # the migration is idempotent
            writer = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF")
            writer.close()
        writer = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", synchronous="OFF")
        try:
            writer.apply_batch(3, [Change(0, None), Change(1, (7, "new"))], at(40))
            writer.apply_batch(4, [Change(1, (8, "newer")), Change(9, (9, "n"))], at(50))
            for store in (writer, reader):  # the reader's connections, opened before the migration, too
                assert store.kept_positions() == [at(50), at(40), at(30)]
                assert answers(store, queries(StoreKind.KEY_VALUE), snapshot=at(30)) == ({at(30)}, before)
                assert [kv.key for kv in store.query(RangeQuery.with_no_bounds(), UNBOUNDED,
                                                     snapshot=at(40)).result] == [1, 3, 4, 5, 6, 7]
        finally:
            writer.close()
    finally:
        reader.close()


def test_history_a_writer_did_not_keep_is_never_trusted(tmp_path: Path) -> None:
    store = _filled(tmp_path, batches=4)
    store.close()
    with sqlite3.connect(tmp_path / "p.db") as c:  # a batch applied by a writer that kept no history
        c.execute("UPDATE kv SET v0 = -1")
        c.execute("UPDATE meta SET version = version + 1, position = '{\"t\":{\"0\":50}}'")
    reader = open_partition(spec_of(StoreKind.KEY_VALUE), 0, tmp_path / "p.db", read_only=True)
    try:
        assert reader.kept_positions() == [Position.from_map({"t": {0: 50}})]
        r = reader.query(RangeQuery.with_no_bounds(), UNBOUNDED, snapshot=Position.from_map({"t": {0: 40}}))
        assert r.failure_reason is FailureReason.POSITION_NOT_KEPT
    finally:
        reader.close()


def test_reset_forgets_the_history(tmp_path: Path) -> None:
    store = _filled(tmp_path, batches=4)
    try:
        store.reset()
        assert store.kept_positions() == [Position.empty()] and not _undo_batches(store)
        r = store.query(RangeQuery.with_no_bounds(), UNBOUNDED, snapshot=Position.from_map({"t": {0: 30}}))
        assert r.failure_reason is FailureReason.NOT_UP_TO_BOUND
    finally:
        store.close()
