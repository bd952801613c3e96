"""ChangelogWriter on the embedded log: one record per store partition per batch, before the store commits it;
replays leave changelog and store agreeing; bad input writes neither."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stores.catalog.partitioner import partition_for_key
from stores.changelog import ChangelogRecord, ChangelogWriter, EventLogChangelog, changelog_topic, store_of_topic
from stores.changelog.record import ChangelogFormatError
from stores.engine.change import Change
from stores.engine.codec import BatchError
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog

from .helpers import APP, batch, contents, kv_spec, logged_writer, open_app, position


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "state")
    yield log, app, tmp_path / "state"
    app.close()


def _records(log: EventLog, p: int) -> list[ChangelogRecord]:
    topic = changelog_topic(APP, "revenue")
    return [ChangelogRecord.from_value(r.value, "test") for r in log.read(topic, p)]


def test_every_partition_logs_every_batch_with_its_position(env) -> None:
    log, app, state = env
    w = logged_writer(app, EventLogChangelog(log))
    for i in range(4):
        w.write_batch(i, batch(i), position(i))
    topic = changelog_topic(APP, "revenue")
    assert log.list_topics()[topic] == 3
    for p in range(3):
        recs = _records(log, p)
        assert [r.batch_id for r in recs] == [0, 1, 2, 3]
        assert [r.position for r in recs] == [Position.from_map(position(i)) for i in range(4)]
        assert recs[0].spec == kv_spec()
        rows, pos, last = contents(state, kv_spec(), p)
        assert last == 3 and Position.from_json(pos) == Position.from_map(position(3))
    # the records hold exactly the rows that reached the stores (each key in one partition)
    logged_keys = {k for p in range(3) for r in _records(log, p) for k in r.rows.column("k").to_pylist()}
    assert logged_keys == {c.key for i in range(4) for c in batch(i)}


def test_a_replayed_batch_is_neither_logged_nor_applied_twice(env) -> None:
    log, app, _ = env
    w = logged_writer(app, EventLogChangelog(log))
    w.write_batch(0, batch(0), position(0))
    w.write_batch(0, batch(0), position(0))
    w2 = logged_writer(app, EventLogChangelog(log))  # a restarted pipeline reads the changelog's tail
    w2.write_batch(0, batch(0), position(0))
    assert [len(_records(log, p)) for p in range(3)] == [1, 1, 1]


def test_a_crash_between_append_and_commit_applies_the_logged_record(env) -> None:
    """The changelog got batch 1 but the store did not; the replay computes other rows: the logged ones win."""
    log, app, state = env
    cl = EventLogChangelog(log)
    w = logged_writer(app, cl)
    w.write_batch(0, batch(0), position(0))
    spec = kv_spec()
    p = partition_for_key("c1", 3)
    rows = pa.table({"k": ["c1"], "ts": pa.nulls(1, pa.int64()), "ws": pa.nulls(1, pa.int64()),
                     "we": pa.nulls(1, pa.int64()), "del": [False], "v0": [111.0], "v1": [1]})
    cl.append(changelog_topic(APP, "revenue"), {p: ChangelogRecord(spec, 1, Position.from_map(position(1)), None,
                                                                   rows)})
    w2 = logged_writer(app, cl)  # the restarted pipeline
    w2.write_batch(1, [Change("c1", (999.0, 9))], position(1))
    got, pos, last = contents(state, spec, p)
    assert last == 1 and any(r[0] == "c1" and 111.0 in r for r in got), got
    assert not any(r[0] == "c1" and 999.0 in r for r in got)
    assert [r.batch_id for r in _records(log, p)] == [0, 1]  # not logged again
    for q in set(range(3)) - {p}:  # the other partitions had not logged batch 1: they log the replay's share
        assert [r.batch_id for r in _records(log, q)] == [0, 1]


def test_bad_input_writes_neither_changelog_nor_store(env) -> None:
    log, app, state = env
    w = logged_writer(app, EventLogChangelog(log))
    w.write_batch(0, batch(0), position(0))
    with pytest.raises(BatchError, match="NaN|null|change #"):
        w.write_batch(1, [Change("c1", (1.0, 1)), Change(None, (2.0, 2))], position(1))
    with pytest.raises(BatchError, match="batch_id"):
        w.write_batch(-1, [], position(1))
    with pytest.raises(BatchError, match="position"):
        w.write_batch(1, [], "not a position")  # type: ignore[arg-type]
    assert [len(_records(log, p)) for p in range(3)] == [1, 1, 1]
    assert {contents(state, kv_spec(), p)[2] for p in range(3)} == {0}


def test_a_changelog_that_disagrees_with_the_store_is_refused_by_name(env) -> None:
    """The changelog claims a later batch than the store for a partition, but its last record is another batch."""
    log, app, _ = env
    cl = EventLogChangelog(log)
    w = logged_writer(app, cl)
    w.write_batch(0, batch(0), position(0))
    spec = kv_spec()
    empty = pa.table({"k": pa.array([], pa.string())})
    cl.append(changelog_topic(APP, "revenue"), {0: ChangelogRecord(spec, 5, Position.empty(), None, empty)})
    w2 = ChangelogWriter(app.writer("revenue"), cl, APP)
    with pytest.raises(BatchError, match="disagree"):
        w2.write_batch(2, batch(2), position(2))


def test_topic_names_and_damaged_records() -> None:
    assert changelog_topic("shop", "revenue") == "shop-revenue-changelog"
    assert store_of_topic("shop", "shop-revenue-changelog") == "revenue"
    assert store_of_topic("shop", "orders") is None and store_of_topic("other", "shop-revenue-changelog") is None
    with pytest.raises(ChangelogFormatError, match="not a changelog record"):
        ChangelogRecord.from_value({"k": 1}, "t/0@0")
    with pytest.raises(ChangelogFormatError, match="base64"):
        ChangelogRecord.from_value({"rows": "!!", "f": 1}, "t/0@0")
    with pytest.raises(ChangelogFormatError, match="format"):
        ChangelogRecord.from_value({"rows": "", "f": 99}, "t/0@1")
    with pytest.raises(ChangelogFormatError, match="no iqgate.changelog header"):
        ChangelogRecord.from_kafka(b"x", [], "t/0@2")
    with pytest.raises(ChangelogFormatError, match="damaged"):
        ChangelogRecord.from_kafka(b"not arrow", [("iqgate.changelog", b'{"f": 1, "b": 0, "p": {}, "s": {}}')],
                                   "t/0@3")


def test_records_are_compressed_and_records_of_the_first_format_still_read(env) -> None:
    """zstd-compressed IPC since 2026-11-26 (issue 22: a big batch's record is copied several times on its way to
    the log); a record written before, uncompressed, restores the same rows."""
    import base64

    log, app, _ = env
    w = logged_writer(app, EventLogChangelog(log))
    big = [Change(f"key-{i:06d}", (float(i % 7), i % 5)) for i in range(20_000)]
    w.write_batch(0, big, position(0))
    [rec] = _records(log, 0)
    compressed = rec.rows_buffer()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rec.rows.schema) as plain:  # the first format's record body
        plain.write_table(rec.rows)
    assert len(compressed) < len(sink.getvalue()) / 2
    legacy = {**rec.header(), "rows": base64.b64encode(sink.getvalue()).decode("ascii")}
    assert ChangelogRecord.from_value(legacy, "legacy").rows.equals(rec.rows)
    assert ChangelogRecord.from_kafka(rec.rows_ipc(), rec.to_kafka()[1], "kafka").rows.equals(rec.rows)
    # the fresh record's rows are in key order: what the store's merge sorts into, so it is applied as it is
    keys = rec.rows.column("k").to_pylist()
    assert keys == sorted(keys)


def test_small_records_are_written_plain_and_read_as_the_compressed_ones(env) -> None:
    """Under ``COMPRESS_MIN_ROWS`` rows the zstd frames cost more time than they save (a live pipeline's batch
    is a few rows): such a record's body is plain IPC, and both carriers read it back as they read a big one."""
    import dataclasses
    import json

    from stores.changelog.record import COMPRESS_MIN_ROWS

    log, app, _ = env
    w = logged_writer(app, EventLogChangelog(log))
    w.write_batch(0, [Change(f"key-{i:06d}", (float(i % 7), i % 5)) for i in range(20 * COMPRESS_MIN_ROWS)],
                  position(0))
    [rec] = _records(log, 0)
    small = dataclasses.replace(rec, rows=rec.rows.slice(0, COMPRESS_MIN_ROWS - 1))
    big = dataclasses.replace(rec, rows=rec.rows.slice(0, COMPRESS_MIN_ROWS))
    assert small.rows_buffer().equals(_plain(small.rows))  # byte for byte what an uncompressed writer writes
    assert big.rows_buffer().size < _plain(big.rows).size  # compressed from the threshold on
    for r in (small, big):
        assert ChangelogRecord.from_value(r.to_value(), "value").rows.equals(r.rows)
        assert ChangelogRecord.from_kafka(r.rows_ipc(), r.to_kafka()[1], "kafka").rows.equals(r.rows)
    assert small.header()["s"] == json.loads(small.spec.to_json())  # the cached spec is the spec


