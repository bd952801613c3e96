"""The one truth every serving process of a server tells: the app's state, its health, each store's status.

Issue 52: each serving process used to judge the app on its own (the first
by its StreamsApp, the workers by ``app.json`` and the rule that files answer
whatever the writer's state), so after ERROR every other answer was 200
with rows, and a restarted server's health went back and forth between
NOT_RUNNING and REBALANCING. Now the supervisor (the process that owns the
sockets and hosts the writer: ``supervisor.py``) publishes what the writer
says on this board, and every serving process reads it before it answers.

The board is shared memory (a memfd the supervisor creates and its serving
processes inherit, like the listening socket): a sequence number, the time
of the supervisor's last heartbeat, and a JSON document. The supervisor
writes under a seqlock (the sequence is odd while a write is under way);
a reader copies the document and checks that the sequence did not move,
and parses it again only when the sequence changed. A heartbeat every
``HEARTBEAT_S`` says how old a reader's view is (``age_ms``); a view
older than ``STALE_S`` means the supervisor is gone.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["StateBoard", "BoardView", "HEARTBEAT_S", "STALE_S"]

HEARTBEAT_S = 0.05  # the supervisor refreshes the board at least this often (and at once on every change)
STALE_S = 5.0       # a board not refreshed for this long: the supervisor is gone
_SIZE = 4 << 20     # the document's room (stores × their status, crashes, lags): far more than it needs
_HEAD = struct.Struct("<QdI")  # sequence (odd: being written), heartbeat (time.time()), document length


class BoardView:
    """One reading of the board: the document and how old it is."""

    __slots__ = ("seq", "doc", "heartbeat")

    def __init__(self, seq: int, doc: Mapping[str, Any], heartbeat: float) -> None:
        self.seq, self.doc, self.heartbeat = seq, doc, heartbeat

    @property
    def age_ms(self) -> int:
        """How long ago the supervisor last confirmed this view."""
        return max(0, int((time.time() - self.heartbeat) * 1000))

    @property
    def stale(self) -> bool:
        return time.time() - self.heartbeat > STALE_S


class StateBoard:
    """The supervisor's (``create``) or a serving process's (``attach``) handle on one board."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._mm = mmap.mmap(fd, _HEAD.size + _SIZE)
        self._lock = threading.Lock()
        self._view = BoardView(0, {}, 0.0)

    @classmethod
    def create(cls) -> StateBoard:
        fd = os.memfd_create("iqgate-state-board", 0)
        os.ftruncate(fd, _HEAD.size + _SIZE)
        os.set_inheritable(fd, True)
        return cls(fd)

    @classmethod
    def attach(cls, fd: int) -> StateBoard:
        return cls(fd)

    def fileno(self) -> int:
        return self._fd

    # -- the supervisor -------------------------------------------------------------------------------------
    def publish(self, doc: Mapping[str, Any]) -> int:
        """Write ``doc`` (one writer: the supervisor); returns its sequence number."""
        data = json.dumps(doc, separators=(",", ":"), default=str).encode()
        if len(data) > _SIZE:
            raise ValueError(f"the state board holds {_SIZE} bytes; the document is {len(data)}")
        with self._lock:
            seq, _, _ = _HEAD.unpack_from(self._mm, 0)
            _HEAD.pack_into(self._mm, 0, seq + 1, time.time(), 0)  # odd: a write is under way
            self._mm[_HEAD.size:_HEAD.size + len(data)] = data
            _HEAD.pack_into(self._mm, 0, seq + 2, time.time(), len(data))
            return seq + 2

    def beat(self) -> None:
        """Say the supervisor is alive (the document unchanged)."""
        with self._lock:
            seq, _, length = _HEAD.unpack_from(self._mm, 0)
            _HEAD.pack_into(self._mm, 0, seq, time.time(), length)

    # -- the serving processes -------------------------------------------------------------------------------
    def read(self) -> BoardView:
        """The latest document (parsed again only when it changed) with its heartbeat."""
        for _ in range(1000):  # a write takes microseconds; bounded anyway
            seq, beat, length = _HEAD.unpack_from(self._mm, 0)
            if seq & 1:
                time.sleep(0)
                continue
            view = self._view
            if seq == view.seq:
                if beat != view.heartbeat:
                    view = self._view = BoardView(seq, view.doc, beat)
                return view
            data = bytes(self._mm[_HEAD.size:_HEAD.size + length])
            if _HEAD.unpack_from(self._mm, 0)[0] != seq:
                continue  # written meanwhile: read again
            doc = json.loads(data) if data else {}
            view = self._view = BoardView(seq, doc, beat)
            return view
        return self._view

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)
