"""The KIP-696 client state machine and the uncaught-exception responses (KIP-671)."""

from __future__ import annotations

import enum

__all__ = ["State", "StreamThreadExceptionResponse"]


class State(enum.Enum):
    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    def is_valid_transition(self, new_state: State) -> bool:
        return new_state in _VALID[self]

    def is_running_or_rebalancing(self) -> bool:
        return self in (State.RUNNING, State.REBALANCING)

    def has_not_started(self) -> bool:
        return self is State.CREATED

    def is_shutting_down(self) -> bool:
        return self in (State.PENDING_SHUTDOWN, State.PENDING_ERROR)

    def has_completed_shutdown(self) -> bool:
        return self in (State.NOT_RUNNING, State.ERROR)

    def has_started_or_finished_shutting_down(self) -> bool:
        return self in (State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.PENDING_ERROR, State.ERROR)

    def __str__(self) -> str:
        return self.value


_VALID: dict[State, frozenset[State]] = {
    State.CREATED: frozenset({State.REBALANCING, State.PENDING_SHUTDOWN}),
    State.REBALANCING: frozenset({State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}),
    State.RUNNING: frozenset({State.REBALANCING, State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}),
    State.PENDING_SHUTDOWN: frozenset({State.NOT_RUNNING}),
    State.NOT_RUNNING: frozenset(),
    State.PENDING_ERROR: frozenset({State.ERROR}),
    State.ERROR: frozenset(),
}


class StreamThreadExceptionResponse(enum.Enum):
    REPLACE_THREAD = 0
    SHUTDOWN_CLIENT = 1
    SHUTDOWN_APPLICATION = 2