def _plain(rows: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as w:
        w.write_table(rows)
    return sink.getvalue()


@pytest.mark.parametrize(("synchronous", "fsync"), [("FULL", True), ("NORMAL", False), ("EXTRA", True)])
def test_the_pipelines_changelog_is_as_durable_as_its_stores(tmp_path, synchronous, fsync) -> None:
    """SQLite NORMAL does not sync each commit: the changelog record of that commit is not synced either."""
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.pipeline.changelogs import ChangelogWriters

    class PipelineTopology(StoreTopology):  # what ChangelogWriters reads of a pipeline's Topology
        log = EventLog(tmp_path / "log")
        changelogs = True

    app = StreamsApp(PipelineTopology([kv_spec()]), application_id=APP, state_dir=str(tmp_path / "state"),
                     synchronous=synchronous)
    try:
        writers = ChangelogWriters(PipelineTopology([kv_spec()]), app)
        assert writers._log is not None and writers._log.fsync is fsync
    finally:
        app.close()


def test_the_pipeline_prepares_a_changelog_before_its_first_batch(tmp_path, caplog) -> None:
    """``ChangelogWriters.prepare`` creates the topic and reads its tail in the background (on Kafka that is
    round trips the first batch would wait for after Spark's job); the batch then finds it done. A store that
    cannot be prepared (not open) is left to its first batch, which reports it: nothing is raised here."""
    import logging
    import time

    from stores.app.streams import StoreTopology, StreamsApp
    from stores.pipeline.changelogs import ChangelogWriters

    class PipelineTopology(StoreTopology):
        log = EventLog(tmp_path / "log")
        changelogs = True

    topic = changelog_topic(APP, "revenue")
    app = StreamsApp(PipelineTopology([kv_spec()]), application_id=APP, state_dir=str(tmp_path / "state"))
    app.start()
    try:
        writers = ChangelogWriters(PipelineTopology([kv_spec()]), app)
        writers.prepare("revenue")
        deadline = time.monotonic() + 30
        while writers.get("revenue", None)._logged is None and time.monotonic() < deadline:
            time.sleep(0.01)
        w = writers.get("revenue", None)
        assert w._logged == {0: -1, 1: -1, 2: -1}  # the tail, read before any batch
        assert topic in PipelineTopology.log.list_topics()
        w.write_batch(0, batch(0), position(0))
        assert [len(_records(PipelineTopology.log, p)) for p in range(3)] == [1, 1, 1]
        assert w._logged == {0: 0, 1: 0, 2: 0}
        with caplog.at_level(logging.DEBUG, logger="stores.pipeline.changelogs"):
            writers.prepare("no_such_store")
            deadline = time.monotonic() + 30
            while "not prepared ahead" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.01)
        assert "store no_such_store: changelog not prepared ahead of the first batch" in caplog.text
    finally:
        app.close()


