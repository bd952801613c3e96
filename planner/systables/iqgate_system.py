"""The ``system`` schema: runtime facts as tables, so SQL clients and BI tools see what the HTTP API shows.

- ``system.partitions``: KIP-535's ``allLocalStorePartitionLags`` as a table,
  widened to the peers this server knows (issue 17): one row per (host,
  store, partition), where it lives, its role, Position and lag.
- ``system.stores``: one row per store: its ingest status and why, and
  while it catches up or is rebuilt after a pipeline change (issue 20) how
  far it is (records reached of the target, records/s, ETA), the columns
  that arrive with the swap, and whether its answers miss history the
  source no longer held.
- ``system.streams``: one row per stream a statement can read (issue 51):
  its topic, key, value columns and whether its records carry headers.

The rows are runtime facts, not catalog facts, so the gateway hands them in
through ``SystemContext``; this module only fixes the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stores.catalog.schema import StoreSpec
from stores.catalog.streams import streams_of

from .model import SystemContext, SystemTable, columns

__all__ = ["TABLES", "PARTITION_COLUMNS", "STORE_COLUMNS", "STREAM_COLUMNS"]

PARTITION_COLUMNS = columns("host varchar, store varchar, partition integer, role varchar, position varchar, "
                            "offset_lag bigint, time_lag_ms bigint, current_offset bigint, end_offset bigint, "
                            "alive boolean")


STORE_COLUMNS = columns("store varchar, kind varchar, status varchar, reason varchar, phase varchar, "
                        "reached bigint, target bigint, records_per_s double, eta_s double, position varchar, "
                        "target_position varchar, upcoming_columns varchar[], partial_history boolean, "
                        "history_since varchar, batches bigint, last_batch_at timestamptz")


STREAM_COLUMNS = columns("stream varchar, topic varchar, partitions integer, key_column varchar, key_type varchar, "
                         "value_columns varchar[], headers boolean")


def _partitions(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterable[tuple[Any, ...]]:
    return ctx.partitions


def _stores(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterable[tuple[Any, ...]]:
    return ctx.stores


def _streams(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterable[tuple[Any, ...]]:
    for name, spec in sorted(streams_of(catalog).items()):
        yield (name, spec.topic, spec.partitions, spec.key.name, spec.key.type.value,
               [f"{c.name} {c.type.value}" for c in spec.values], spec.headers)


TABLES = (SystemTable("system", "partitions", PARTITION_COLUMNS, _partitions),
          SystemTable("system", "stores", STORE_COLUMNS, _stores),
          SystemTable("system", "streams", STREAM_COLUMNS, _streams))
