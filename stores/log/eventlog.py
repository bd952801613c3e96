"""EventLog: the embedded partitioned source log (a small, local stand-in for Kafka topics).

Producers (``iqgate produce``, tests, the demo) append without Spark, so this
module must never import pyspark. Layout under the root::

    topics/<topic>/topic.json   {"name", "partitions", "epoch", "created_ms"}
    topics/<topic>/<p>.rec      checksummed records (length, crc32, JSON {"k": key, "v": value, "t": ts_ms})
    topics/<topic>/<p>.ix       committed record count, then the end byte position of each record
    topics/<topic>/<p>.lock     flock target serialising appenders of that partition

The per-partition format, and why a failed or interrupted append never
becomes visible, is in ``segment.py``. A batch over several partitions is
all-or-nothing: every partition writes and fsyncs its records first, then
each publishes them. The ``epoch`` changes when a topic is deleted and
recreated, which lets the Spark source tell a recreated (shorter) topic from
one that merely has no new data.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any, NamedTuple

from ..catalog.partitioner import partition_for_key
from ..iqv2.timeutil import now_ms
from .records import Headers, InvalidRecordError, check_record, record_headers, unpack_record
from .segment import CorruptLogError, EventLogError, FileOps, LogWriteError, NoSyncOps, PartitionFiles, Repair

__all__ = [
    "EventLog", "Record", "EventLogError", "UnknownTopicError", "TopicExistsError", "CorruptLogError",
    "LogWriteError", "InvalidRecordError", "TOPIC_NAME_RE", "FileOps", "Repair", "RecordsDeletedError",
]

log = logging.getLogger("stores.log")

#: Kafka's legal topic characters. ``@`` is deliberately absent: the Spark
#: source uses ``@epochs`` as a reserved key inside its offset JSON.
TOPIC_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class UnknownTopicError(EventLogError, KeyError):
    """The topic does not exist (never created, or deleted)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown topic"


class TopicExistsError(EventLogError):
    """create_topic on a name that is taken."""


class RecordsDeletedError(EventLogError):
    """A read below a partition's first held offset: ``delete_records`` (retention) removed those records."""


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()  # Kafka's record headers: (name, value) pairs, in order


