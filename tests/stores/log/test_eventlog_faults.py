"""The embedded log under faults (issue 21): every write step failing, a full disk, torn tails, kill -9.

An append that fails must leave the partition byte for byte as it was and
say so; an append that was acknowledged must survive anything; a reader must
never parse garbage.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stores.catalog.partitioner import partition_for_key
from stores.log.eventlog import CorruptLogError, EventLog, LogWriteError
from stores.log.segment import HEADER_SIZE
from tests.fault_fs import CountingOps, FailingOps, fill, mount_tmpfs

BATCH = [(f"k{i}", {"i": i, "pad": "x" * 300}, 1000 + i) for i in range(40)]


def _files(root: Path) -> dict[str, bytes]:
    d = root / "topics" / "t"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in (".rec", ".ix")}


def _everything(log: EventLog) -> list[tuple[int, int, object]]:
    return [(p, r.offset, r.value) for p in range(log.partitions("t")) for r in log.read("t", p)]


def _steps_of_one_append(tmp_path: Path) -> int:
    ops = CountingOps()
    log = EventLog(tmp_path / "count", file_ops=ops)
    log.create_topic("t", partitions=3)
    log.append_batch("t", BATCH[:5])
    ops.calls.clear()
    log.append_batch("t", BATCH)
    return len(ops.calls)


@pytest.mark.parametrize("mode", ["enospc", "eio", "short"])
def test_an_append_failing_at_any_step_leaves_every_partition_exactly_as_it_was(tmp_path, mode):
    steps = _steps_of_one_append(tmp_path)
    assert steps >= 3 * 4  # records, fsync, index, fsync per partition, then the commits
    for at in range(steps):
        root = tmp_path / f"{mode}-{at}"
        setup = EventLog(root)
        setup.create_topic("t", partitions=3)
        setup.append_batch("t", BATCH[:5])
        before, records = _files(root), _everything(setup)
        ops = FailingOps(at, mode)
        log = EventLog(root, file_ops=ops)
        try:
            log.append_batch("t", BATCH)
        except LogWriteError as exc:
            msg = str(exc)
            if "nothing was written" in msg:
                assert _files(root) == before, f"step {at} ({mode}) changed the files"
                assert _everything(setup) == records
                expected = [v["i"] for _, _, v in records]
            else:  # the commit phase failed after publishing some partitions: the message names exactly those
                m = re.search(r"partition\(s\) \[([\d, ]+)\] were written", msg)
                assert m, msg
                written = {int(x) for x in m.group(1).split(",")}
                want = records + [(p, 0, v) for k, v, _ in BATCH if (p := partition_for_key(k, 3)) in written]
                expected = [v["i"] for _, _, v in want]
                assert sorted(v["i"] for _, _, v in _everything(setup)) == sorted(expected)
        else:  # a failed step that does not fail an append (a short write that a retry completed)
            assert ops.tripped
            expected = [v["i"] for _, _, v in records] + [v["i"] for _, v, _ in BATCH]
            assert sorted(v["i"] for _, _, v in _everything(setup)) == sorted(expected)
        # the log goes on: the next append gets the next offsets, and nothing is lost or doubled
        setup.append_batch("t", BATCH)
        got = _everything(setup)
        assert sorted(v["i"] for _, _, v in got) == sorted(expected + [v["i"] for _, v, _ in BATCH])
        for p in range(3):
            assert [o for q, o, _ in got if q == p] == list(range(setup.end_offsets("t")[p]))


def test_a_torn_or_zero_filled_tail_is_cut_on_open_and_named_in_the_log(tmp_path, caplog):
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=2)
    log.append_batch("t", BATCH[:10], partition=0)
    d = tmp_path / "topics" / "t"
    # what an OS crash can leave: the header already counts 3 more records whose data never reached the disk
    rec_size = (d / "0.rec").stat().st_size
    with open(d / "0.rec", "ab") as f:
        f.write(b"\x00" * 4096)
    with open(d / "0.ix", "r+b") as f:
        f.seek(0, os.SEEK_END)
        for i in range(1, 4):
            f.write(struct.pack(">Q", rec_size + i * 100))
        f.seek(0)
        f.write(b"IQLOGIX2" + struct.pack(">QQ", 13, 13 ^ ((1 << 64) - 1)))
    with pytest.raises(CorruptLogError, match=r"CORRUPT_LOG: topic 't' partition 0 offset 10"):
        list(log.read_raw("t", 0, 0))  # a reader never parses the zeros as records
    with caplog.at_level(logging.WARNING, logger="stores.log"):
        repaired = log.recover()
    assert [(r[0], r[1], r[2]) for r in repaired] == [("t", 0, 10)]
    assert repaired[0][3] == 4096 + 3 * 8
    assert "partition 0" in caplog.text and "4120 bytes after offset 10" in caplog.text
    assert [r.value["i"] for r in log.read("t", 0)] == list(range(10))
    assert log.append("t", "z", {"i": 99}, 1, partition=0) == (0, 10)
    assert log.recover() == []


def test_a_damaged_committed_record_is_refused_not_parsed(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t")
    log.append_batch("t", BATCH[:3])
    path = tmp_path / "topics" / "t" / "0.rec"
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0x01  # one bit flipped inside record 0
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptLogError, match="offset 0: checksum mismatch"):
        log.read("t", 0)


def test_a_format_1_log_is_read_and_converted_on_the_first_append(tmp_path):
    d = tmp_path / "topics" / "t"
    d.mkdir(parents=True)
    (d / "topic.json").write_text(json.dumps({"name": "t", "partitions": 1, "epoch": "e1", "created_ms": 0}))
    lines = [json.dumps({"k": f"k{i}", "v": {"i": i}, "t": i}).encode() + b"\n" for i in range(3)]
    (d / "0.log").write_bytes(b"".join(lines))
    ends, pos = [], 0
    for line in lines:
        pos += len(line)
        ends.append(struct.pack(">Q", pos))
    (d / "0.idx").write_bytes(b"".join(ends))
    (d / "0.lock").touch()
    log = EventLog(tmp_path)
    assert log.end_offsets("t") == {0: 3}
    assert [r.value["i"] for r in log.read("t", 0)] == [0, 1, 2]
    assert log.append("t", "k9", {"i": 9}, 9) == (0, 3)
    assert not (d / "0.log").exists() and (d / "0.ix").stat().st_size == HEADER_SIZE + 4 * 8
    assert [(r.offset, r.value["i"]) for r in log.read("t", 0)] == [(0, 0), (1, 1), (2, 2), (3, 9)]


def test_a_full_disk_fails_appends_truthfully_and_they_resume_once_space_is_freed(tmp_path):
    fs = mount_tmpfs(tmp_path, 1 << 20)
    if isinstance(fs, str):
        pytest.skip(fs)
    try:
        log = EventLog(fs.path / "log")
        log.create_topic("t", partitions=2)
        acked = 0
        failure = None
        for i in range(2000):  # bounded: 1 MiB fills after a few hundred of these
            recs = [(f"k{i}-{j}", {"i": i * 10 + j, "pad": "y" * 200}, i) for j in range(10)]
            try:
                log.append_batch("t", recs)
                acked += len(recs)
            except LogWriteError as exc:
                failure = exc
                break
        assert failure is not None, "the tmpfs never filled up"
        assert "No space left on device" in str(failure) and "nothing was written" in str(failure)
        before = _files(fs.path / "log")
        assert len(_everything(log)) == acked
        with pytest.raises(LogWriteError):  # still full: still nothing written
            log.append_batch("t", recs)
        assert _files(fs.path / "log") == before
        fs.resize(2 << 20)
        log.append_batch("t", recs)
        got = _everything(log)
        assert len(got) == acked + len(recs)
        assert sorted(v["i"] for _, _, v in got) == list(range(acked + len(recs)))
        assert log.recover() == []  # nothing torn was left behind
    finally:
        fs.unmount()


def test_appends_fail_then_resume_when_a_filler_file_is_deleted(tmp_path):
    """The disk filled by someone else (a filler file), then freed: the way it happens in production."""
    fs = mount_tmpfs(tmp_path, 2 << 20)
    if isinstance(fs, str):
        pytest.skip(fs)
    try:
        log = EventLog(fs.path / "log")
        log.create_topic("t")
        log.append_batch("t", BATCH)
        filler = fill(fs)
        with pytest.raises(LogWriteError, match="nothing was written"):
            log.append_batch("t", BATCH)
        assert len(_everything(log)) == len(BATCH)
        filler.unlink()
        log.append_batch("t", BATCH)
        assert [o for _, o, _ in _everything(log)] == list(range(2 * len(BATCH)))
    finally:
        fs.unmount()


_APPENDER = """
import sys
from stores.catalog.partitioner import partition_for_key
from stores.log.eventlog import EventLog
log = EventLog(sys.argv[1])
i = 0
while True:
    recs = [(f"k{i}-{j}", {"i": i, "j": j}, i) for j in range(7)]
    out = log.append_batch("t", recs)
    print(i, flush=True)  # acknowledged: every record of batch i is durable
    i += 1
