"""Real and injected file-system faults for the tests: a size-limited tmpfs, and a FileOps that fails on cue.

The tmpfs is real (``mount -t tmpfs -o size=…``): it fills up the way a small
disk does, short writes included. Mounting needs root (the tests run as root
in CI); elsewhere the tmpfs tests skip with the reason, and the injected
faults (``FailingOps``) still exercise every write step everywhere.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from stores.log.eventlog import FileOps

__all__ = ["Tmpfs", "mount_tmpfs", "FailingOps", "CountingOps", "fill", "chattr"]


class Tmpfs:
    """A mounted tmpfs of ``size`` bytes at ``path``; ``resize`` grows or shrinks it in place."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def resize(self, size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True)
        self.size = size

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


def mount_tmpfs(base: Path, size: int) -> Tmpfs | str:
    """Mount a tmpfs under ``base``; the reason as a string when this machine cannot (not root, no mount)."""
    if os.geteuid() != 0:
        return "mounting a size-limited tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount command on this machine"
    path = base / f"tmpfs-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                         text=True)
    if got.returncode != 0:
        return f"mount -t tmpfs failed here: {got.stderr.strip() or got.returncode}"
    return Tmpfs(path, size)


def fill(fs: Tmpfs, name: str = "filler") -> Path:
    """Write a file until the tmpfs is full (ENOSPC); returns it (delete it to free the space)."""
    path = fs.path / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 16, 4096, 512, 1):  # big blocks first, then the last partial page
            for _ in range(1 << 16):  # bounded: 4 GiB at most
                try:
                    if os.write(fd, b"\xff" * size) < size:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


def chattr(flag: str, path: Path) -> str | None:
    """``chattr -R flag path`` (``+i``: nobody, root included, may write the files); why not, when it cannot."""
    got = subprocess.run(["chattr", "-R", flag, str(path)], capture_output=True, text=True)
    return None if got.returncode == 0 else (got.stderr.strip() or f"chattr exited {got.returncode}")


class CountingOps(FileOps):
    """Counts the write steps (pwrite, fsync, ftruncate) an operation makes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.calls.append("pwrite")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self.calls.append("fsync")
        super().fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        self.calls.append("ftruncate")
        super().ftruncate(fd, length)


class FailingOps(FileOps):
    """Fails step number ``at`` (0-based over pwrite/fsync/ftruncate) once, the way a full or failing disk does.

    ``mode``: ``"enospc"`` raises ENOSPC, ``"eio"`` raises EIO, ``"short"``
    makes a pwrite write half its bytes (a full tmpfs) — and every later
    pwrite of that operation write nothing.
    """

    def __init__(self, at: int, mode: str = "enospc") -> None:
        self.at = at
        self.mode = mode
        self.n = 0
        self.tripped = False

    def _step(self, what: str) -> bool:
        i = self.n
        self.n += 1
        if i == self.at and not self.tripped:
            self.tripped = True
            return True
        return False

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self._step("pwrite") or (self.tripped and self.mode == "short"):
            if self.mode == "short":
                half = len(data) // 2 if self.n - 1 == self.at else 0
                return os.pwrite(fd, data[:half], offset) if half else 0
            code = errno.EIO if self.mode == "eio" else errno.ENOSPC
            raise OSError(code, os.strerror(code))
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self._step("fsync") and self.mode != "short":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        if self._step("ftruncate") and self.mode == "eio":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().ftruncate(fd, length)
