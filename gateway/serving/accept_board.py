"""Fair shares of one listening socket among ``serve --workers`` processes: the least-loaded one accepts.

Every serving process polls the one shared socket (pre-fork), and when a
connection comes, whichever loop wakes first takes it: usually the process
that is already busy, since it is awake. Measured with 8 keep-alive clients
on 2 processes: a 6/2 split in 9 trials of 10 and 8/0 once, so one core did
most of the work and throughput halved. Clients that hold a few connections
(BI tools, pools) meet exactly that.

So each process publishes how many connections it has on a small board in
shared memory (a memfd the first process creates and passes to the workers
like the socket), and only watches the socket while no live process has
fewer. A process whose entry has not been refreshed for ``STALE_S`` (stopped,
hung, dead) is left out, so it never holds the others back for longer.
"""

from __future__ import annotations

import mmap
import os
import struct
import time

__all__ = ["AcceptBoard", "STALE_S"]

STALE_S = 1.0  # a live serving loop with a board refreshes its entry at least every 50 ms (server.RECHECK_S)
_SLOT = struct.Struct("<qd")  # open connections, time.monotonic() of the last refresh (one clock machine-wide)


class AcceptBoard:
    """One entry per serving process; ``index`` is this process's."""

    def __init__(self, fd: int, processes: int, index: int) -> None:
        if not 0 <= index < processes:
            raise ValueError(f"accept board: index {index} is not one of {processes} processes")
        self.processes = processes
        self.index = index
        self._fd = fd
        self._mm = mmap.mmap(fd, _SLOT.size * processes)
        self._mine = _SLOT.size * index

    @classmethod
    def create(cls, processes: int) -> AcceptBoard:
        """The first process's board (index 0), on an inheritable memfd sized for ``processes`` entries."""
        fd = os.memfd_create("iqgate-accept-board", 0)
        os.ftruncate(fd, _SLOT.size * processes)
        os.set_inheritable(fd, True)
        return cls(fd, processes, 0)

    @classmethod
    def attach(cls, fd: int, index: int) -> AcceptBoard:
        """A worker's view of the board the first process passed it (its size says how many processes)."""
        return cls(fd, os.fstat(fd).st_size // _SLOT.size, index)

    def fileno(self) -> int:
        return self._fd

    def may_accept(self, connections: int) -> bool:
        """Publish ``connections`` (this process's now) and say whether to take the next one: no live process
        has fewer. Called by the serving loop before each poll."""
        now = time.monotonic()
        _SLOT.pack_into(self._mm, self._mine, connections, now)
        for i in range(self.processes):
            if i == self.index:
                continue
            theirs, seen = _SLOT.unpack_from(self._mm, _SLOT.size * i)
            if theirs < connections and now - seen < STALE_S:
                return False
        return True

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)
