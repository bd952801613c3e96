"""``system.partitions``: every store partition of the replica set, where it lives, its role, Position and lag.

KIP-535's ``allLocalStorePartitionLags`` as a table, widened to the peers
this server knows (issue 17): one row per (host, store, partition). The rows
are runtime facts, not catalog facts, so the gateway hands them in through
``SystemContext.partitions``; this module only fixes the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stores.catalog.schema import StoreSpec

from .model import SystemContext, SystemTable, columns

__all__ = ["TABLES", "PARTITION_COLUMNS"]

PARTITION_COLUMNS = columns("host varchar, store varchar, partition integer, role varchar, position varchar, "
                            "offset_lag bigint, time_lag_ms bigint, current_offset bigint, end_offset bigint, "
                            "alive boolean")


def _partitions(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterable[tuple[Any, ...]]:
    return ctx.partitions


TABLES = (SystemTable("system", "partitions", PARTITION_COLUMNS, _partitions),)
