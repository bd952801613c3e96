"""Which writer a store's foreachBatch gets: the app's, wrapped with the store's changelog (issue 17).

Changelogs are on by default, on the log the pipeline reads (the embedded
EventLog, or Kafka); ``Topology(..., changelogs=False)`` (or the attribute
``topology.changelogs = False``) turns them off, like Kafka Streams'
``withLoggingDisabled``.

A store rebuilt into a new generation (issue 13: damaged files, a changed
definition) starts a new Spark checkpoint whose batch ids begin again at 0,
so its batches cannot continue the changelog's sequence: its writes are not
logged and a warning says that replicas must be restored anew (delete the
changelog topic and the replica's copy of the store).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..changelog.topics import ChangelogLog, changelog_log_for
from ..changelog.writer import ChangelogWriter

__all__ = ["ChangelogWriters"]

log = logging.getLogger(__name__)


class ChangelogWriters:
    def __init__(self, topology: Any, app: Any) -> None:
        self.app = app
        self.enabled = bool(getattr(topology, "changelogs", True))
        # as durable as the stores: with SQLite NORMAL a commit is not synced either, so neither is the record
        fsync = getattr(app, "synchronous", "FULL") != "NORMAL"
        self._log: ChangelogLog | None = (changelog_log_for(getattr(topology, "log", None), fsync=fsync)
                                          if self.enabled else None)
        self._writers: dict[str, ChangelogWriter] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def get(self, name: str, generation: int | None) -> Any:
        """The writer for a batch of store ``name`` (of the generation being built, if named)."""
        inner = self.app.writer(name, generation=generation)
        if self._log is None or generation is not None:
            return inner
        if self.app.current_generation(name) != 0:
            if name not in self._warned:
                self._warned.add(name)
                log.warning("store %s was rebuilt into generation %d: its changes are no longer written to its "
                            "changelog; restore its replicas anew", name, self.app.current_generation(name))
            return inner
        with self._lock:
            w = self._writers.get(name)
            if w is None or w.inner is not inner:
                w = self._writers[name] = ChangelogWriter(inner, self._log, self.app.application_id)
            return w

    def close(self) -> None:
        close = getattr(self._log, "close", None)
        if close is not None:
            close()
