"""Why a live feed could not start or had to end: one exception, a stable code, and where to resume.

Feeds never end silently: a subscriber is told which Position it holds a whole answer at (``resume_from``) or,
for a resume point the changelog can no longer replay, the oldest Position it could resume from (``oldest``).
"""

from __future__ import annotations

from ..iqv2.position import Position

__all__ = ["SubscriptionError", "SUBSCRIPTION_TOO_OLD", "SUBSCRIBER_TOO_SLOW", "INVALID_RESUME_POSITION",
           "RESUME_POSITION_AHEAD", "SUBSCRIPTION_UNAVAILABLE", "SUBSCRIPTION_CLOSED", "NOT_UP_TO_BOUND"]

#: the resume point is older than what the store's changelog holds (or names a generation swapped out since)
SUBSCRIPTION_TOO_OLD = "SUBSCRIPTION_TOO_OLD"
#: the subscriber fell further behind than its buffer allows; ``resume_from`` is where it can continue
SUBSCRIBER_TOO_SLOW = "SUBSCRIBER_TOO_SLOW"
#: the resume point is not a Position this store passed through (nor a malformed changelog component)
INVALID_RESUME_POSITION = "INVALID_RESUME_POSITION"
#: the resume point names a rebuilt generation this server does not serve yet (another server, or later)
RESUME_POSITION_AHEAD = "RESUME_POSITION_AHEAD"
#: the store has no changelog to follow (changelogs off, the topic missing, a log this process cannot reach)
SUBSCRIPTION_UNAVAILABLE = "SUBSCRIPTION_UNAVAILABLE"
#: the feed (or the server's live feeds) were closed
SUBSCRIPTION_CLOSED = "SUBSCRIPTION_CLOSED"
#: a snapshot asked to be at or past a Position the store did not reach in time (IQv2's failure reason's name)
NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"

_RETRYABLE = frozenset({SUBSCRIBER_TOO_SLOW, RESUME_POSITION_AHEAD, SUBSCRIPTION_UNAVAILABLE, NOT_UP_TO_BOUND})


class SubscriptionError(Exception):
    """A feed that cannot start or cannot go on. ``code`` is stable (one of the constants above).

    ``resume_from``: the Position the subscriber holds the whole answer at (pass it back as the resume point,
    snapshot off); None when it holds no whole answer yet (resubscribe with a snapshot). ``oldest``: for
    SUBSCRIPTION_TOO_OLD, the oldest Position a feed of this store can resume from now.
    """

    def __init__(self, code: str, message: str, *, resume_from: Position | None = None,
                 oldest: Position | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.resume_from = resume_from
        self.oldest = oldest

    @property
    def retryable(self) -> bool:
        return self.code in _RETRYABLE

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
