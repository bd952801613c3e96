"""Which texts of a failed store query are faults (paused and retried) and which are failures.

The texts are the ones seen on this machine (the OS, SQLite, the JVM,
librdkafka, Spark's Python worker handshake); a change of wording upstream
that turns a fault into a store failure is what this guards.
"""

from __future__ import annotations

import pytest

from stores.pipeline.faults import fault_reason

FAULTS = [
    ("OSError: [Errno 28] No space left on device", "disk full"),
    ("sqlite3.OperationalError: database or disk is full", "disk full"),
    ("OSError: [Errno 30] Read-only file system: '/x'", "read-only file system"),
    ("sqlite3.OperationalError: disk I/O error", "I/O error"),
    ("PermissionError: [Errno 13] Permission denied: '/x'", "permission denied"),
    ("sqlite3.OperationalError: unable to open database file", "cannot open a store file"),
    ("RuntimeError: CORRUPT_LOG: topic 'orders' partition 0 offset 5: checksum mismatch", "damaged source log"),
    ("KafkaUnavailableError: cannot reach Kafka at 127.0.0.1:9 to read the end offsets of 'o'", "source unreachable"),
    ("org.apache.spark.SparkException: Python worker failed to connect back.", "Spark's Python worker did not start"),
    ("Lost task 0.0 in stage 4.0 (TID 4) (192.0.2.2 executor driver): java.io.OptionalDataException",
     "Spark could not deserialize a task"),
]
FAILURES = [
    "ValueError: invalid literal for int() with base 10: 'x'",
    "RuntimeError: SOURCE_TRUNCATED: topic 'events' partition 0 ends at offset 1, but the checkpoint has read 10",
    "MissingSourceTopicException: one or more source topics were missing during rebalance",
    "sqlite3.DatabaseError: database disk image is malformed",
]


@pytest.mark.parametrize(("text", "what"), FAULTS)
def test_faults_are_named(text: str, what: str) -> None:
    reason = fault_reason(f"org.apache.spark.SparkException: query failed\n  {text}\n  at org.apache...")
    assert reason is not None and reason.startswith(f"{what}: "), reason
    assert text.split(": ", 1)[-1][:30] in reason  # the line that says so is quoted


@pytest.mark.parametrize("text", FAILURES)
def test_other_failures_are_not_faults(text: str) -> None:
    assert fault_reason(text) is None


def _traceback_of(raise_it: object) -> str:
    """The real traceback text of an exception raised by ``raise_it``, as a Python worker's error reaches Spark."""
    import traceback

    try:
        raise_it()  # type: ignore[operator]
    except BaseException:  # noqa: BLE001
        return traceback.format_exc()
    raise AssertionError("nothing was raised")


def _unwritable_store(tmp: object) -> None:
    import errno

    store, partition, path = "revenue_per_min", 2, f"{tmp}/stores/revenue_per_min/partition-2.db"
    raise PermissionError(errno.EPERM, f"Operation not permitted: store {store!r} partition "
                          f"{partition}: {path} (or its -wal/-shm) cannot be written (read-only "
                          "or immutable); not writing to it")


def test_the_reason_is_the_message_never_a_line_of_source() -> None:
    """Issue 52: a traceback's frames quote the raise line; the reason quotes the error's own message, with the
    store and file it concerns (the real traceback of the store's own refusal to write, as Spark relays it)."""
    text = ("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            + _traceback_of(lambda: _unwritable_store("/data/state"))
            + "\n\tat org.apache.spark.api.python.BasePythonRunner...")
    reason = fault_reason(text)
    assert reason is not None and reason.startswith("permission denied: "), reason
    assert "raise " not in reason and "{" not in reason, reason
    assert "store 'revenue_per_min' partition 2: /data/state/stores/revenue_per_min/partition-2.db" in reason


@pytest.mark.parametrize(("text", "what"), FAULTS)
def test_every_fault_kind_is_named_from_its_message_inside_a_traceback(text: str, what: str) -> None:
    """Each fault kind the health can report, found in a worker's traceback whose frames quote code that names
    the same words (a raise line): the quoted line is the message."""
    message = text.split(": ", 1)[-1]
    frames = ('Traceback (most recent call last):\n  File "/app/stores/engine/base.py", line 566, in write\n'
              f'    raise OSError(f"{message} {{self.path}}")\n    ^^^^^^^^^^^^^^^^^^\n')
    reason = fault_reason(f"org.apache.spark.SparkException: query failed\n{frames}{text}\n  at org.apache...")
    assert reason is not None and reason.startswith(f"{what}: "), reason
    assert "raise" not in reason and "self.path" not in reason and message[:30] in reason, reason
