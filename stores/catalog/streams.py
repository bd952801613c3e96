"""What a queryable stream is (``StreamSpec``), what a scan of it asks for (``StreamQuery``), and the catalog
that carries streams beside the stores (``Catalog``).

A stream is a topic read as a relation of its records (ksqlDB's pull queries on
streams): the key, the value fields of the declared schema, and the record's
own columns ``rowtime``, ``partition``, ``offset`` (and ``headers`` when the
stream was declared with them). ``SELECT *`` shows the key and the values, as
ksqlDB's does; the record columns are there when named, like the stores'
pseudo-columns. A stream has no store behind it: a scan reads the topic from
the log, so its Position is the log's offsets the scan covered.

Why the streams ride beside the stores instead of among them: every caller
that walks a catalog (positions, health, partitions, grants, routing) means
the stores, and a stream is none of those things. ``Catalog`` is the stores'
mapping, as before, with ``streams`` beside it for the few that read both (the
planner, the system tables, SHOW and DESCRIBE). A filtered copy of a catalog
(a plain dict) has no streams: it shows less, never more.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .nested import NestedType
from .schema import Column, SqlType, StoreSpec, parse_type

__all__ = ["StreamKind", "StreamSpec", "StreamQuery", "Catalog", "streams_of", "RECORD_COLUMNS", "HEADERS_TYPE",
           "STREAM_NAME_RE", "relation_spec"]

#: A stream's SQL name: by default its topic's, so the characters Kafka allows in a topic name (quote it in SQL
#: when it has ``-`` or ``.``).
STREAM_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: The record columns every stream has, in order (``headers`` follows when the stream carries them).
RECORD_COLUMNS = ("rowtime", "partition", "offset")
#: Kafka's record headers as Spark's Kafka source types them: name/value pairs in record order.
HEADERS_TYPE = NestedType("ARRAY", element=NestedType("STRUCT", fields=(("key", SqlType.VARCHAR),
                                                                           ("value", SqlType.BLOB))))
_RESERVED = set(RECORD_COLUMNS) | {"headers", "_partition", "_position", "_failure_reason", "_failure_message"}


class StreamKind(str, enum.Enum):
    """The kind a stream reports where stores report theirs (SHOW TABLES, information_schema, EXPLAIN)."""

    STREAM = "stream"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One stream: its SQL ``name``, the ``topic`` it reads, the ``key`` and ``values`` columns, whether records
    carry ``headers``, and ``partitions`` (the topic's count when it was declared; a scan asks the log)."""

    name: str
    topic: str
    key: Column
    values: tuple[Column, ...]
    partitions: int = 1
    headers: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not STREAM_NAME_RE.match(self.name) or self.name in (".", ".."):
            raise ValueError(f"stream name {self.name!r} must be 1-249 of the characters A-Z a-z 0-9 . _ - "
                             "(a topic's)")
        if not isinstance(self.topic, str) or not STREAM_NAME_RE.match(self.topic):
            raise ValueError(f"stream {self.name!r}: topic {self.topic!r} is not a topic name")
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1:
            raise ValueError(f"stream {self.name!r}: partitions must be an integer >= 1, got {self.partitions!r}")
        object.__setattr__(self, "values", tuple(self.values))
        names = [self.key.name] + [c.name for c in self.values]
        for n in names:
            if n.lower() in _RESERVED:
                raise ValueError(f"stream {self.name!r}: column name {n!r} is reserved for the record's own columns "
                                 f"({', '.join(RECORD_COLUMNS)}, headers) and the pseudo-columns")
        lowered = [n.lower() for n in names]
        if len(set(lowered)) != len(lowered):
            raise ValueError(f"stream {self.name!r}: duplicate column names in {names}")
        if isinstance(self.key.type, NestedType) and self.key.type.kind == "MAP":
            raise ValueError(f"stream {self.name!r}: key column {self.key.name!r} is {self.key.type}; a key is a "
                             "scalar, an ARRAY or a STRUCT")

    # -- the SQL face (what the planner and the catalogs read, as they read a StoreSpec's) -------------------
    @property
    def kind(self) -> StreamKind:
        return StreamKind.STREAM

    @property
    def source_topics(self) -> tuple[str, ...]:
        return (self.topic,)

    @property
    def composite(self) -> bool:
        return False

    @property
    def key_parts(self) -> tuple[Column, ...]:
        return ()

    def key_columns(self) -> tuple[Column, ...]:
        return (self.key,)

    def system_columns(self) -> tuple[str, ...]:
        return ()

    def columns(self) -> tuple[Column, ...]:
        """What ``SELECT *`` shows: the key, then the values (ksqlDB's stream pull queries)."""
        return (self.key,) + self.values

    def record_columns(self) -> tuple[Column, ...]:
        """The record's own columns, shown when named: its time, partition and offset (and headers)."""
        cols = (Column("rowtime", SqlType.TIMESTAMP, False), Column("partition", SqlType.INTEGER, False),
                Column("offset", SqlType.BIGINT, False))
        return cols + ((Column("headers", HEADERS_TYPE),) if self.headers else ())

    def all_columns(self) -> tuple[Column, ...]:
        """Every column a statement can name (what information_schema and DESCRIBE list)."""
        return self.columns() + self.record_columns()

    def value_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.values)

    # -- persistence (``<state_dir>/streams/<name>/stream.json``) ---------------------------------------------
    def to_json(self) -> str:
        def col(c: Column) -> dict[str, Any]:
            return {"name": c.name, "type": c.type.value, "nullable": c.nullable}

        return json.dumps({"name": self.name, "topic": self.topic, "key": col(self.key),
                           "values": [col(c) for c in self.values], "partitions": self.partitions,
                           "headers": self.headers}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StreamSpec:
        d = json.loads(text)

        def col(c: Mapping[str, Any]) -> Column:
            return Column(c["name"], parse_type(c["type"]), c.get("nullable", True))

        return cls(name=d["name"], topic=d["topic"], key=col(d["key"]), values=tuple(col(c) for c in d["values"]),
                   partitions=int(d.get("partitions", 1)), headers=bool(d.get("headers", False)))


@dataclass(frozen=True, slots=True)
class StreamQuery:
    """Which records of a stream a scan reads: pushed-down predicates, each a pre-filter (the SQL still decides).

    ``partitions``: the partitions named (``partition = n`` / ``IN``; None: any), further cut to the inclusive
    ``partition_range``; ``offsets`` and ``rowtime`` (epoch ms) are inclusive ranges (None: open). ``empty``:
    the predicates cannot match (``offset < 0``): nothing is read.
    """

    partitions: frozenset[int] | None = None
    partition_range: tuple[int | None, int | None] = (None, None)
    offsets: tuple[int | None, int | None] = (None, None)
    rowtime: tuple[int | None, int | None] = (None, None)
    empty: bool = False

    @property
    def pushed(self) -> bool:
        """Does the query narrow the read at all (else it is a whole-topic scan, a table scan)?"""
        return (self.empty or self.partitions is not None or self.partition_range != (None, None)
                or self.offsets != (None, None) or self.rowtime != (None, None))

    def wanted(self, count: int) -> list[int]:
        """The partitions to read of a topic with ``count`` partitions; named ones past the end included (they do
        not exist, and the scan says so, as a store does for ``_partition = 99``)."""
        lo, hi = self.partition_range
        base: Iterable[int] = sorted(self.partitions) if self.partitions is not None else range(count)
        return [p for p in base if (lo is None or p >= lo) and (hi is None or p <= hi)]

    def __repr__(self) -> str:
        def rng(r: tuple[Any, Any]) -> str:
            return f"[{'-inf' if r[0] is None else r[0]}, {'+inf' if r[1] is None else r[1]}]"

        if self.empty:
            return "StreamQuery(empty)"
        parts = []
        if self.partitions is not None:
            parts.append("partitions=[" + ", ".join(str(p) for p in sorted(self.partitions)) + "]")
        if self.partition_range != (None, None):
            parts.append(f"partition_range={rng(self.partition_range)}")
        if self.offsets != (None, None):
            parts.append(f"offsets={rng(self.offsets)}")
        if self.rowtime != (None, None):
            parts.append(f"rowtime_ms={rng(self.rowtime)}")
        return "StreamQuery(" + (", ".join(parts) or "every record") + ")"


class Catalog(dict):  # type: ignore[type-arg]
    """The stores by name (``{name: StoreSpec}``, what every caller walks) with the streams beside them."""

    __slots__ = ("streams",)

    def __init__(self, stores: Mapping[str, StoreSpec] | Iterable[tuple[str, StoreSpec]] = (),
                 streams: Mapping[str, StreamSpec] | None = None) -> None:
        super().__init__(stores)
        self.streams: Mapping[str, StreamSpec] = MappingProxyType(dict(streams or {}))


def streams_of(catalog: Mapping[str, Any]) -> Mapping[str, StreamSpec]:
    """The streams a catalog carries (none for a plain mapping of stores)."""
    return catalog.streams if isinstance(catalog, Catalog) else MappingProxyType({})


def relation_spec(catalog: Mapping[str, Any], name: str) -> StoreSpec | StreamSpec:
    """The store, else the stream, of that exact name (KeyError when neither)."""
    spec = catalog.get(name)
    return spec if spec is not None else streams_of(catalog)[name]
