"""The consistency token a client holds: ``{topic: {partition: offset}}``, immutable, merged by maximum.

The server's IQv2 model has its own ``Position`` (``stores.iqv2.position``);
this is the same value as it travels over the wire, so the client needs none
of the server. The two compare equal when they hold the same offsets, and
either can be passed wherever the other is accepted (both have ``to_json_map``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["Position", "PositionError"]


class PositionError(ValueError):
    """A position that is not ``{topic: {partition: offset}}`` with non-negative integers."""


def _int(v: Any, what: str) -> int:
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
    """Offsets of the last record applied, per source topic and partition (the Kafka Streams convention).

    >>> Position.from_map({"orders": {"0": 41}}).merge(Position.from_map({"orders": {0: 7, 1: 3}}))
    Position{position={orders={0=41, 1=3}}}
    """

    __slots__ = ("_map",)

    def __init__(self, frozen: Mapping[str, Mapping[int, int]]) -> None:
        self._map = frozen

    @classmethod
    def empty(cls) -> Position:
        return _EMPTY

    @classmethod
    def from_map(cls, raw: Any) -> Position:
        """From ``{topic: {partition: offset}}`` (partition keys may be strings), or anything with ``to_json_map``."""
        if raw is None:
            return _EMPTY
        if hasattr(raw, "to_json_map"):
            raw = raw.to_json_map()
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
                part = _int(p, f"topic {topic!r}: partition {p!r}")
                off = _int(o, f"topic {topic!r} partition {p!r}: offset {o!r}")
                if part < 0 or off < 0:
                    raise PositionError(f"topic {topic!r}: partition {part} offset {off} must not be negative")
                inner[part] = off
            out[topic] = MappingProxyType(dict(sorted(inner.items())))
        return cls(MappingProxyType(dict(sorted(out.items())))) if out else _EMPTY

    @classmethod
    def from_json(cls, text: str) -> Position:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PositionError(f"invalid JSON in position: {exc.msg} at character {exc.pos}") from None
        return cls.from_map(raw)

    def merge(self, other: Any) -> Position:
        """Per (topic, partition) maximum of both; ``None`` or empty is a no-op. Returns a new value."""
        if other is None or other is self:
            return self
        theirs = other.to_map() if hasattr(other, "to_map") else Position.from_map(other).to_map()
        if not theirs:
            return self
        raw = self.to_map()
        for topic, parts in theirs.items():
            mine = raw.setdefault(topic, {})
            for p, o in parts.items():
                if mine.get(p, -1) < o:
                    mine[p] = o
        return Position.from_map(raw)

    def topics(self) -> frozenset[str]:
        return frozenset(self._map)

    def offset(self, topic: str, partition: int) -> int | None:
        return self._map.get(topic, {}).get(partition)

    def is_empty(self) -> bool:
        return not self._map

    def to_map(self) -> dict[str, dict[int, int]]:
        return {t: dict(parts) for t, parts in self._map.items()}

    def to_json_map(self) -> dict[str, dict[str, int]]:
        return {t: {str(p): o for p, o in parts.items()} for t, parts in self._map.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_json_map(), separators=(",", ":"))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Position):
            return self._map == other._map
        if hasattr(other, "to_json_map"):  # the server's Position: same value, other class
            return self.to_json_map() == other.to_json_map()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple((t, tuple(p.items())) for t, p in self._map.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{t}={{{', '.join(f'{p}={o}' for p, o in parts.items())}}}" for t, parts in self._map.items())
        return f"Position{{position={{{inner}}}}}"


_EMPTY = Position(MappingProxyType({}))
