"""The supervisor's publisher: what its host says, put on the state board along KIP-696's edges only.

Every serving process answers by the board (follower.py), so the board must
never say what KIP-696 forbids: the state moves only along the matrix's
edges (``State.is_valid_transition``), NOT_RUNNING and ERROR are final, and
nothing goes back. A host may report a state the board cannot take next —
a StreamsApp is CREATED when it is made, after the server already said
REBALANCING while Spark started — and then the board keeps what it said.
When the host moved on by more than one edge between two looks (RUNNING
to ERROR through PENDING_ERROR), each step is published in turn, so a
reader never sees an edge the matrix lacks. When the client is stopped,
every store's status says so too (health and store status never
contradict each other: issue 52).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from stores.app.health import overall
from stores.iqv2.state import State

from .hosts import Host
from .state_board import HEARTBEAT_S, StateBoard

__all__ = ["Publisher", "Crashes", "path_between"]

log = logging.getLogger(__name__)

CRASH_SHOWN_S = 600.0  # how long a crash stays in /v1/health
_STOPPED = (State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.PENDING_ERROR, State.ERROR)


def path_between(old: State, new: State) -> list[State] | None:
    """The states from ``old`` to ``new`` along KIP-696's edges (without ``old``), shortest first; None when the
    matrix has no way there (``new`` would go back)."""
    if old is new:
        return []
    seen = {old}
    queue: collections.deque[tuple[State, list[State]]] = collections.deque([(old, [])])
    while queue:
        at, path = queue.popleft()
        for nxt in State:
            if nxt in seen or not at.is_valid_transition(nxt):
                continue
            if nxt is new:
                return [*path, nxt]
            seen.add(nxt)
            queue.append((nxt, [*path, nxt]))
    return None


class Crashes:
    """Serving processes that died of a signal: counted for /metrics, the recent ones shown in /v1/health."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._recent: list[dict[str, Any]] = []

    def record(self, index: int, pid: int, how: str, statements: list[str]) -> None:
        with self._lock:
            self.count += 1
            self._recent.append({"at": time.time(), "process": index, "pid": pid, "how": how,
                                 "statements": statements})
            self._recent = self._recent[-20:]

    def to_json(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            recent = [dict(c, at=_iso(c["at"])) for c in self._recent if now - c["at"] < CRASH_SHOWN_S]
            return {"count": self.count, "recent": recent}


class Publisher:
    """A thread that keeps the board up to date with ``host`` (at once on a change it is told of, and at
    least every HEARTBEAT_S), and its heartbeat fresh."""

    def __init__(self, board: StateBoard, host: Host, crashes: Crashes, instance: str) -> None:
        self.board = board
        self.host = host
        self.crashes = crashes
        self.instance = instance
        self.state = State.CREATED
        self.since = time.time()
        self.reason: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="iqgate-publisher", daemon=True)

    def start(self) -> Publisher:
        self.publish()
        self._thread.start()
        return self

    def notify(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(HEARTBEAT_S)
            self._wake.clear()
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - a host that cannot say this time says it next time
                log.exception("publishing the server's state failed")

    def publish(self) -> None:
        """Publish the host's status now (each KIP-696 step in turn); only the heartbeat when nothing changed."""
        with self._lock:
            status = self.host.status()
            try:
                told = State(status.get("state"))
            except ValueError:
                told = self.state
            steps = path_between(self.state, told)
            if steps is None:  # the host is behind what the board said (a new app is CREATED): keep it
                steps = []
            for step in steps or [self.state]:
                if step is not self.state:
                    self.state, self.since = step, time.time()
                doc = self._doc(status, told)
                if doc != self._last:
                    self.board.publish(doc)
                    self._last = doc
                else:
                    self.board.beat()

    def _doc(self, status: Mapping[str, Any], told: State) -> dict[str, Any]:
        state = self.state
        stores = {n: (s.to_json() if hasattr(s, "to_json") else dict(s)) for n, s in status.get("stores", {}).items()}
        if state is told:
            health = dict(status.get("health") or overall(state, {}, self.since))
        else:  # stepping along the edges towards what the host said: this step's own health
            health = overall(state, {}, self.since)
        if state in _STOPPED:
            why = health.get("reason") or f"the client is {state.value}"
            stores = {n: dict(s, status="stopped", reason=why) for n, s in stores.items()}
        doc: dict[str, Any] = {key: value for key, value in status.items()
                               if key not in ("state", "health", "stores")}
        doc.update({"instance": self.instance, "mode": self.host.mode, "state": state.value,
                    "state_since": _iso(self.since), "health": health, "stores": stores,
                    "crashes": self.crashes.to_json()})
        fatal = status.get("fatal")
        if fatal:
            doc["reason"] = fatal
        return doc

    def close(self) -> None:
        """Publish the host's last word (NOT_RUNNING after a clean stop) and stop the thread."""
        self._stop.set()
        self._wake.set()
        self._thread.join(2)
        try:
            self.publish()
        except Exception:  # noqa: BLE001 - the host is closed: nothing more to say
            pass


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"