class EventLog:
    """A directory of topics with a fixed partition count each.

    >>> log = EventLog(tmp)                                    # doctest: +SKIP
    >>> log.create_topic("orders", partitions=4)               # doctest: +SKIP
    >>> partition, offset = log.append("orders", key="c42", value={"amount": 9.5}, timestamp=ts)  # doctest: +SKIP

    Keys choose the partition with Kafka's murmur2 over their serialized
    bytes, so the same key always lands in the same partition and the
    planner can compute it too. ``value=None`` is a tombstone (a delete for
    tables). Every method is safe with several producer processes at once.
    """

    def __init__(self, root: str | os.PathLike[str], *, file_ops: FileOps | None = None) -> None:
        self.root = Path(root)
        self._topics_dir = self.root / "topics"
        self._topics_dir.mkdir(parents=True, exist_ok=True)
        self._ops = file_ops or FileOps()

    def __repr__(self) -> str:
        return f"EventLog({str(self.root)!r})"

    def describe(self) -> str:
        return f"event log at {self.root}"

    # -- topics ---------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None:
        """Create ``name`` atomically (a renamed temp dir), so readers never see a half-made topic.

        With ``exist_ok`` an existing topic is accepted only if its partition
        count matches: silently reading a different layout would misplace keys.
        """
        _check_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"topic {name!r}: partitions must be an integer >= 1, got {partitions!r}")
        final = self._topics_dir / name
        if final.exists():
            return self._existing(name, partitions, exist_ok)
        tmp = self._topics_dir / f".tmp-{name}-{uuid.uuid4().hex}"
        tmp.mkdir()
        meta = {"name": name, "partitions": partitions, "epoch": uuid.uuid4().hex, "created_ms": now_ms()}
        _write_fsynced(tmp / "topic.json", json.dumps(meta).encode())
        for p in range(partitions):
            files = PartitionFiles(tmp, name, p)
            files.rec.touch()
            files.lock.touch()
            _write_fsynced(files.ix, PartitionFiles.empty_index())
        try:
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if final.exists():
                return self._existing(name, partitions, exist_ok)
            raise
        _fsync_dir(self._topics_dir)

    def _existing(self, name: str, partitions: int, exist_ok: bool) -> None:
        if not exist_ok:
            raise TopicExistsError(f"topic {name!r} already exists in {self.root}")
        have = self.partitions(name)
        if have != partitions:
            raise TopicExistsError(f"topic {name!r} exists with {have} partitions, not {partitions}")

    def delete_topic(self, name: str) -> None:
        """Remove the topic; a rename first makes the deletion atomic for readers and appenders."""
        _check_topic_name(name)
        final = self._topics_dir / name
        if not (final / "topic.json").exists():
            raise UnknownTopicError(f"topic {name!r} does not exist in {self.root}")
        trash = self._topics_dir / f".deleted-{name}-{uuid.uuid4().hex}"
        os.rename(final, trash)
        _fsync_dir(self._topics_dir)
        shutil.rmtree(trash, ignore_errors=True)

    def list_topics(self) -> dict[str, int]:
        """``{topic: partitions}`` of every existing topic, sorted by name."""
        out: dict[str, int] = {}
        for d in sorted(self._topics_dir.iterdir()):
            if d.name.startswith(".") or not (d / "topic.json").exists():
                continue
            try:
                out[d.name] = int(self._meta(d.name)["partitions"])
            except UnknownTopicError:
                continue  # deleted while listing
        return out

    def has_topic(self, name: str) -> bool:
        return (self._topics_dir / name / "topic.json").exists()

    def partitions(self, topic: str) -> int:
        return int(self._meta(topic)["partitions"])

    def epoch(self, topic: str) -> str:
        """An id that changes when the topic is deleted and recreated."""
        return str(self._meta(topic)["epoch"])

    def _meta(self, topic: str) -> dict[str, Any]:
        _check_topic_name(topic)
        try:
            return json.loads((self._topics_dir / topic / "topic.json").read_bytes())
        except FileNotFoundError:
            raise UnknownTopicError(f"topic {topic!r} does not exist in {self.root}") from None

    # -- offsets --------------------------------------------------------
    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}`` (Kafka's end offsets: exclusive)."""
        n = self.partitions(topic)
        d = self._topics_dir / topic
        out = {}
        for p in range(n):
            try:
                out[p] = PartitionFiles(d, topic, p).committed()
            except FileNotFoundError:
                raise UnknownTopicError(f"topic {topic!r} was deleted while reading its offsets") from None
        return out

    def low_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still held}`` (Kafka's log start offset; 0 unless records were deleted)."""
        n = self.partitions(topic)
        held = self._starts(topic)
        return {p: held.get(p, 0) for p in range(n)}

    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        """Delete the records below ``before[p]`` of each partition ``p`` (Kafka's DeleteRecords; retention).

        Offsets never move: the partition's first held offset becomes ``before[p]`` and reads below it raise
        RecordsDeletedError, as a Kafka consumer gets OFFSET_OUT_OF_RANGE. An offset past the partition's end
        is refused (nothing changes); a lower one than already deleted keeps the higher. Returns the new
        low offsets. The bytes stay in the partition file (offsets are positions in its index).
        """
        ends = self.end_offsets(topic)
        for p, o in before.items():
            if p not in ends:
                raise EventLogError(f"topic {topic!r} has no partition {p} (it has {len(ends)})")
            if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o <= ends[p]:
                raise EventLogError(f"topic {topic!r} partition {p}: cannot delete records before offset {o!r}: "
                                    f"the partition ends at {ends[p]}")
        d = self._topics_dir / topic
        with _locked(d / "topic.json", topic):
            held = self._starts(topic)
            for p, o in before.items():
                held[p] = max(held.get(p, 0), o)
            tmp = d / f".start-{uuid.uuid4().hex}.json"
            _write_fsynced(tmp, json.dumps({str(p): o for p, o in sorted(held.items())}).encode())
            os.replace(tmp, d / "start.json")
            _fsync_dir(d)
        return self.low_offsets(topic)

    def _starts(self, topic: str) -> dict[int, int]:
        try:
            raw = json.loads((self._topics_dir / topic / "start.json").read_bytes())
        except FileNotFoundError:
            return {}
        return {int(p): int(o) for p, o in raw.items()}

    def last_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: offset of the last record}`` for non-empty partitions: a read-your-writes bound."""
        return {p: e - 1 for p, e in self.end_offsets(topic).items() if e > 0}

    # -- append ---------------------------------------------------------
    def partition_for(self, topic: str, key: Any) -> int:
        """The partition ``key`` lands in (murmur2, like Kafka's default partitioner)."""
        return _partition(key, self.partitions(topic), topic)

    def append(
        self,
        topic: str,
        key: Any,
        value: Mapping[str, Any] | None,
        timestamp: int | datetime | date | None = None,
        *,
        partition: int | None = None,
        headers: Any = None,
    ) -> tuple[int, int]:
        """Append one record durably; returns ``(partition, offset)`` to use as a read-your-writes bound."""
        return self.append_batch(topic, [(key, value, timestamp, headers)], partition=partition)[0]

    def append_batch(
        self,
        topic: str,
        records: Iterable[tuple[Any, Any, Any] | Mapping[str, Any]],
        *,
        partition: int | None = None,
    ) -> list[tuple[int, int]]:
        """Append many records with one fsync per partition; returns ``(partition, offset)`` per record.

        Records are ``(key, value, timestamp)`` or ``(key, value, timestamp, headers)``
        tuples, or mappings with ``key``/``value``/``timestamp``/``headers``
        (headers as Kafka's: ``[(name, bytes or text)]`` or a mapping; see
        ``records.py``). Every record is validated and encoded before anything
        is written, so bad input writes nothing.
        """
        n = self.partitions(topic)
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                      or not 0 <= partition < n):
            raise InvalidRecordError(f"topic {topic!r}: partition {partition!r} is outside 0..{n - 1}")
        by_part: dict[int, list[tuple[int, bytes]]] = {}
        count = 0
        for i, rec in enumerate(records):
            key, value, ts = unpack_record(rec, i)
            where = f"record {i} of topic {topic!r}"
            p = partition if partition is not None else _partition(key, n, topic, where)
            by_part.setdefault(p, []).append((i, _encode(key, value, ts, where, record_headers(rec, where))))
            count += 1
        out: list[tuple[int, int]] = [(0, 0)] * count
        firsts = self._append_atomically(topic, {p: [line for _, line in by_part[p]] for p in by_part})
        for p, first in firsts.items():
            for j, (i, _) in enumerate(by_part[p]):
                out[i] = (p, first + j)
        return out

    def append_to_partitions(self, topic: str, records: Mapping[int, Iterable[tuple[Any, Any, Any]]],
                             *, fsync: bool = True) -> dict[int, int]:
        """Append ``{partition: [(key, value, timestamp)]}`` all-or-nothing; the first offset written per partition.

        For writers that choose partitions themselves (store changelogs: one log partition per store
        partition), with the same checks and the same atomic publish as ``append_batch``. ``fsync=False``
        skips the fsyncs (three per partition): the append still survives a killed process, not a power
        loss — for a store changelog whose store is itself not synced per commit (SQLite ``NORMAL``).
        """
        n = self.partitions(topic)
        lines: dict[int, list[bytes]] = {}
        for p, recs in records.items():
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n:
                raise InvalidRecordError(f"topic {topic!r}: partition {p!r} is outside 0..{n - 1}")
            for i, rec in enumerate(recs):
                key, value, ts = unpack_record(rec, i)
                where = f"record {i} for partition {p} of {topic!r}"
                lines.setdefault(p, []).append(_encode(key, value, ts, where, record_headers(rec, where)))
        return self._append_atomically(topic, lines, self._ops if fsync else NoSyncOps(self._ops)) if lines else {}

    def _append_atomically(self, topic: str, lines: dict[int, list[bytes]], ops: FileOps | None = None
                           ) -> dict[int, int]:
        """Write every partition's records, then publish them all; on any failure none is published.

        Locks are taken in partition order, so producers writing overlapping
        partitions cannot deadlock.
        """
        d = self._topics_dir / topic
        parts = sorted(lines)
        with contextlib.ExitStack() as stack:
            for p in parts:
                stack.enter_context(_locked(d / f"{p}.lock", topic))
            if not (d / "topic.json").exists():
                raise UnknownTopicError(f"topic {topic!r} was deleted while appending")
            pending: list[Any] = []
            firsts: dict[int, int] = {}
            published: list[int] = []
            p = parts[0] if parts else 0
            try:
                for p in parts:
                    first, handle = PartitionFiles(d, topic, p, ops or self._ops).append(lines[p])
                    pending.append(handle)
                    firsts[p] = first
                for p, handle in zip(parts, pending):
                    handle.commit()  # an in-place header rewrite: needs no new space
                    published.append(p)
            except OSError as exc:
                for handle in pending[len(published):]:
                    if handle.fd_ix >= 0:
                        handle.rollback()
                what = ("nothing was written" if not published else
                        f"partition(s) {published} were written (offsets from {[firsts[q] for q in published]}) "
                        f"before partition {p} failed; nothing else was written")
                raise LogWriteError(exc.errno, f"topic {topic!r} partition {p}: {exc.strerror or exc}; {what}"
                                    ) from exc
            return firsts

    def recover(self, topics: Iterable[str] | None = None) -> list[Repair]:
        """Repair every partition (of ``topics``) after a crash: cut torn or zero-filled tails; list what was cut.

        Run on open by whoever owns the log (``iqgate serve``, the pipeline's
        start, ``iqgate produce``); readers never need it, since they only
        read committed records.
        """
        out = []
        for topic in (list(self.list_topics()) if topics is None else list(topics)):
            d = self._topics_dir / topic
            for p in range(self.partitions(topic)):
                with _locked(d / f"{p}.lock", topic):
                    fixed = PartitionFiles(d, topic, p, self._ops).repair()
                if fixed is not None:
                    out.append(fixed)
        return out

    # -- read -----------------------------------------------------------
    def read(self, topic: str, partition: int, start: int = 0, end: int | None = None) -> list[Record]:
        """Records ``start <= offset < end`` of one partition (``end`` None: up to the current end)."""
        return [Record(topic, partition, o, k, v, t, h)
                for o, k, v, t, h in self.read_raw(topic, partition, start, end, headers=True)]

    def read_raw(self, topic: str, partition: int, start: int, end: int | None = None, *, headers: bool = False
                 ) -> Iterator[tuple[Any, ...]]:
        """``(offset, key, value, timestamp)`` without building Record objects (the Spark reader's path);
        with ``headers`` ``(offset, key, value, timestamp, headers)``."""
        n = self.partitions(topic)
        if not 0 <= partition < n:
            raise EventLogError(f"topic {topic!r} has no partition {partition} (it has {n})")
        if start < 0:
            raise EventLogError(f"topic {topic!r} partition {partition}: start offset {start} is negative")
        low = self._starts(topic).get(partition, 0)
        if start < low:
            raise RecordsDeletedError(f"topic {topic!r} partition {partition}: the records before offset {low} "
                                      f"were deleted; cannot read from offset {start}")
        files = PartitionFiles(self._topics_dir / topic, topic, partition)
        try:
            yield from files.read(start, end, headers)
        except FileNotFoundError:
            raise UnknownTopicError(f"topic {topic!r} was deleted while reading") from None


