"""StoreTopology: stores (and streams) declared by hand, without a pipeline: how the app is driven in tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..catalog.schema import StoreSpec
from ..catalog.streams import StreamSpec
from .protocol import Runtime

__all__ = ["StoreTopology"]


class StoreTopology:
    """A topology of stores written by hand (tests, fixtures): no runtime, so start() goes straight to RUNNING.
    ``streams``: topics of ``log`` (an EventLog or a KafkaSource) declared queryable, as ``Topology.stream`` does."""

    def __init__(self, specs: Iterable[StoreSpec], *, streams: Iterable[StreamSpec] = (), log: Any = None) -> None:
        self._specs = tuple(specs)
        self._streams = tuple(streams)
        if log is not None:
            self.log = log
        names = [s.name for s in self._specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate store names in topology: {dup}")

    def store_specs(self) -> Sequence[StoreSpec]:
        return self._specs

    def stream_specs(self) -> Sequence[StreamSpec]:
        return self._streams

    def create_runtime(self, app: Any) -> Runtime | None:
        return None
