"""One writer per state directory: an exclusive ``flock`` on ``<state_dir>/writer.lock``, naming its holder.

Two processes writing one state directory corrupt nothing at once but fail
later and obscurely (Spark's checkpoint sees a concurrent modification after
a batch or two), so ``serve``, ``upgrade`` and ``replica`` take this lock
before they touch anything, and a second one is refused at once with the
holder's pid, host, command and start time. ``flock`` is released by the
kernel when its holder dies, however it dies, so a lock left by a dead
process is simply taken over: the file's old contents are overwritten. Read-
only readers (``serve --state-dir`` workers, ``Gateway.open``) never take it.

The file records no command line: a ``--token`` on it must not end up in a
file other users can read.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

__all__ = ["WriterLock", "WriterLockError", "StateDirLocked", "LOCK_NAME", "lock_holder"]

LOCK_NAME = "writer.lock"
_MAX_RECORD = 4096


class WriterLockError(Exception):
    """The lock file cannot be created or locked at all (a missing permission, a read-only file system)."""


class StateDirLocked(WriterLockError):
    """Another live process holds the state directory; ``holder`` is what it recorded (may be empty)."""

    def __init__(self, state_dir: Path, holder: dict[str, Any]) -> None:
        self.state_dir = state_dir
        self.holder = holder
        super().__init__(f"state directory {state_dir} is in use by {describe_holder(holder)}; stop that process "
                         f"first, or give this one another state directory")


def describe_holder(holder: dict[str, Any]) -> str:
    if not holder.get("pid"):
        return "another process (it has not recorded who it is yet)"
    what = f"`iqgate {holder['command']}`" if holder.get("command") else "a process"
    return f"{what} (pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('started', '?')})"


def _read_record(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, _MAX_RECORD, 0)
        record = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise WriterLockError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None


class WriterLock:
    """``with WriterLock(state_dir, "serve"): …`` — or ``acquire()``/``release()``; not re-entrant.

    Held by an open file description: a second ``WriterLock`` on the same
    directory is refused even inside the holder's own process, and the lock
    is not inherited by programs the holder starts (close-on-exec).
    """

    def __init__(self, state_dir: str | os.PathLike[str], command: str = "serve", *, name: str = LOCK_NAME) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / name
        self.command = command
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> WriterLock:
        """Take the lock now or raise StateDirLocked naming the holder (never waits)."""
        if self._fd is not None:
            raise WriterLockError(f"{self.path} is already held by this WriterLock")
        fd = _open(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_record(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
            os.close(fd)
            if holder is None:
                raise WriterLockError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            raise StateDirLocked(self.state_dir, holder) from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                  "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise WriterLockError(f"cannot write the lock file {self.path}: {exc.strerror or exc}") from None
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (idempotent); the file stays, emptied, for the next holder."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # while still held: nobody reads a released holder's record as current
        except OSError:
            pass
        os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(state_dir: str | os.PathLike[str], *, name: str = LOCK_NAME) -> dict[str, Any] | None:
    """Who holds ``state_dir`` now (their record; ``{}`` if they have not written it yet), or None when free."""
    path = Path(state_dir) / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise WriterLockError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
