"""A live answer as a face holds it: change messages to take, the Position to resume from, an end that says why.

The server's pump (``pump.py``) puts messages into the subscription's outbox as its feed has news; the face
takes them in its own thread (an HTTP handler, a PG connection, a DB-API cursor, a Python loop). The outbox is
bounded: past ``OUTBOX_BYTES`` the pump stops taking events from the feed until the face has taken half of it,
so a slow reader costs its feed's place in the store's shared backlog (``stores.live``), which ends it with
SUBSCRIBER_TOO_SLOW once it is further behind than its buffer. Nothing is ever dropped: an end is raised after
every message before it was taken, with the Position the reader then holds the whole answer at.

``position`` is that resume point: it moves when the reader has taken every message of a whole answer (a
snapshot's last row, a batch's last change, a progress message), never in the middle of a batch.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from stores.iqv2.position import Position

from ..errors import GatewayError, SubscriptionError
from .changes import Change, Columns

__all__ = ["Subscription", "OUTBOX_BYTES"]

OUTBOX_BYTES = 256 << 10  # estimated bytes of messages waiting for the reader


def _size(change: Change) -> int:
    """A cheap estimate of a message's memory (its row's values), for the outbox budget."""
    row = change.row
    if row is None:
        return 64
    n = 64 + 8 * len(row)
    for v in row:
        if isinstance(v, (str, bytes)):
            n += len(v)
        elif isinstance(v, (list, dict, tuple)):
            n += 16 * len(v) + 32
    return n


class Subscription:
    """One live answer (``Gateway.subscribe``). Iterate it (each item a ``Change``), or ``poll``/``take``.

    ``columns``: (name, type) of its rows, the SELECT's columns then the store's identity columns it did not
    list (``appended``); ``identity``: the names of the columns that name one row (deletes fill only these). A ``reset``
    message carries the new columns. The end is raised as ``SubscriptionError`` (or the gateway error that
    ended it) once every earlier message was taken; ``close()`` ends it from the reader's side (iteration then
    stops).
    """

    def __init__(self, *, text: str, store: str, columns: Columns, identity: tuple[str, ...],
                 appended: tuple[str, ...], snapshot: bool, progress: bool, start: Position | None,
                 on_close: Callable[[Subscription], None]) -> None:
        self.text = text
        self.store = store
        self.columns = list(columns)
        self.identity = identity
        self.appended = appended
        self.snapshot = snapshot
        self.progress = progress
        self.started = time.time()
        self._position = start
        self._cond = threading.Condition()
        self._outbox: deque[Change | Position] = deque()
        self._bytes = 0
        self._end: GatewayError | None = None
        self._closed = False
        self._on_close = on_close
        self._wake_pump: Callable[[], None] | None = None
        self._held_back = False  # the pump stopped for a full outbox: wake it once half was taken
        self.close_reason: str | None = None

    # -- the reader's side -------------------------------------------------------------------------------------
    @property
    def position(self) -> Position | None:
        """The Position the reader holds the whole answer at (resume ``AS OF POSITION`` it, snapshot off); None
        until a whole answer was taken (a snapshot still coming)."""
        return self._position

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ending(self) -> bool:
        """The subscription has ended (its last messages may still wait to be taken)."""
        return self._end is not None or self._closed

    def take(self, max_items: int = 1024, timeout_s: float | None = None) -> list[Change]:
        """Up to ``max_items`` messages, waiting up to ``timeout_s`` (None: until one comes) for the first; ``[]``
        when none came in time. Raises the end once everything before it was taken."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        wake = None
        out: list[Change] = []
        with self._cond:
            box = self._outbox
            while True:
                while box and isinstance(box[0], Position):
                    self._position = box.popleft()
                if box:
                    break
                if self._closed:
                    raise self._closed_error()
                if self._end is not None:
                    raise self._end
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return []
                self._cond.wait(left if left is not None else 1.0)
            while box and len(out) < max_items:
                item = box.popleft()
                if isinstance(item, Position):
                    self._position = item
                else:
                    self._bytes -= _size(item)
                    out.append(item)
            while box and isinstance(box[0], Position):  # a mark right after what was taken: the reader has it
                self._position = box.popleft()
            if self._held_back and self._bytes <= OUTBOX_BYTES // 2:
                self._held_back = False
                wake = self._wake_pump
        if wake is not None:
            wake()
        return out

    def poll(self, timeout_s: float | None = None) -> Change | None:
        """The next message, waiting up to ``timeout_s`` (None: until one comes); None if none came."""
        got = self.take(1, timeout_s)
        return got[0] if got else None

    def __iter__(self) -> Iterator[Change]:
        return self

    def __next__(self) -> Change:
        try:
            got = self.take(1, None)
        except SubscriptionError as exc:
            if exc.code == "SUBSCRIPTION_CLOSED" and self._closed:
                raise StopIteration from None
            raise
        return got[0]

    def close(self, reason: str | None = None) -> None:
        """End it now and free what it holds (its feed, its place in the backlog, its outbox). Idempotent.
        ``reason``: why, when not the reader's choice (a face that dropped a client too slow to read), for the
        counts in /metrics (else CLOSED_BY_CLIENT)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
            self._outbox.clear()
            self._bytes = 0
            self._cond.notify_all()
        self._on_close(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        at = None if self._position is None else self._position.to_json()
        return f"Subscription(store={self.store!r}, position={at}, closed={self._closed})"

    def _closed_error(self) -> SubscriptionError:
        return SubscriptionError(f"the subscription to store {self.store!r} was closed", code="SUBSCRIPTION_CLOSED",
                                 resume_from=self._position)

    # -- the pump's side ----------------------------------------------------------------------------------------
    def full(self) -> bool:
        """Over its outbox budget: the pump stops taking events until the reader catches up (and says so)."""
        with self._cond:
            if self._bytes > OUTBOX_BYTES:
                self._held_back = True
                return True
            return False

    def deliver(self, changes: list[Change], mark: Position | None) -> None:
        """Messages for the reader, then (when the feed is at a whole answer after them) the resume mark."""
        if not changes and mark is None:
            return
        with self._cond:
            if self._closed or self._end is not None:
                return
            box = self._outbox
            for c in changes:
                box.append(c)
                self._bytes += _size(c)
            if mark is not None:
                if not box:  # the reader has taken everything before it
                    self._position = mark
                elif isinstance(box[-1], Position):
                    box[-1] = mark
                else:
                    box.append(mark)
            self._cond.notify_all()

    def end(self, error: GatewayError) -> None:
        """The subscription is over: the reader gets ``error`` after what it has not taken yet."""
        with self._cond:
            if self._end is None and not self._closed:
                self._end = error
            self._cond.notify_all()
