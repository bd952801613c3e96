"""Fair-share admission: per-user concurrent statements, and no user can take the threads another needs.

A face's handler threads are the scarce thing: a statement, running or
waiting its turn, holds one. So admission is decided the moment a statement
arrives, and a user over their share is answered at once (TOO_MANY_STATEMENTS,
retryable, HTTP 429) instead of waiting on a thread. With ``slots`` threads:

- a user holding nothing is admitted whenever a slot is free: ``reserve``
  slots are kept for such newcomers, so a user flooding the server never
  holds every thread and a second user's first statement gets in at once;
- a user already holding slots gets another only while fewer than
  ``slots - reserve`` are held in all and they hold less than their fair
  share, ``ceil((slots - reserve) / active users)``. As users arrive the
  share shrinks, and a heavy user's excess drains as their statements end
  (nothing running is ever cut off). Every active user keeps at least one
  slot (the reserve sees to it); rounding up lets the first users hold one
  more than a later one, which is cheaper than leaving slots idle;
- a user's ``concurrent_statements`` limit queues their extra statements
  (first come, first served, holding their slot, so the queue counts against
  their share) for at most ``wait_s``, then answers TOO_MANY_STATEMENTS.

With one user (no users file) ``reserve=0`` is right: there is no one to
keep room for. Counts are per process (``--workers N`` gives each its own).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from iqgate_client.errors import TooManyStatements

from .principal import Principal

__all__ = ["Admission", "Ticket", "TooManyStatements", "WouldWait"]


@dataclass
class _User:
    held: int = 0  # running + waiting
    running: int = 0
    queue: deque[object] | None = None


class Ticket:
    """One admitted statement's slot; ``release()`` once it has ended (idempotent), or use it as a context."""

    __slots__ = ("_admission", "user", "_released")

    def __init__(self, admission: Admission, user: str) -> None:
        self._admission, self.user, self._released = admission, user, False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(self.user)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class WouldWait(Exception):
    """``admit(..., may_wait=False)``: the statement would wait for one of its user's to end (not an error: the
    caller asks again where it may wait; a serving loop hands the request to a handler thread)."""


class Admission:
    """Admits statements per user; one object shared by every face of a server (thread-safe)."""

    def __init__(self, slots: int, *, reserve: int | None = None, wait_s: float = 30.0) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"admission slots must be a positive integer, got {slots!r}")
        reserve = (1 if slots >= 2 else 0) if reserve is None else reserve
        if not 0 <= reserve < slots:
            raise ValueError(f"admission reserve must be 0..{slots - 1} for {slots} slots, got {reserve!r}")
        if wait_s < 0:
            raise ValueError(f"admission wait_s must be >= 0, got {wait_s!r}")
        self.slots, self.reserve, self.wait_s = slots, reserve, wait_s
        self._users: dict[str, _User] = {}
        self._held = 0
        self._cond = threading.Condition()

    def share(self, active_users: int) -> int:
        """How many slots one user may hold while ``active_users`` users hold some."""
        return max(1, math.ceil((self.slots - self.reserve) / max(1, active_users)))

    def admit(self, user: str, limit: int | None = None, *, wait_s: float | None = None,
              may_wait: bool = True) -> Ticket:
        """A slot for one statement of ``user`` (whose own limit is ``limit``), or TooManyStatements at once
        (over their share) or after ``wait_s`` (their own limit stayed reached); ``may_wait=False``: WouldWait
        instead of waiting at all."""
        wait_s = self.wait_s if wait_s is None else wait_s
        with self._cond:
            u = self._users.get(user)
            held = u.held if u is not None else 0
            if held == 0:
                if self._held >= self.slots:
                    raise TooManyStatements(f"all {self.slots} statement slots are in use; retry shortly")
            else:
                share = self.share(len(self._users))
                if self._held >= self.slots - self.reserve or held >= share:
                    raise TooManyStatements(
                        f"user {user} already has {held} statement(s) running or queued, their fair share of this "
                        f"server's {self.slots} slots while {len(self._users)} users are active; retry shortly")
            if u is None:
                u = self._users[user] = _User()
            u.held += 1
            self._held += 1
            if limit is None or u.running < limit and not u.queue:
                u.running += 1
                return Ticket(self, user)
            if not may_wait:
                self._drop(user, u)
                raise WouldWait(user)
            self._queue(user, u, limit, wait_s)
            return Ticket(self, user)

    def _queue(self, user: str, u: _User, limit: int, wait_s: float) -> None:
        """Wait (holding the slot) until this statement heads the user's queue and one of theirs has ended."""
        me = object()
        if u.queue is None:
            u.queue = deque()
        u.queue.append(me)
        deadline = time.monotonic() + wait_s
        try:
            while not (u.queue[0] is me and u.running < limit):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TooManyStatements(f"user {user} may run {limit} statement(s) at once and waited "
                                            f"{wait_s:g} s for one to end; retry later")
                self._cond.wait(left)
        except BaseException:
            u.queue.remove(me)
            self._drop(user, u)
            self._cond.notify_all()  # the next in the queue may now be at its head
            raise
        u.queue.popleft()
        u.running += 1
        if u.queue:
            self._cond.notify_all()

    def _drop(self, user: str, u: _User) -> None:
        u.held -= 1
        self._held -= 1
        if u.held == 0:
            del self._users[user]

    def _release(self, user: str) -> None:
        with self._cond:
            u = self._users[user]
            u.running -= 1
            self._drop(user, u)
            self._cond.notify_all()

    @contextmanager
    def statement(self, principal: Principal, *, wait_s: float | None = None) -> Iterator[Ticket]:
        """``with admission.statement(principal): run it`` — the principal's name and concurrency limit."""
        ticket = self.admit(principal.name, principal.limits.concurrent_statements, wait_s=wait_s)
        try:
            yield ticket
        finally:
            ticket.release()

    def usage(self) -> dict[str, tuple[int, int]]:
        """``{user: (running, queued)}`` now, for a system table or health."""
        with self._cond:
            return {name: (u.running, u.held - u.running) for name, u in self._users.items()}
