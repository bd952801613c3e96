"""iqgate stores: the IQv2 model, the state stores, the app facade, the source logs and the Spark pipeline.

The subpackages name the architecture (ARCHITECTURE.md has the picture):

- ``stores.iqv2``     the public IQv2 value model: queries, Position, results, KIP-216 errors, the FSM's states;
- ``stores.catalog``  what a store is (StoreSpec, column types) and where a key lives (the partitioner);
- ``stores.engine``   the storage engine: one SQLite file per store partition, batch writes, query handlers;
- ``stores.app``      the Kafka Streams client facade: StreamsApp, its state machine, IQv1 handles, and
                      StateDirReader for gateway processes that read another process's store files;
- ``stores.log``      the source logs the pipeline reads: the embedded EventLog, and Kafka;
- ``stores.pipeline`` the Spark Structured Streaming pipeline that maintains the stores (the only part that
                      imports pyspark).

Importing ``stores`` never imports pyspark: the heavier names below are
loaded on first use.
"""

from __future__ import annotations

from typing import Any

from .catalog.schema import Column, SqlType, StoreKind, StoreSpec
from .iqv2.position import Position, PositionBound, PositionError
from .iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    MultiVersionedKeyQuery,
    MultiVersionedRangeQuery,
    Query,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from .iqv2.request import StateQueryRequest
from .iqv2.result import FailureReason, QueryResult, StateQueryResult
from .iqv2.state import State, StreamThreadExceptionResponse
from .iqv2.values import (
    KeyValue,
    KeyValueIterator,
    TimeWindow,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)

__all__ = [
    "StreamsApp", "State", "Topology", "EventLog", "KafkaSource", "StreamThreadExceptionResponse",
    "StateQueryRequest", "StateQueryResult", "QueryResult", "FailureReason",
    "Position", "PositionBound", "PositionError", "ResultOrder", "Query",
    "KeyQuery", "MultiKeyQuery", "RangeQuery", "TimestampedKeyQuery", "TimestampedRangeQuery",
    "WindowKeyQuery", "WindowRangeQuery", "VersionedKeyQuery", "MultiVersionedKeyQuery", "MultiVersionedRangeQuery",
    "ValueAndTimestamp", "VersionedRecord", "KeyValue", "KeyValueIterator", "TimeWindow", "Windowed",
    "Column", "SqlType", "StoreKind", "StoreSpec", "StoreTopology", "StateDirReader", "Change",
]

_LAZY = {
    "StreamsApp": ("stores.app.streams", "StreamsApp"),
    "StoreTopology": ("stores.app.streams", "StoreTopology"),
    "StateDirReader": ("stores.app.reader", "StateDirReader"),
    "Change": ("stores.engine.change", "Change"),
    "EventLog": ("stores.log.eventlog", "EventLog"),
    "KafkaSource": ("stores.log.kafka", "KafkaSource"),
    "Topology": ("stores.pipeline.topology", "Topology"),
}


def __getattr__(name: str) -> Any:
    """Load the heavier parts (and pyspark, for Topology) only when asked for."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'stores' has no attribute {name!r}")