"""


def test_kill_9_during_appends_loses_no_acknowledged_record_and_leaves_no_garbage(tmp_path):
    root = tmp_path / "log"
    log = EventLog(root)
    log.create_topic("t", partitions=3)
    acked: set[int] = set()
    for round_ in range(6):
        child = subprocess.Popen([sys.executable, "-c", _APPENDER, str(root)], stdout=subprocess.PIPE, text=True,
                                 cwd=Path(__file__).resolve().parents[3])
        assert child.stdout is not None
        deadline = time.monotonic() + 30
        last = None
        for _ in range(10_000):
            line = child.stdout.readline()
            if not line or time.monotonic() > deadline:
                break
            last = int(line)
            acked.add(last)
            if last >= 5 + round_ * 3:
                break
        time.sleep(0.003 * round_)  # a different moment inside an append each round
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        assert last is not None, "the appender never acknowledged a batch"
        EventLog(root).recover()
        seen: dict[int, set[int]] = {}
        parts: dict[tuple[int, int], set[int]] = {}
        for p, _, v in _everything(log):
            seen.setdefault(v["i"], set()).add(v["j"])
            parts.setdefault((v["i"], p), set()).add(v["j"])
        for i in acked:
            assert seen.get(i) == set(range(7)), f"round {round_}: acknowledged batch {i} lost records"
        for (i, p), js in parts.items():  # a crash may publish some partitions of a batch, never part of one
            want = {j for j in range(7) if partition_for_key(f"k{i}-{j}", 3) == p}
            assert js == want, f"round {round_}: batch {i} is half visible in partition {p}: {sorted(js)}"
        for p in range(3):
            assert [o for q, o, _ in _everything(log) if q == p] == list(range(log.end_offsets("t")[p]))


def test_an_append_without_fsync_writes_the_same_records_and_syncs_nothing(tmp_path: Path) -> None:
    """``fsync=False`` (a changelog of stores that are not synced per commit): the same atomic append, no fsync."""
    ops = CountingOps()
    log = EventLog(tmp_path / "log", file_ops=ops)
    log.create_topic("t", partitions=2)
    ops.calls.clear()
    log.append_to_partitions("t", {0: [("a", {"x": 1}, 5)], 1: [("b", {"x": 2}, 6)]}, fsync=False)
    assert "fsync" not in ops.calls and ops.calls.count("pwrite") >= 4
    log.append_to_partitions("t", {0: [("c", {"x": 3}, 7)]})
    assert ops.calls.count("fsync") == 3  # records, index entries, then the committing header
    again = EventLog(tmp_path / "log")  # what another process reads
    assert [(r.key, r.value) for r in again.read("t", 0)] == [("a", {"x": 1}), ("c", {"x": 3})]
    assert [(r.key, r.value) for r in again.read("t", 1)] == [("b", {"x": 2})]
