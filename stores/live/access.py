"""What a live feed needs of the process it runs in, whichever that is: the pipeline host (``StreamsApp``), a
read-only process over a state dir (``StateDirReader``: gateway workers, ``Gateway.open``), or a standby replica
(``ReplicaSource``: the same files kind, restored from the changelogs).

- the store's definition and which changelog topic feeds the generation that answers now (``Serving``);
- the open partition stores of that generation (snapshots, versioned look-ups, how far each partition got);
- the changelog log to read (the pipeline's EventLog or Kafka; in a read-only process, where ``app.json`` says
  the source is, unless the caller hands one in: Kafka with credentials is not written down).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Protocol

from ..app import layout
from ..app.reader import StateDirReader
from ..app.streams import StreamsApp
from ..catalog.schema import StoreSpec
from ..changelog.topics import ChangelogLog, EventLogChangelog, KafkaChangelog, changelog_log_for, changelog_topic
from ..engine.base import PartitionStore
from ..replica.copy import REPLICA_JSON
from ..replica.source import ReplicaSource
from .errors import SUBSCRIPTION_UNAVAILABLE, SubscriptionError

__all__ = ["Serving", "StoreAccess", "access_for", "AppAccess", "DirAccess"]


class Serving(NamedTuple):
    """The generation of a store that answers now: its definition, its changelog topic, and a key that changes
    exactly when another generation (or another copy, on a replica) starts answering."""

    spec: StoreSpec
    topic: str
    key: tuple[Any, ...]


class StoreAccess(Protocol):
    application_id: str

    def changelog(self) -> ChangelogLog: ...

    def serving(self, store: str) -> Serving: ...

    def partition(self, store: str, partition: int) -> PartitionStore | None: ...

    def close(self) -> None: ...


def _unavailable(what: str) -> SubscriptionError:
    return SubscriptionError(SUBSCRIPTION_UNAVAILABLE, what)


class AppAccess:
    """The pipeline host: its open stores, and the log its topology reads (or ``changelog`` if given)."""

    def __init__(self, app: StreamsApp, changelog: ChangelogLog | None = None) -> None:
        self.app = app
        self.application_id = app.application_id
        self._changelog = changelog
        self._owned = False

    def changelog(self) -> ChangelogLog:
        if self._changelog is None:
            topology = self.app.topology
            if not getattr(topology, "changelogs", True):
                raise _unavailable(f"application {self.application_id!r} writes no store changelogs "
                                   "(Topology(..., changelogs=False)): live answers follow the changelogs")
            log = changelog_log_for(getattr(topology, "log", None), fsync=False)
            if log is None:
                raise _unavailable(f"application {self.application_id!r} has no log to read store changelogs from")
            self._changelog, self._owned = log, True
        return self._changelog

    def serving(self, store: str) -> Serving:
        spec = self.app.spec(store)
        gen = self.app.current_generation(store)
        return Serving(spec, changelog_topic(self.application_id, store, gen), (gen,))

    def partition(self, store: str, partition: int) -> PartitionStore | None:
        return self.app.partition_store(store, partition)

    def close(self) -> None:
        if self._owned and isinstance(self._changelog, KafkaChangelog):
            self._changelog.close()


class DirAccess:
    """A state dir read by another process's files: the active's, or a replica's (whose copies name the topic
    they were restored from in ``replica.json``)."""

    def __init__(self, reader: StateDirReader, changelog: ChangelogLog | None = None,
                 application_id: str | None = None) -> None:
        self.reader = reader
        info = reader.app_info()
        app_id = application_id or info.application_id
        if not app_id:
            raise _unavailable(f"{layout.app_json_path(reader.state_dir)} names no application: cannot tell which "
                               "changelog topics to follow")
        self.application_id: str = app_id
        self._changelog = changelog
        self._owned = False

    def changelog(self) -> ChangelogLog:
        if self._changelog is None:
            where = self.reader.app_info().source or {}
            if "eventlog" in where:
                from ..log.eventlog import EventLog

                self._changelog = EventLogChangelog(EventLog(where["eventlog"]), fsync=False)
            elif "kafka" in where:
                self._changelog = KafkaChangelog(where["kafka"])
            else:
                raise _unavailable(f"{layout.app_json_path(self.reader.state_dir)} does not say where the changelogs "
                                   "are (a Kafka source with client options is not written down): hand the "
                                   "changelog log to LiveFeeds(changelog=...)")
            self._owned = True
        return self._changelog

    def serving(self, store: str) -> Serving:
        gen = self.reader.generation(store)  # raises UnknownStateStoreException naming the dir
        spec = self.reader.catalog().get(store)
        if spec is None:
            raise _unavailable(f"store {store!r} was removed from {self.reader.state_dir} meanwhile")
        topic = changelog_topic(self.application_id, store, gen)
        try:
            meta = json.loads((layout.generation_dir(self.reader.state_dir, store, gen) / REPLICA_JSON)
                              .read_text(encoding="utf-8"))
            if isinstance(meta, dict) and isinstance(meta.get("changelog"), str):
                topic = meta["changelog"]  # a replica's copy: its local generation number is its own
        except (OSError, ValueError):
            pass
        return Serving(spec, topic, (gen, topic))

    def partition(self, store: str, partition: int) -> PartitionStore | None:
        return self.reader.partition_store(store, partition)

    def close(self) -> None:
        if self._owned and isinstance(self._changelog, KafkaChangelog):
            self._changelog.close()


def access_for(source: Any, changelog: ChangelogLog | None = None, application_id: str | None = None) -> StoreAccess:
    """The access of a StreamsApp, a StateDirReader or a ReplicaSource (a routing wrapper's ``local`` source)."""
    if isinstance(source, StreamsApp):
        return AppAccess(source, changelog)
    if isinstance(source, ReplicaSource):
        return DirAccess(source.reader, changelog or source.replica.changelog,
                         application_id or source.replica.application_id)
    if isinstance(source, StateDirReader):
        return DirAccess(source, changelog, application_id)
    local = getattr(source, "local", None)
    if local is not None and local is not source:
        return access_for(local, changelog, application_id)
    raise TypeError(f"live feeds need a StreamsApp, a StateDirReader or a ReplicaSource, got {type(source).__name__}")
