"""The KIP-696 client state machine as Kafka's ``KafkaStreams.setState`` runs it.

Kept apart from ``StreamsApp`` so the full transition matrix is testable on
its own. Listeners run outside the lock (a listener may call back into the
app, e.g. ``close()``), in transition order per thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..iqv2.errors import IllegalStateException
from ..iqv2.state import State

__all__ = ["ClientStateMachine", "silently_refused"]

log = logging.getLogger(__name__)

StateListener = Callable[[State, State], None]


def silently_refused(old: State, new: State) -> bool:
    """The transitions Kafka refuses without an exception (``setState`` returns false)."""
    if old is State.PENDING_SHUTDOWN and new is not State.NOT_RUNNING:
        return True
    if old is State.NOT_RUNNING and new in (State.PENDING_SHUTDOWN, State.NOT_RUNNING):
        return True
    if old is State.REBALANCING and new is State.REBALANCING:
        return True
    if old is State.ERROR and new in (State.PENDING_ERROR, State.ERROR):
        return True
    if old is State.PENDING_ERROR and new is not State.ERROR:
        return True
    return False


class ClientStateMachine:
    """Current state, transitions, listeners, and waiting for a state."""

    def __init__(self, client_id: str, on_change: Callable[[State, State], None] | None = None) -> None:
        self.client_id = client_id
        self._state = State.CREATED
        self._cond = threading.Condition()
        self._listener: StateListener | None = None
        self._local = threading.local()
        self._on_change = on_change  # called under the lock (persisting app.json keeps transition order)

    @property
    def state(self) -> State:
        return self._state

    def set_listener(self, listener: StateListener | None) -> None:
        self._listener = listener

    def transition(self, new: State) -> bool:
        """Move to ``new``; False for a silently refused transition, IllegalStateException for an invalid one."""
        with self._cond:
            old = self._state
            if silently_refused(old, new):
                log.debug("stream-client %s: ignoring transition %s -> %s", self.client_id, old, new)
                return False
            if not old.is_valid_transition(new):
                raise IllegalStateException(
                    f"Stream-client {self.client_id}: Unexpected state transition from {old} to {new}"
                )
            self._state = new
            log.info("stream-client %s: State transition from %s to %s", self.client_id, old, new)
            if self._on_change is not None:
                self._on_change(new, old)
            self._cond.notify_all()
        listener = self._listener
        if listener is not None:
            self._local.depth = getattr(self._local, "depth", 0) + 1
            try:
                listener(new, old)
            except Exception:  # noqa: BLE001 - a faulty listener must not break the state machine
                log.exception("stream-client %s: state listener failed on %s -> %s", self.client_id, old, new)
            finally:
                self._local.depth -= 1
        return True

    def in_listener(self) -> bool:
        """Is this thread inside a state-listener call? Then it must not wait for a later state."""
        return getattr(self._local, "depth", 0) > 0

    def wait_for(self, targets: set[State], timeout_s: float | None) -> bool:
        """Block until the state is one of ``targets``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state in targets, timeout=timeout_s)
