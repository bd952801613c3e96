"""One partition of the embedded log on disk: checksummed records, a committed count, repair of torn tails.

Files of partition ``p`` (format 2)::

    <p>.rec   records back to back: [u32 length][u32 crc32][JSON payload]
    <p>.ix    header [b"IQLOGIX2"][u64 committed][u64 ~committed], then one u64 end position per record

Why this shape (issue 21): an append is visible only once the header's
committed count covers it, and the header is rewritten in place (16 bytes,
no new space needed) only after the records and their index entries are
written in full and fsynced. So a failed append (ENOSPC, EIO, a short write
on a full tmpfs), or a kill -9 at any point, leaves bytes that no reader ever
looks at; the appender cuts them off (truncate back) before it says the
append failed, and ``repair`` does the same on open after a crash. Readers
check every record's checksum and never parse garbage: a record that does
not check out within the committed range raises ``CorruptLogError``.

The count is stored with its complement, so a reader that races an
in-place header rewrite and sees a torn header re-reads it.

Format 1 (``<p>.log`` JSON lines + ``<p>.idx`` end positions, no checksums)
is still read, and converted to format 2 on the first append or repair.

All writes go through ``FileOps`` so tests can fail any single step
(``tests/stores/log/test_eventlog_faults.py``), as SQLite's own tests do.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FileOps", "EventLogError", "CorruptLogError", "LogWriteError", "PartitionFiles", "Repair", "MAGIC",
    "HEADER_SIZE", "encode_record",
]

log = logging.getLogger("stores.log")

MAGIC = b"IQLOGIX2"
_HDR = struct.Struct(">8sQQ")
HEADER_SIZE = _HDR.size
_ENTRY = struct.Struct(">Q")
_REC = struct.Struct(">II")
_MASK = (1 << 64) - 1
_REPAIR_SCAN_BYTES = 1 << 20  # how far back repair re-checks records when the last one is bad


class EventLogError(Exception):
    """Base of the log's errors."""


class LogWriteError(EventLogError, OSError):
    """An append that failed; the message says what was written (with this format: nothing)."""

    def __str__(self) -> str:  # the message already names the OS error; no "[Errno 28]" prefix
        return str(self.strerror)


class CorruptLogError(EventLogError):
    """A committed record whose checksum or framing does not check out (media damage, or a foreign write)."""


class FileOps:
    """The system calls an append makes; a test subclass fails any one of them (fault injection)."""

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)


class NoSyncOps(FileOps):
    """``ops`` without fsync: an append that survives a crashed process (the page cache has it) but not a
    power loss; for writers whose own data is no more durable than that (see ``EventLog.append_to_partitions``)."""

    def __init__(self, ops: FileOps) -> None:
        self._ops = ops

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return self._ops.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        return None

    def ftruncate(self, fd: int, length: int) -> None:
        self._ops.ftruncate(fd, length)


class Repair(tuple):  # type: ignore[type-arg]
    """(topic, partition, committed offset count, bytes dropped) of one repaired partition."""

    __slots__ = ()

    def __new__(cls, topic: str, partition: int, offset: int, dropped: int) -> Repair:
        return super().__new__(cls, (topic, partition, offset, dropped))


def encode_record(payload: bytes) -> bytes:
    head = struct.pack(">I", len(payload))
    return head + struct.pack(">I", zlib.crc32(payload, zlib.crc32(head))) + payload


def _write_all(ops: FileOps, fd: int, data: bytes, at: int, what: str) -> None:
    """pwrite until everything is written; a short write that makes no progress is ENOSPC (a full tmpfs)."""
    done = 0
    for _ in range(64):  # bounded: each round writes something or fails
        if done >= len(data):
            return
        n = ops.pwrite(fd, data[done:], at + done)
        if n <= 0:
            break
        done += n
    if done < len(data):
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (short write of {what}: {done} of {len(data)} bytes)")


