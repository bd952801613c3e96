"""Position and PositionBound: the consistency vector of IQv2 (KIP-796).

Kafka's ``Position`` is mutable and refuses ``hashCode``; docs/DESIGN.md §3 makes ours
an immutable value instead, so ``merge``/``with_component`` return new objects
and a Position can be a dict key or be cached safely across threads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["Position", "PositionBound", "PositionError"]


class PositionError(ValueError):
    """A position literal that is not ``{topic: {partition: offset}}``."""


def _freeze(raw: Mapping[str, Mapping[Any, Any]] | None) -> Mapping[str, Mapping[int, int]]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping):
        raise PositionError(f"a position is a map of topic -> {{partition: offset}}, got {type(raw).__name__}")
    out: dict[str, Mapping[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(topic, str) or not topic:
            raise PositionError(f"topic names must be non-empty strings, got {topic!r}")
        if not isinstance(parts, Mapping):
            raise PositionError(f"topic {topic!r}: expected a map of partition -> offset, got {type(parts).__name__}")
        inner: dict[int, int] = {}
        for p, o in parts.items():
            part = _as_int(p, f"topic {topic!r}: partition {_shown(p)}")
            off = _as_int(o, f"topic {topic!r} partition {_shown(p)}: offset {_shown(o)}")
            if part < 0:
                raise PositionError(f"topic {topic!r}: partition {part} is negative")
            if part > _MAX_PARTITION:
                raise PositionError(f"topic {topic!r}: partition {part} is past Kafka's largest ({_MAX_PARTITION})")
            if off < 0:
                raise PositionError(f"topic {topic!r} partition {part}: offset {off} is negative")
            if off > _MAX_OFFSET:
                raise PositionError(f"topic {topic!r} partition {part}: offset {off} does not fit in 64 bits "
                                    "(Kafka's offsets are longs)")
            inner[part] = off
        out[topic] = MappingProxyType(dict(sorted(inner.items())))
    return MappingProxyType(dict(sorted(out.items())))


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:30]}… ({len(text)} characters)"


_MAX_PARTITION = 2**31 - 1  # a Kafka partition is an int
_MAX_OFFSET = 2**63 - 1  # an offset a long


def _as_int(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise PositionError(f"{what} is not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 10)
        except ValueError:
            pass
    raise PositionError(f"{what} is not an integer")


class Position:
    """Offsets of the last record applied, per source topic and partition.

    >>> p = Position.from_map({"orders": {0: 41}})
    >>> p.merge(Position.from_map({"orders": {0: 7, 1: 3}}))
    Position{position={orders={0=41, 1=3}}}
    """

    __slots__ = ("_map", "_hash", "_json")

    def __init__(self, _frozen: Mapping[str, Mapping[int, int]]) -> None:
        self._map = _frozen
        self._hash: int | None = None
        self._json: str | None = None

    # -- constructors -------------------------------------------------
    @classmethod
    def empty(cls) -> Position:
        return _EMPTY

    empty_position = empty

    @classmethod
    def from_map(cls, raw: Mapping[str, Mapping[Any, Any]] | None) -> Position:
        """Deep copy of ``{topic: {partition: offset}}``; ``None`` is empty.

        Partition keys may be strings (JSON objects have string keys).
        """
        frozen = _freeze(raw)
        return cls(frozen) if frozen else _EMPTY

    @classmethod
    def from_json(cls, text: str) -> Position:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PositionError(f"invalid JSON in position: {exc.msg} at character {exc.pos}") from None
        except ValueError as exc:  # an integer of more digits than Python converts (4,300)
            raise PositionError(f"invalid position: {str(exc).splitlines()[0]}") from None
        except RecursionError:
            raise PositionError("invalid position: the JSON nests too deeply") from None
        return cls.from_map(raw)

    # -- derivations (all return new values) ---------------------------
    def with_component(self, topic: str, partition: int, offset: int) -> Position:
        """A copy with ``offset`` recorded, kept monotonic like Kafka's."""
        current = self._map.get(topic, {}).get(partition)
        if current is not None and current >= offset:
            return self
        raw = self.to_map()
        raw.setdefault(topic, {})[partition] = offset
        return Position.from_map(raw)

    def merge(self, other: Position | None) -> Position:
        """Per (topic, partition) maximum of both; ``None`` is a no-op."""
        if other is None or other.is_empty() or other is self:
            return self
        if self.is_empty():
            return other
        raw = self.to_map()
        for topic, parts in other._map.items():
            mine = raw.setdefault(topic, {})
            for p, o in parts.items():
                if mine.get(p, -1) < o:
                    mine[p] = o
        return Position.from_map(raw)

    def copy(self) -> Position:
        return self

    def covers(self, other: Position) -> bool:
        """Has this Position every offset of ``other``, at or beyond it? (The swap rule of a rebuilt store, on the
        active and on replicas: a reader switched to a copy that covers the old one's Position never goes back.)"""
        for topic, parts in other._map.items():
            mine = self._map.get(topic, {})
            for p, o in parts.items():
                have = mine.get(p)
                if have is None or have < o:
                    return False
        return True

    # -- accessors ----------------------------------------------------
    def topics(self) -> frozenset[str]:
        return frozenset(self._map)

    def partition_positions(self, topic: str) -> Mapping[int, int]:
        return self._map.get(topic, MappingProxyType({}))

    def offset(self, topic: str, partition: int) -> int | None:
        return self._map.get(topic, {}).get(partition)

    def is_empty(self) -> bool:
        return not self._map

    def to_map(self) -> dict[str, dict[int, int]]:
        return {t: dict(parts) for t, parts in self._map.items()}

    def to_json_map(self) -> dict[str, dict[str, int]]:
        """JSON-ready form: partition keys as strings."""
        return {t: {str(p): o for p, o in parts.items()} for t, parts in self._map.items()}

    def to_json(self) -> str:
        """Compact JSON, made once per Position (a store partition's answers share one until its next batch)."""
        text = self._json
        if text is None:
            text = self._json = json.dumps(self.to_json_map(), separators=(",", ":"))
        return text

    # -- value semantics ------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self._map == other._map

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple((t, tuple(p.items())) for t, p in self._map.items()))
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._map)

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{t}={{" + ", ".join(f"{p}={o}" for p, o in parts.items()) + "}" for t, parts in self._map.items()
        )
        return f"Position{{position={{{inner}}}}}"

    __str__ = __repr__


_EMPTY = Position(MappingProxyType({}))


class PositionBound:
    """The least position a store partition must have reached to answer.

    ``unbounded()`` is the empty position: every store is up to it.
    """

    __slots__ = ("_position",)

    def __init__(self, position: Position) -> None:
        if not isinstance(position, Position):
            raise TypeError(f"PositionBound needs a Position, got {type(position).__name__}")
        self._position = position

    @classmethod
    def unbounded(cls) -> PositionBound:
        return _UNBOUNDED

    @classmethod
    def at(cls, position: Position | Mapping[str, Mapping[Any, Any]]) -> PositionBound:
        if not isinstance(position, Position):
            position = Position.from_map(position)
        return cls(position) if not position.is_empty() else _UNBOUNDED

    @property
    def position(self) -> Position:
        return self._position

    def is_unbounded(self) -> bool:
        return self._position.is_empty()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionBound):
            return NotImplemented
        return self._position == other._position

    def __hash__(self) -> int:
        return hash(("PositionBound", self._position))

    def __repr__(self) -> str:
        return f"PositionBound{{position={self._position!r}}}"

    __str__ = __repr__


_UNBOUNDED = PositionBound(_EMPTY)
