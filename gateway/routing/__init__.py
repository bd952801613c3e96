"""Any server answers any query (issue 17): routing per store partition between a server's copy and its peers'.

``RoutedSource`` wraps a server's own source; ``local_of``/``host_of``/``local_view`` are what the faces ask
of a gateway's source when a peer asks this server (``/v1/iq``, ``/v1/partitions``), routed or not.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..engine.partitions import PartitionInfo, local_partitions
from ..engine.sources import Capabilities
from .membership import ON_BEHALF_OF
from .source import RoutedSource

__all__ = ["RoutedSource", "local_of", "host_of", "local_view", "ON_BEHALF_OF"]


def local_of(source: Any) -> Any:
    """The source that answers from this server's own copies (a peer's question is never forwarded again)."""
    return source.local if isinstance(source, RoutedSource) else source


def host_of(source: Any) -> str | None:
    """This server's URL as its peers know it, when it routes; None otherwise."""
    return source.self_url if isinstance(source, RoutedSource) else None


def local_view(source: Any, only: Collection[str] | None = None) -> list[PartitionInfo]:
    """This server's store partitions: role, Position, lag (cached briefly by a routed source); of the stores in
    ``only`` when given (a user's: a store outside is never probed for them)."""
    if isinstance(source, RoutedSource):
        view = list(source.local_view().values())  # the server's own heartbeat view, made for its peers
        return view if only is None else [i for i in view if i.store in only]
    return local_partitions(source, Capabilities.of(source), only)
