"""Which of a topology's streams SQL can read, under which names (``StreamSpec``; issue 51, pull queries on streams).

``Topology.stream(topic, …)`` declares a stream over one topic; it is queryable
under ``name=`` or, by default, its topic's name. The rules, decided where the
stream is declared:

- a name given with ``name=`` is the stream's: a store of that name, or another
  stream of that name with other columns, is a TopologyError (a name in SQL
  means one relation), and so is a stream over several topics (a relation
  reads one topic; declare one stream per topic);
- a default name (the topic's) yields: when a store has it (``t.table("orders",
  t.stream("orders"))`` is the common shape), or a stream declared earlier over
  the topic with other columns, the stream is not queryable under it and a
  warning says how to name it; a stream over several topics without a name is
  not queryable;
- declaring the same topic with the same columns again is the same stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from ..catalog.schema import Column, SqlType, parse_type
from ..catalog.streams import StreamSpec
from .declarations import TopologyError
from .stream_rows import key_spark_type

__all__ = ["StreamNames"]

log = logging.getLogger("stores.pipeline")


def _sql_type(dt: object, what: str) -> object:
    if isinstance(dt, (TimestampType, TimestampNTZType)):
        return SqlType.TIMESTAMP
    try:
        return parse_type(dt.simpleString())  # type: ignore[attr-defined]
    except ValueError as exc:
        raise TopologyError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class _Declared:
    spec: StreamSpec
    explicit: bool


class StreamNames:
    """The queryable streams of one topology, by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, _Declared] = {}

    def declare(self, topics: tuple[str, ...], schema: StructType, key_type: str, headers: bool, partitions: int,
                name: str | None, stores: Iterable[str], key_column: str = "key") -> None:
        """Record a ``stream()`` declaration (see the module doc for the rules)."""
        if name is not None and (not isinstance(name, str) or not name):
            raise TopologyError(f"stream {', '.join(topics)}: name must be a non-empty string, got {name!r}")
        if not isinstance(key_column, str) or not key_column.replace("_", "a").isalnum():
            raise TopologyError(f"stream {name or ', '.join(topics)}: key_column must be a name of letters, digits "
                                f"and _, got {key_column!r}")
        if len(topics) > 1:
            if name is not None:
                raise TopologyError(f"stream {name!r}: a queryable stream reads one topic, not {len(topics)} "
                                    f"({', '.join(topics)}); declare one stream per topic")
            return
        topic = topics[0]
        try:
            spec = StreamSpec(name=name or topic, topic=topic,
                              key=Column(key_column, _sql_type(key_spark_type(key_type), "the key")),  # type: ignore[arg-type]
                              values=tuple(Column(f.name, _sql_type(f.dataType, f"value field {f.name!r}"))  # type: ignore[arg-type]
                                           for f in schema.fields),
                              partitions=max(1, partitions), headers=headers)
        except (ValueError, TopologyError) as exc:
            if name is not None:
                raise TopologyError(f"stream {name!r}: {exc}") from None
            log.warning("stream of topic %r is not queryable in SQL: %s", topic, exc)
            return
        known = self._by_name.get(spec.name)
        if known is not None and known.spec == spec:
            if name is not None and not known.explicit:
                self._by_name[spec.name] = _Declared(spec, True)
            return
        if spec.name in set(stores):
            if name is not None:
                raise TopologyError(f"stream {spec.name!r}: a store has that name; a name in SQL means one relation: "
                                    "name the stream otherwise")
            log.warning("the stream of topic %r is not queryable as %r: a store has that name; declare it with "
                        "t.stream(%r, …, name='…') to query its records", topic, spec.name, topic)
            return
        if known is not None:
            if name is not None and known.explicit:
                raise TopologyError(f"stream name {spec.name!r} is used twice, with other columns")
            if name is not None:  # an explicit name takes it from a default one
                self._by_name[spec.name] = _Declared(spec, True)
                return
            log.warning("the stream of topic %r declared again with other columns is not queryable as %r (the first "
                        "declaration is); declare it with name='…' to query it", topic, spec.name)
            return
        self._by_name[spec.name] = _Declared(spec, name is not None)

    def check_store(self, store: str) -> None:
        """A store about to be declared: a stream named so by ``name=`` refuses it; a default one yields."""
        known = self._by_name.get(store)
        if known is None:
            return
        if known.explicit:
            raise TopologyError(f"store name {store!r} is a stream's (t.stream(…, name={store!r})); a name in SQL "
                                "means one relation")
        log.warning("the stream of topic %r is not queryable as %r: store %r takes that name; declare it with "
                    "name='…' to query its records", known.spec.topic, store, store)
        del self._by_name[store]

    def specs(self) -> list[StreamSpec]:
        return [d.spec for _, d in sorted(self._by_name.items())]