# -- big batches: the append runs beside the partitions' merges, which commit only after it ------------------
BIG = 30_000  # over PARALLEL_MIN_ROWS: the parallel path


def _big_table(i: int) -> pa.Table:
    return pa.table({"k": [f"c{k}" for k in range(BIG)], "v0": [float(k * (i + 1)) for k in range(BIG)],
                     "v1": pa.array([i + 1] * BIG, pa.int64())})


def _parallel_writer(app, cl) -> ChangelogWriter:
    w = logged_writer(app, cl)
    w.inner.threads = 2  # the parallel path whatever this machine's core count
    assert w.inner.threads_for(BIG) == 2
    return w


def test_a_big_batch_whose_changelog_append_fails_commits_no_partition_and_its_retry_logs_once(tmp_path) -> None:
    from tests.fault_fs import FailingOps

    ops = FailingOps(at=10**9)
    log = EventLog(tmp_path / "log", file_ops=ops)
    app = open_app(tmp_path / "state")
    try:
        w = _parallel_writer(app, EventLogChangelog(log))
        w.write_table(0, _big_table(0), Position.from_map(position(0)))
        before = [contents(tmp_path / "state", kv_spec(), p) for p in range(3)]
        ops.at = ops.n  # the next write step of the log fails: the disk is full
        with pytest.raises(OSError, match="No space left"):
            w.write_table(1, _big_table(1), Position.from_map(position(1)))
        assert [contents(tmp_path / "state", kv_spec(), p) for p in range(3)] == before  # no partition has it
        assert [[r.batch_id for r in _records(log, p)] for p in range(3)] == [[0]] * 3
        w.write_table(1, _big_table(1), Position.from_map(position(1)))  # the retry, once the disk has room
        assert [[r.batch_id for r in _records(log, p)] for p in range(3)] == [[0, 1]] * 3
        for p in range(3):
            rows, pos, last = contents(tmp_path / "state", kv_spec(), p)
            assert last == 1 and Position.from_json(pos) == Position.from_map(position(1))
            assert {r[0]: r[2] for r in rows} == {r.rows.column("k")[j].as_py(): r.rows.column("v0")[j].as_py()
                                                  for r in _records(log, p)[1:] for j in range(len(r.rows))}
        assert sum(len(contents(tmp_path / "state", kv_spec(), p)[0]) for p in range(3)) == BIG
    finally:
        app.close()


