"""Which failures of a store's query are faults of the machine (they may clear by themselves) and which are not.

A fault — the disk full, an I/O error, a read-only file system, the source
unreachable — pauses that store's ingest and is retried with backoff
(docs/DESIGN.md §8: faults degrade, they never stop serving); anything else is a
failure for the uncaught-exception handler or the store's own error state.

The exception type does not survive Spark (a Python error inside
foreachBatch or a source reaches us as text inside a Java exception), so the
classification is by the stable texts the OS, SQLite, the JVM, RocksDB and
librdkafka use for these conditions.
"""

from __future__ import annotations

import re

from ..engine.base import CORRUPTION_TEXTS
from ..iqv2.errors import MissingSourceTopicException, StreamsException
from .stream_rows import MISSING_SOURCE_TOPIC, SOURCE_TRUNCATED

__all__ = ["fault_reason", "is_corruption", "FAULT_PATTERNS", "classify_failure", "SourceTruncatedException"]

#: (pattern, what the user is told). Order matters: the first match names the fault.
FAULT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), what) for p, what in (
        (r"No space left on device|database or disk is full|Disk quota exceeded|\bENOSPC\b", "disk full"),
        (r"Read-only file system|attempt to write a readonly database|\bEROFS\b", "read-only file system"),
        (r"Input/output error|disk I/O error|\bEIO\b", "I/O error"),
        (r"Operation not permitted|Permission denied|\bEACCES\b|\bEPERM\b", "permission denied"),
        (r"unable to open database file", "cannot open a store file"),
        (r"CORRUPT_LOG:", "damaged source log"),
        (r"cannot reach Kafka at|Broker transport failure|All broker connections are down|_TRANSPORT\b|"
         r"_ALL_BROKERS_DOWN|_TIMED_OUT|Connection refused|Failed to resolve|SOURCE_UNREACHABLE:",
         "source unreachable"),
        # Spark forks Python workers per task; on an overloaded machine one may not connect back in time
        (r"Python worker failed to connect back|Python worker exited unexpectedly", "Spark's Python worker did not start"),
        # a task that Spark's own Java serialization could not read back (CI, 2026-11-26: queries starting together
        # corrupted the data sources' shared environment map, fixed in session.register_sources): the query
        # replays the batch from its checkpoint like after any fault
        (r"java\.io\.OptionalDataException|java\.io\.StreamCorruptedException",
         "Spark could not deserialize a task"),
    )
)


def fault_reason(exc: BaseException | str | None) -> str | None:
    """``"disk full: <the line that says so>"`` for a fault, None for any other failure.

    The line quoted is the error's message, never a line of source code: an
    error raised in a Python worker reaches us as the text of its traceback
    inside Spark's, whose frames quote the ``raise`` line (issue 52: health
    said ``permission denied: raise PermissionError(errno.EPERM, f"Operation
    not permitted: store {self.name!r} partition "``). Those frames are left
    out before the search."""
    if exc is None:
        return None
    text = _without_frames(exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}")
    for pattern, what in FAULT_PATTERNS:
        m = pattern.search(text)
        if m is None:
            continue
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        line = text[start:end if end >= 0 else len(text)].strip()
        if len(line) > 240:
            lo = max(0, m.start() - start - 100)
            line = "…" + line[lo:lo + 220] + "…"
        return f"{what}: {line}"
    return None


_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_MARKS = re.compile(r"^\s*[~^]+\s*$")


def _without_frames(text: str) -> str:
    """``text`` without Python traceback frames (``File "…", line N, in f`` and the source lines quoted under it)
    and their ``~~~^^^`` markers: what is left are the messages."""
    out: list[str] = []
    in_frame = False
    for line in text.splitlines():
        if _FRAME.match(line):
            in_frame = True
            continue
        if in_frame and line.startswith((" ", "\t")) and not line.lstrip().startswith("at "):
            continue  # the source lines of the frame (indented deeper than its File line)
        in_frame = False
        if not _MARKS.match(line):
            out.append(line)
    return "\n".join(out)


def is_corruption(exc: BaseException | str | None) -> bool:
    """Did SQLite say a store file is damaged? (Then the store is checked, and rebuilt, instead of retried.)"""
    text = "" if exc is None else (exc if isinstance(exc, str) else str(exc))
    return any(t in text for t in CORRUPTION_TEXTS)


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
