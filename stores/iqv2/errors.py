"""The KIP-216 exception hierarchy plus KIP-662's MissingSourceTopicException.

Every class says whether retrying can help (``retryable``), the distinction
KIP-216's first draft wanted as two category classes.
"""

from __future__ import annotations

__all__ = [
    "StreamsException",
    "InvalidStateStoreException",
    "StreamsNotStartedException",
    "StreamsRebalancingException",
    "StateStoreMigratedException",
    "StateStoreNotAvailableException",
    "UnknownStateStoreException",
    "InvalidStateStorePartitionException",
    "StreamsStoppedException",
    "MissingSourceTopicException",
    "IllegalStateException",
]


class StreamsException(Exception):
    retryable: bool = False


class IllegalStateException(StreamsException, RuntimeError):
    """A call that the client's current state does not allow (Java's IllegalStateException)."""


class InvalidStateStoreException(StreamsException):
    """The store cannot be queried now; the subclass says why."""


class StreamsNotStartedException(InvalidStateStoreException):
    """The app is CREATED: retry once it runs."""

    retryable = True


class StreamsRebalancingException(InvalidStateStoreException):
    """The app is REBALANCING: retry when it is RUNNING again."""

    retryable = True


class StateStoreMigratedException(InvalidStateStoreException):
    """The handle outlived a partition move or a store reopen: get a new handle, then retry."""

    retryable = True


class StateStoreNotAvailableException(InvalidStateStoreException):
    """The store is closed because the app is shutting down or stopped: do not retry."""


class UnknownStateStoreException(InvalidStateStoreException):
    """No store of that name in the topology."""


class InvalidStateStorePartitionException(InvalidStateStoreException):
    """The requested partition is not available on this instance."""


class StreamsStoppedException(InvalidStateStoreException):
    """The app is shutting down or has stopped (PENDING_SHUTDOWN, NOT_RUNNING, PENDING_ERROR, ERROR)."""


class MissingSourceTopicException(StreamsException):
    """A source topic is missing or was deleted (KIP-662)."""
