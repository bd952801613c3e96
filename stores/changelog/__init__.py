"""Store changelogs (issue 17): every store partition's applied changes, also written to a log topic.

One changelog topic per store and generation, ``<application_id>-<store>-changelog``
(generation 0) or ``<application_id>-<store>.g<N>-changelog`` (a rebuild's generation N), one
partition per store partition, on the log the pipeline reads (the embedded
EventLog, or Kafka). Each record is one batch's share of one store partition:
its canonical rows (Arrow IPC), the batch id, the batch's Position and the
partition's stream time, plus the StoreSpec so a replica on another machine
needs nothing but the log. ``writer.ChangelogWriter`` puts the record in the
changelog *before* the store commits, and applies a record already there
instead of the recomputed rows, so a replay can never leave the changelog and
the store disagreeing. Standby replicas (``stores.replica``) restore from and
tail these topics.
"""

from __future__ import annotations

from .record import ChangelogFormatError, ChangelogRecord
from .topics import (
    ChangelogLog,
    EventLogChangelog,
    KafkaChangelog,
    changelog_log_for,
    changelog_topic,
    generation_topics,
    parse_changelog_topic,
    store_of_topic,
)
from .writer import ChangelogWriter

__all__ = ["ChangelogRecord", "ChangelogFormatError", "ChangelogLog", "EventLogChangelog", "KafkaChangelog",
           "changelog_topic", "changelog_log_for", "store_of_topic", "parse_changelog_topic", "generation_topics",
           "ChangelogWriter"]