class PartitionFiles:
    """Paths and the read/append/repair operations of one partition (stateless: cheap to create per call)."""

    def __init__(self, topic_dir: Path, topic: str, partition: int, ops: FileOps | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.rec = topic_dir / f"{partition}.rec"
        self.ix = topic_dir / f"{partition}.ix"
        self.v1_log = topic_dir / f"{partition}.log"
        self.v1_idx = topic_dir / f"{partition}.idx"
        self.lock = topic_dir / f"{partition}.lock"
        self.ops = ops or FileOps()

    def where(self, offset: int | None = None) -> str:
        at = f" offset {offset}" if offset is not None else ""
        return f"topic {self.topic!r} partition {self.partition}{at}"

    # -- creating ----------------------------------------------------------------------
    @staticmethod
    def empty_index() -> bytes:
        return _HDR.pack(MAGIC, 0, _MASK)

    # -- reading -----------------------------------------------------------------------
    def is_v1(self) -> bool:
        return not self.ix.exists() and self.v1_idx.exists()

    def committed(self) -> int:
        """The number of visible records (the next offset); FileNotFoundError if the partition is gone."""
        try:
            fd = os.open(self.ix, os.O_RDONLY)
        except FileNotFoundError:
            if self.v1_idx.exists():
                return self.v1_idx.stat().st_size // _ENTRY.size
            raise
        try:
            return _read_count(fd, self)
        finally:
            os.close(fd)

    def read(self, start: int, end: int | None) -> Iterator[tuple[int, Any, Any, int]]:
        """``(offset, key, value, timestamp)`` of committed records in [start, end); checksums verified."""
        if self.is_v1():
            yield from self._read_v1(start, end)
            return
        with open(self.ix, "rb") as fi, open(self.rec, "rb") as fr:
            n = _read_count(fi.fileno(), self)
            stop = n if end is None else end
            if stop > n:
                raise _truncated(self, n, stop)
            if start >= stop:
                return
            lo = _entry(fi.fileno(), start - 1) if start else 0
            hi = _entry(fi.fileno(), stop - 1)
            fr.seek(lo)
            chunk = fr.read(hi - lo)
        if len(chunk) != hi - lo:
            raise CorruptLogError(f"CORRUPT_LOG: {self.where(start)}: the record file ends {hi - lo - len(chunk)} "
                                  f"bytes before the committed records do")
        yield from _decode(chunk, start, stop, self)

    def _read_v1(self, start: int, end: int | None) -> Iterator[tuple[int, Any, Any, int]]:
        with open(self.v1_idx, "rb") as fi, open(self.v1_log, "rb") as fl:
            avail = os.fstat(fi.fileno()).st_size // _ENTRY.size
            stop = avail if end is None else end
            if stop > avail:
                raise _truncated(self, avail, stop)
            if start >= stop:
                return
            lo = _ENTRY.unpack(os.pread(fi.fileno(), 8, (start - 1) * 8))[0] if start else 0
            hi = _ENTRY.unpack(os.pread(fi.fileno(), 8, (stop - 1) * 8))[0]
            fl.seek(lo)
            chunk = fl.read(hi - lo)
        for o, line in enumerate(chunk.splitlines(), start):
            try:
                rec = json.loads(line)
                yield o, rec["k"], rec["v"], rec["t"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptLogError(f"CORRUPT_LOG: {self.where(o)}: not a record ({exc})") from None

    # -- appending (the caller holds the partition's lock) ---------------------------------
    def append(self, payloads: Sequence[bytes]) -> tuple[int, Any]:
        """Write the records and their index entries; return (first offset, commit) — nothing visible yet.

        ``commit()`` makes them visible; ``rollback()`` (on the returned
        handle) cuts them off. Splitting the two is what lets a batch over
        several partitions be all-or-nothing: every partition writes, then
        every one commits.
        """
        if self.is_v1():
            self.convert_v1()
        fd_ix = os.open(self.ix, os.O_RDWR)
        try:
            fd_rec = os.open(self.rec, os.O_RDWR)
        except BaseException:
            os.close(fd_ix)
            raise
        pending = _Pending(self, fd_ix, fd_rec)
        try:
            pending.write(payloads)
        except BaseException:
            pending.rollback()
            raise
        return pending.first, pending

    # -- repair on open -----------------------------------------------------------------
    def repair(self) -> Repair | None:
        """Cut a torn or zero-filled tail back to the last valid committed record (caller holds the lock)."""
        if self.is_v1():
            self.convert_v1()
        fd_ix = os.open(self.ix, os.O_RDWR)
        fd_rec = os.open(self.rec, os.O_RDWR)
        try:
            ix_size = os.fstat(fd_ix).st_size
            rec_size = os.fstat(fd_rec).st_size
            try:
                n = _read_count(fd_ix, self)
            except CorruptLogError:
                n = (ix_size - HEADER_SIZE) // _ENTRY.size if ix_size >= HEADER_SIZE else 0
            n = max(0, min(n, (ix_size - HEADER_SIZE) // _ENTRY.size))
            good = _last_good(fd_ix, fd_rec, n, rec_size, self)
            end = _entry(fd_ix, good - 1) if good else 0
            dropped = (rec_size - end) + (ix_size - HEADER_SIZE - good * _ENTRY.size)
            if good == n and rec_size == end and ix_size == HEADER_SIZE + n * _ENTRY.size:
                return None
            if good != n:
                _write_all(self.ops, fd_ix, _HDR.pack(MAGIC, good, good ^ _MASK), 0, "the index header")
            self.ops.ftruncate(fd_rec, end)
            self.ops.ftruncate(fd_ix, HEADER_SIZE + good * _ENTRY.size)
            self.ops.fsync(fd_rec)
            self.ops.fsync(fd_ix)
        finally:
            os.close(fd_ix)
            os.close(fd_rec)
        log.warning("event log %s: dropped a torn or zero-filled tail of %d bytes after offset %d "
                    "(%d committed record(s) lost their data)", self.where(), dropped, good, n - good)
        return Repair(self.topic, self.partition, good, dropped)

    def convert_v1(self) -> None:
        """Rewrite a format-1 partition as format 2 (same offsets); readers of the old files keep their fds."""
        recs = list(self._read_v1(0, None))
        tmp_rec = self.rec.with_suffix(".rec.tmp")
        tmp_ix = self.ix.with_suffix(".ix.tmp")
        data = bytearray()
        entries = bytearray(_HDR.pack(MAGIC, len(recs), len(recs) ^ _MASK))
        for _, k, v, t in recs:
            data += encode_record(json.dumps({"k": k, "v": v, "t": t}, separators=(",", ":")).encode())
            entries += _ENTRY.pack(len(data))
        for path, blob in ((tmp_rec, data), (tmp_ix, entries)):
            with open(path, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp_rec, self.rec)  # the record file first: a reader keys on the index
        os.replace(tmp_ix, self.ix)
        for old in (self.v1_idx, self.v1_log):
            old.unlink(missing_ok=True)
        log.info("event log %s: converted %d records to the checksummed format", self.where(), len(recs))


class _Pending:
    """An append written but not yet committed: ``commit`` publishes it, ``rollback`` cuts it off."""

    def __init__(self, files: PartitionFiles, fd_ix: int, fd_rec: int) -> None:
        self.files, self.fd_ix, self.fd_rec = files, fd_ix, fd_rec
        self.ops = files.ops
        self.count = _read_count(fd_ix, files)
        self.end = _entry(fd_ix, self.count - 1) if self.count else 0
        self.first = self.count
        self.n = 0
        self.header_touched = False

    def write(self, payloads: Sequence[bytes]) -> None:
        f, ops = self.files, self.ops
        rec_size = os.fstat(self.fd_rec).st_size
        ix_size = os.fstat(self.fd_ix).st_size
        if rec_size != self.end or ix_size != HEADER_SIZE + self.count * _ENTRY.size:  # a crash's tail: cut it
            ops.ftruncate(self.fd_rec, self.end)
            ops.ftruncate(self.fd_ix, HEADER_SIZE + self.count * _ENTRY.size)
            log.warning("event log %s: cut an uncommitted tail of %d bytes (an append that failed or crashed)",
                        f.where(self.count), (rec_size - self.end) + (ix_size - HEADER_SIZE - self.count * 8))
        data = bytearray()
        entries = bytearray()
        for p in payloads:
            data += encode_record(p)
            entries += _ENTRY.pack(self.end + len(data))
        _write_all(ops, self.fd_rec, bytes(data), self.end, "records")
        ops.fsync(self.fd_rec)
        _write_all(ops, self.fd_ix, bytes(entries), HEADER_SIZE + self.count * _ENTRY.size, "index entries")
        ops.fsync(self.fd_ix)
        self.n = len(payloads)

    def commit(self) -> None:
        """Publish: rewrite the header in place (no new space) and fsync; then close."""
        try:
            new = self.count + self.n
            self.header_touched = True
            _write_all(self.ops, self.fd_ix, _HDR.pack(MAGIC, new, new ^ _MASK), 0, "the index header")
            self.ops.fsync(self.fd_ix)
        except BaseException:
            self.rollback()
            raise
        self._close()

    def rollback(self) -> None:
        """Put the partition back exactly as it was: header, index and records (best effort, then close)."""
        steps = [lambda: self.ops.ftruncate(self.fd_ix, HEADER_SIZE + self.count * _ENTRY.size),
                 lambda: self.ops.ftruncate(self.fd_rec, self.end)]
        if self.header_touched:
            steps.insert(0, lambda: _write_all(self.ops, self.fd_ix, _HDR.pack(MAGIC, self.count, self.count ^ _MASK),
                                               0, "the index header"))
        try:
            for step in steps:
                try:
                    step()
                except OSError as exc:  # the count still hides the tail from readers; the next append cuts it
                    log.error("event log %s: could not cut back a failed append (%s); readers do not see it and "
                              "the next append or repair removes it", self.files.where(self.count), exc)
        finally:
            self._close()

    def _close(self) -> None:
        for fd in (self.fd_ix, self.fd_rec):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fd_ix = self.fd_rec = -1


def _read_count(fd: int, files: PartitionFiles) -> int:
    for _ in range(100):  # a reader racing the in-place header rewrite re-reads it
        raw = os.pread(fd, HEADER_SIZE, 0)
        if len(raw) == HEADER_SIZE:
            magic, n, inv = _HDR.unpack(raw)
            if magic == MAGIC and n ^ _MASK == inv:
                return n
            if magic != MAGIC:
                break
    raise CorruptLogError(f"CORRUPT_LOG: {files.where()}: the index header of {files.ix} is damaged")


def _entry(fd: int, i: int) -> int:
    return _ENTRY.unpack(os.pread(fd, _ENTRY.size, HEADER_SIZE + i * _ENTRY.size))[0]


def _truncated(files: PartitionFiles, have: int, want: int) -> Exception:
    return EventLogError(f"SOURCE_TRUNCATED: topic {files.topic!r} partition {files.partition} ends at offset "
                         f"{have}, but offsets up to {want} were asked for")


def _decode(chunk: bytes, start: int, stop: int, files: PartitionFiles) -> Iterator[tuple[int, Any, Any, int]]:
    pos = 0
    size = len(chunk)
    unpack = _REC.unpack_from
    crc32 = zlib.crc32
    loads = json.loads
    for o in range(start, stop):
        if pos + 8 > size:
            raise CorruptLogError(f"CORRUPT_LOG: {files.where(o)}: the record is cut short")
        length, crc = unpack(chunk, pos)
        body = chunk[pos + 8:pos + 8 + length]
        if len(body) != length or crc32(body, crc32(chunk[pos:pos + 4])) != crc:
            raise CorruptLogError(f"CORRUPT_LOG: {files.where(o)}: checksum mismatch (the record is damaged)")
        rec = loads(body)
        yield o, rec["k"], rec["v"], rec["t"]
        pos += 8 + length


def _valid_at(fd_rec: int, lo: int, hi: int) -> bool:
    """Does [lo, hi) of the record file hold exactly one record whose checksum checks out?"""
    if hi - lo < 8:
        return False
    raw = os.pread(fd_rec, hi - lo, lo)
    if len(raw) != hi - lo:
        return False
    length, crc = _REC.unpack_from(raw, 0)
    return length == hi - lo - 8 and zlib.crc32(raw[8:], zlib.crc32(raw[:4])) == crc


def _last_good(fd_ix: int, fd_rec: int, n: int, rec_size: int, files: PartitionFiles) -> int:
    """How many of the ``n`` committed records are sound, checking back from the end (at most ~1 MB)."""
    good = n
    scanned = 0
    while good > 0 and scanned < _REPAIR_SCAN_BYTES:
        hi = _entry(fd_ix, good - 1)
        lo = _entry(fd_ix, good - 2) if good > 1 else 0
        if lo <= hi <= rec_size and _valid_at(fd_rec, lo, hi):
            return good
        scanned += max(0, hi - lo)
        good -= 1
    return good
