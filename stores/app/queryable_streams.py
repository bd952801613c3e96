"""The streams a pipeline declares queryable, as the app and the state dir's readers know them.

The pipeline host publishes them beside the stores' specs
(``<state_dir>/streams/<name>/stream.json``, ``layout.publish_streams``) when
the app starts; any process reading the state dir learns them from there, and
reads a stream's records from the source log ``app.json`` names. A stream's
name is refused when it is a store's or another stream's: a name in SQL means
one relation.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..catalog.streams import StreamSpec
from ..engine.base import EXISTS_CHECK_S
from ..iqv2.errors import UnknownStateStoreException
from ..log.stream_reader import StreamReader, StreamReadError
from . import layout

__all__ = ["declared_streams", "reader_of", "PublishedStreams"]


def declared_streams(topology: Any, stores: Mapping[str, StoreSpec]) -> dict[str, StreamSpec]:
    """The topology's queryable streams by name (``stream_specs()``, when it has them); a name used twice, or
    also a store's, is a ValueError."""
    declared = getattr(topology, "stream_specs", None)
    out: dict[str, StreamSpec] = {}
    for spec in (declared() if declared is not None else ()):
        if spec.name in out:
            raise ValueError(f"duplicate stream name {spec.name!r} in topology")
        if spec.name in stores:
            raise ValueError(f"stream {spec.name!r} has the name of a store; a name in SQL means one relation: "
                             "name the stream otherwise")
        out[spec.name] = spec
    return out


def reader_of(streams: Mapping[str, StreamSpec], name: str, log: Any, why_no_log: str) -> StreamReader:
    """A reader of stream ``name`` over ``log``: UnknownStateStoreException for an unknown name (as for a store),
    StreamReadError saying ``why_no_log`` when there is no log to read."""
    spec = streams.get(name)
    if spec is None:
        raise UnknownStateStoreException(f"Cannot read stream {name} because no such stream is declared.")
    if log is None:
        raise StreamReadError(f"stream {name!r} cannot be read here: {why_no_log}")
    return StreamReader(spec, log)


class PublishedStreams:
    """The streams published in a state dir, re-read when their files change (looked at every EXISTS_CHECK_S)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.specs: dict[str, StreamSpec] = {}
        self._seen: tuple[Any, ...] | None = None
        self._checked = float("-inf")

    def current(self, *, force: bool = False) -> dict[str, StreamSpec]:
        now = time.monotonic()
        if not force and now - self._checked < EXISTS_CHECK_S:
            return self.specs
        root = layout.streams_dir(self.state_dir)
        seen: list[Any] = []
        for sub in sorted(root.iterdir()) if root.is_dir() else ():
            try:
                seen.append((sub.name, (sub / "stream.json").stat().st_mtime_ns))
            except (FileNotFoundError, NotADirectoryError):
                continue
        key = tuple(seen)
        if key != self._seen:
            self.specs = layout.read_streams(self.state_dir)  # a damaged file raises, and is looked at again
            self._seen = key
        self._checked = now
        return self.specs
