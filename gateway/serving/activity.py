"""The statements each serving process is running, where its supervisor can read them after a crash.

A native crash (a segfault in a driver) ends a serving process without a
word from Python. Its supervisor starts a new one at once (issue 43 item 3);
to log *what* crashed it, each process keeps the text of every statement it is
running in a slot of shared memory (a memfd the supervisor made and every
serving process inherited): one slot per handler thread, written when a
statement starts and cleared when its answer ends. The supervisor reads the
dead process's slots and logs them with the crash.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
import threading

__all__ = ["Activity", "SLOTS"]

SLOTS = 64          # statements one process can be running at once (handler, PG and Flight threads)
_SLOT = 2048        # bytes per slot: a statement's first ~2 KB is enough to recognize it
_LEN = struct.Struct("<I")
_TEXT = _SLOT - _LEN.size


class Activity:
    """One serving process's slots (``attach``), or the supervisor's view of every process's (``create``)."""

    def __init__(self, fd: int, processes: int, index: int | None) -> None:
        self._fd = fd
        self.processes = processes
        self._mm = mmap.mmap(fd, processes * SLOTS * _SLOT)
        self._base = None if index is None else index * SLOTS * _SLOT
        self._local = threading.local()
        self._next = itertools.count()

    @classmethod
    def create(cls, processes: int) -> Activity:
        fd = os.memfd_create("iqgate-activity", 0)
        os.ftruncate(fd, processes * SLOTS * _SLOT)
        os.set_inheritable(fd, True)
        return cls(fd, processes, None)

    @classmethod
    def attach(cls, fd: int, index: int) -> Activity:
        processes = os.fstat(fd).st_size // (SLOTS * _SLOT)
        if not 0 <= index < processes:
            raise ValueError(f"activity board: index {index} is not one of {processes} processes")
        return cls(fd, processes, index)

    def fileno(self) -> int:
        return self._fd

    # -- a serving process ---------------------------------------------------------------------------------
    def begin(self, text: str) -> int:
        """Record ``text`` as running on this thread; returns the slot to ``end``."""
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = next(self._next) % SLOTS
        data = text.encode("utf-8", "replace")[:_TEXT]
        at = self._base + slot * _SLOT  # type: ignore[operator]
        _LEN.pack_into(self._mm, at, 0)
        self._mm[at + _LEN.size:at + _LEN.size + len(data)] = data
        _LEN.pack_into(self._mm, at, len(data))
        return slot

    def end(self, slot: int) -> None:
        _LEN.pack_into(self._mm, self._base + slot * _SLOT, 0)  # type: ignore[operator]

    # -- the supervisor -------------------------------------------------------------------------------------
    def running(self, index: int) -> list[str]:
        """The statements process ``index`` was running (its slots that hold one)."""
        out = []
        for slot in range(SLOTS):
            at = (index * SLOTS + slot) * _SLOT
            (n,) = _LEN.unpack_from(self._mm, at)
            if 0 < n <= _TEXT:
                out.append(bytes(self._mm[at + _LEN.size:at + _LEN.size + n]).decode("utf-8", "replace"))
        return out

    def clear(self, index: int) -> None:
        """Forget a dead process's slots (its replacement starts with none)."""
        for slot in range(SLOTS):
            _LEN.pack_into(self._mm, (index * SLOTS + slot) * _SLOT, 0)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)