def test_a_big_batch_whose_partition_fails_after_the_append_applies_the_logged_record_on_retry(tmp_path) -> None:
    """The append succeeded, one partition could not commit: the others hold the batch, and the retry applies the
    logged record to that one without logging the batch again."""
    from tests.fault_fs import chattr

    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "state")
    frozen = None
    try:
        w = _parallel_writer(app, EventLogChangelog(log))
        w.write_table(0, _big_table(0), Position.from_map(position(0)))
        frozen = app.writer("revenue").partition_stores[1].path
        why = chattr("+i", frozen)
        if why is not None:
            frozen = None
            pytest.skip(f"cannot make files immutable here: {why}")
        with pytest.raises(PermissionError, match="cannot be written"):
            w.write_table(1, _big_table(1), Position.from_map(position(1)))
        assert chattr("-i", frozen) is None
        assert [contents(tmp_path / "state", kv_spec(), p)[2] for p in range(3)] == [1, 0, 1]
        assert [[r.batch_id for r in _records(log, p)] for p in range(3)] == [[0, 1]] * 3
        w.write_table(1, _big_table(1), Position.from_map(position(1)))
        assert [contents(tmp_path / "state", kv_spec(), p)[2] for p in range(3)] == [1, 1, 1]
        assert [[r.batch_id for r in _records(log, p)] for p in range(3)] == [[0, 1]] * 3  # not logged twice
        rows, _, _ = contents(tmp_path / "state", kv_spec(), 1)
        assert {r[0]: r[2] for r in rows} == {r.rows.column("k")[j].as_py(): r.rows.column("v0")[j].as_py()
                                              for r in _records(log, 1)[1:] for j in range(len(r.rows))}
    finally:
        if frozen is not None:
            chattr("-i", frozen)
        app.close()
