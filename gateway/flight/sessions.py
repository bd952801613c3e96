"""The settings of Flight sessions (``SET`` on a session, as on a PostgreSQL connection), bounded and expiring.

A session exists on the server only once it holds something (a SET): until
then a session token costs nothing. An idle session is forgotten after
``idle_s``; a client that comes back with its token is then told its session
expired (its settings are gone) instead of being answered with the defaults
as if nothing had happened. The expired ids are remembered in a bounded set.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import pyarrow.flight as fl

from .errors import refusal
from .internals import Gateway, Session

__all__ = ["SessionStore"]

_EXPIRED_KEPT = 65_536


class SessionStore:
    def __init__(self, gateway: Gateway, max_sessions: int, idle_s: float) -> None:
        self._gateway = gateway
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._live: OrderedDict[str, tuple[Session, float]] = OrderedDict()  # least recently used first
        self._expired: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def get(self, sid: str | None) -> Session | None:
        """The session's settings, None when it never set anything; an expired session is an error."""
        if sid is None:
            return None
        with self._lock:
            self._reap_locked(time.monotonic())
            entry = self._live.get(sid)
            if entry is not None:
                self._live[sid] = (entry[0], time.monotonic())
                self._live.move_to_end(sid)
                return entry[0]
            if sid in self._expired:
                raise refusal("SESSION_EXPIRED", f"this session was idle for more than {self.idle_s:g} s and its "
                              "settings are gone: connect again (and SET them again)",
                              status=fl.FlightUnauthenticatedError)
        return None

    def adopt(self, sid: str, session: Session) -> None:
        """Keep ``session`` as the settings of ``sid`` (its first SET)."""
        with self._lock:
            self._reap_locked(time.monotonic())
            if sid not in self._live and len(self._live) >= self.max_sessions:
                raise refusal("TOO_MANY_SESSIONS", f"the server holds the settings of {self.max_sessions} sessions "
                              f"already (each kept until idle for {self.idle_s:g} s); send settings as x-iq-setting-* "
                              "headers instead, or try again later", status=fl.FlightUnavailableError)
            self._live[sid] = (session, time.monotonic())
            self._live.move_to_end(sid)

    def new(self) -> Session:
        return self._gateway.session()

    def reap(self) -> None:
        with self._lock:
            self._reap_locked(time.monotonic())

    def _reap_locked(self, now: float) -> None:
        while self._live:
            sid, (_, used) = next(iter(self._live.items()))
            if now - used <= self.idle_s:
                break
            del self._live[sid]
            self._expired[sid] = None
            if len(self._expired) > _EXPIRED_KEPT:
                self._expired.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._live.clear()

