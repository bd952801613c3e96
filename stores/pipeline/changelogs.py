"""Which writer a store's foreachBatch gets: the app's, wrapped with the store's changelog (issue 17).

Changelogs are on by default, on the log the pipeline reads (the embedded
EventLog, or Kafka); ``Topology(..., changelogs=False)`` (or the attribute
``topology.changelogs = False``) turns them off, like Kafka Streams'
``withLoggingDisabled``.

Generations: a store rebuilt into generation N (issue 13: damaged files;
issue 20: a changed definition) is built by a query of its own whose batch
ids begin again at 0, so it cannot continue the changelog of generation N-1.
It gets a topic of its own, ``<application_id>-<store>.g<N>-changelog``
(``changelog_topic``), logged from its batch 0 with the same exactly-once
steps (``ChangelogWriter``); after the swap the same query, checkpoint and
topic go on as the current generation. Replicas follow the highest
generation topic of a store (``stores.replica.standby``).

- ``begin(store, N)``: a rebuild of generation N begins (again, after a
  restart or an abandoned attempt: its files and checkpoint start over), so
  any topic an earlier attempt left is deleted first; a replica never mixes
  two attempts (the records also carry their topic's id).
- Once a generation N is current, the topics of the store's lower
  generations are deleted (in the background, best effort, at the first
  batch of generation N as current: after the swap, and after any restart,
  so a deletion that failed is retried). Why delete: each is a full copy of
  the store on the log (retention is unlimited), and no replica needs it: a
  replica still restoring from it keeps answering from its copy at the
  Position it reached, and swaps to generation N once its copy of N
  reaches that Position.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ..changelog.topics import ChangelogLog, changelog_log_for, changelog_topic, generation_topics
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
        self._writers: dict[tuple[str, int], ChangelogWriter] = {}
        self._cleaned: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def get(self, name: str, generation: int | None) -> Any:
        """The writer for a batch of store ``name`` (of the generation being built, if named; else the current)."""
        inner = self.app.writer(name, generation=generation)
        if self._log is None:
            return inner
        gen = self.app.current_generation(name) if generation is None else generation
        with self._lock:
            w = self._writers.get((name, gen))
            if w is not None and w.inner is not inner and _same_stores(w.stores, inner.partition_stores):
                w.inner = inner  # the building generation's writer and, after the swap, the current one's: one tail
            elif w is None or w.inner is not inner:
                w = self._writers[(name, gen)] = ChangelogWriter(inner, self._log, self.app.application_id, gen)
            clean = gen > 0 and gen == self.app.current_generation(name) and (name, gen) not in self._cleaned
            if clean:
                self._cleaned.add((name, gen))
        if clean:
            threading.Thread(target=self._delete_below, args=(name, gen), daemon=True,
                             name=f"iqgate-changelog-cleanup-{name}").start()
        return w

    def prepare(self, name: str) -> None:
        """Ready the current generation's changelog of store ``name`` in the background (``ChangelogWriter.prepare``).

        Best effort: what fails here, the store's first batch meets again and
        reports. A generation being built is not prepared ahead: ``begin``
        may delete its topic first.
        """
        if self._log is None or self._closed:
            return

        def run() -> None:
            if self._closed:
                return
            try:
                self.get(name, None).prepare()
            except Exception as exc:  # noqa: BLE001 - the first batch does it again and fails visibly
                log.debug("store %s: changelog not prepared ahead of the first batch: %s", name, exc)

        threading.Thread(target=run, daemon=True, name=f"iqgate-changelog-prepare-{name}").start()

    def begin(self, name: str, generation: int) -> None:
        """A rebuild of ``generation`` begins (perhaps again): delete the topic an earlier attempt left."""
        if self._log is None:
            return
        with self._lock:
            self._writers.pop((name, generation), None)
            self._cleaned.discard((name, generation))
        topic = changelog_topic(self.app.application_id, name, generation)
        if self._log.delete(topic):
            log.warning("store %s: deleted changelog %s, left by an earlier attempt to build generation %d: the "
                        "rebuild starts over, and so do the replicas following it", name, topic, generation)

    def _delete_below(self, name: str, generation: int) -> None:
        """Delete the store's changelog topics of generations below ``generation`` (now the current one)."""
        assert self._log is not None
        if self._closed:
            return  # the next start deletes them
        try:
            gens = generation_topics(self.app.application_id, self._log.list_topics()).get(name, {})
            for g, topic in sorted(gens.items()):
                if g < generation and self._log.delete(topic):
                    log.info("store %s: deleted changelog %s of generation %d (generation %d is current)",
                             name, topic, g, generation)
        except Exception as exc:  # noqa: BLE001 - best effort: the next start tries again
            with self._lock:
                self._cleaned.discard((name, generation))
            if self._closed:
                return  # closed under it: not a failure to report
            log.warning("store %s: cannot delete the changelogs of generations below %d: %s", name, generation, exc)

    def close(self) -> None:
        """The runtime stopped: close the changelog's connections (Kafka: a transactional producer per topic, each
        with threads of its own, which would otherwise live as long as the process). Background work begun
        earlier (a prepare, a deletion of old generations) finds it closed and gives up quietly."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writers.clear()
        close = getattr(self._log, "close", None)
        if close is not None:
            close()


def _same_stores(a: Mapping[int, Any], b: Mapping[int, Any]) -> bool:
    """The very same open partition stores (not equal copies): a writer's view of the changelog's tail holds."""
    return a.keys() == b.keys() and all(a[p] is b[p] for p in a)
