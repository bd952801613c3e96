"""Live answers (issue 46): a store's whole answer at a Position, then every change after it, resumable exactly.

Design note
-----------

*Why follow the changelog.* Every micro-batch writes one record per store partition to the store's changelog
topic (``stores.changelog``) *before* any partition commits it, each record carrying the batch id, the batch's
source Position and the partition's share of the change rows (empty shares too). So the changelog already is
the ordered, exactly-once list of everything that happens to a store: on the pipeline host, in read-only
processes and on replicas (which restore from the very same records), on the embedded log and on Kafka (one
transaction per batch), across kill -9 (a replayed batch applies its logged record, never a second one). A feed
reads that list; it never diffs stores, never polls them, never touches the write path.

*Position order.* A batch is shown once every partition's record of it has been read (``reader.ChangeReader``),
in batch order; its changes carry its Position. A feed's Position is the batch's source Position plus, under the
changelog topic's name, the offset of the batch's record in each partition (``reader.token``): pull queries
ignore that part (no store reads that topic), and a resume continues right after exactly that batch, even where
two batches share a source Position (Spark's no-data batches that close windows). A plain source Position
resumes after the first batch at exactly it (``resume``).

*Exactness.* The snapshot is read partition by partition with each partition's last batch id in the same SQLite
snapshot; partitions a batch behind the furthest are rolled forward with the batches the hub already decoded
(``snapshot``), so it is the answer at one batch. For key-value, window and session stores a record says each
touched row's new contents (the last change to a row wins, as in the store's merge), so applying the snapshot
and then each batch's upserts and deletes gives exactly the store at every batch. A versioned store's current
row depends on the versions it held, so those changes are resolved against the store in one snapshot per run
of batches (``versioned``); only while a feed is behind the store are several batches' changes of a key merged
into its last one, and those batches are marked not ``complete`` (no progress inside them). A rebuilt generation
swapped in (an upgrade, or damaged files) is followed from the swap: a ``Rebuilt`` event, a snapshot of the new
generation, then its changes. Progress comes after each complete batch that changed something the feed shows,
and every heartbeat (1 s) otherwise.

*Costs.* One thread and one changelog reader per store with feeds in a process (``hub.Hub``), whatever the
number of feeds; each batch is decoded at most once into shared events (column-wise for plain types), and only
the rows of its keys for a feed following keys; a feed following keys a batch does not touch passes it in the
hub's thread without waking. A feed is a cursor: ~3 KiB idle (``benchmarks/bench_live.py``). Memory: the hub's
backlog (recent batches and what the slowest feed still needs, capped; a feed further behind than its buffer
ends with SUBSCRIBER_TOO_SLOW and the Position to resume from) and, while feeds start, one shared snapshot of
the store as decoded rows (read through SQLite, so a big store's snapshot costs what a row-path scan costs). The
write path is untouched; readers cost the pipeline a read of each record (the embedded log is polled every
20 ms: a change reaches a feed ~10 ms after its commit, p50; through a Spark pipeline with a 100 ms trigger
the delivery was 1.02x the pull query's visibility, p50) and a meta read per partition now and then. Resuming
from a point older than the backlog reads the changelog with the feed's own reader until it meets the backlog
(a versioned store's replay holds the records it has not resolved yet); a point the log no longer holds, or of
a generation since swapped out, is SUBSCRIPTION_TOO_OLD with the oldest resumable Position.

Public API: ``LiveFeeds(source).open_feed(store, from_position=None, snapshot=True, ...) -> Feed``, iterating
``Snapshot`` / ``Changes`` / ``Progress`` / ``Rebuilt`` events; ``SubscriptionError`` with stable codes.
"""

from __future__ import annotations

from .errors import (
    INVALID_RESUME_POSITION,
    NOT_UP_TO_BOUND,
    RESUME_POSITION_AHEAD,
    SUBSCRIBER_TOO_SLOW,
    SUBSCRIPTION_CLOSED,
    SUBSCRIPTION_TOO_OLD,
    SUBSCRIPTION_UNAVAILABLE,
    SubscriptionError,
)
from .events import ROW_TAIL, Changes, Event, Progress, Rebuilt, Snapshot, identity_names
from .feed import DEFAULT_BUFFER_BYTES, Feed, KeyFilter
from .feeds import LiveFeeds, open_feed
from .hub import HubLimits
from .shown import ShownKeys

__all__ = [
    "LiveFeeds", "open_feed", "Feed", "KeyFilter", "HubLimits", "DEFAULT_BUFFER_BYTES", "ShownKeys",
    "Snapshot", "Changes", "Progress", "Rebuilt", "Event", "identity_names", "ROW_TAIL",
    "SubscriptionError", "SUBSCRIPTION_TOO_OLD", "SUBSCRIBER_TOO_SLOW", "INVALID_RESUME_POSITION",
    "RESUME_POSITION_AHEAD", "SUBSCRIPTION_UNAVAILABLE", "SUBSCRIPTION_CLOSED", "NOT_UP_TO_BOUND",
]