def _check_topic_name(name: Any) -> None:
    if not isinstance(name, str) or not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid topic name {name!r}: use 1-249 of the characters A-Z a-z 0-9 . _ -")


def _partition(key: Any, n: int, topic: str, where: str | None = None) -> int:
    where = where or f"topic {topic!r}"
    if key is None:
        raise InvalidRecordError(f"{where}: the key is null; give a key or an explicit partition")
    try:
        return partition_for_key(key, n)
    except TypeError as exc:
        raise InvalidRecordError(f"{where}: {exc}") from None
    except struct.error:  # an int key is serialized as a Kafka long (struct ">q")
        raise InvalidRecordError(f"{where}: key {key} does not fit in 64 bits (an integer key is a Kafka long)") from None


def _encode(key: Any, value: Any, ts: Any, where: str, headers: Headers = ()) -> bytes:
    key, value, t = check_record(key, value, ts, where)
    rec: dict[str, Any] = {"k": key, "v": value, "t": t}
    if headers:  # "h": [[name, base64 or null]]; records without headers are written as before
        rec["h"] = [[n, None if v is None else base64.b64encode(v).decode("ascii")] for n, v in headers]
    return json.dumps(rec, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


@contextmanager
def _locked(path: Path, topic: str) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise UnknownTopicError(f"topic {topic!r} does not exist (deleted?)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_fsynced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
