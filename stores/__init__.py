"""iqgate stores: the IQv2 model, the state stores, the app facade, and the Spark pipeline.

Importing ``stores`` never imports pyspark: ``Topology`` (the Spark pipeline
builder) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

from .position import Position, PositionBound, PositionError
from .query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    Query,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from .request import StateQueryRequest
from .result import FailureReason, QueryResult, StateQueryResult
from .schema import Column, SqlType, StoreKind, StoreSpec
from .state import State, StreamThreadExceptionResponse
from .values import KeyValue, KeyValueIterator, TimeWindow, ValueAndTimestamp, VersionedRecord, Windowed

__all__ = [
    "StreamsApp", "State", "Topology", "EventLog", "StreamThreadExceptionResponse",
    "StateQueryRequest", "StateQueryResult", "QueryResult", "FailureReason",
    "Position", "PositionBound", "PositionError", "ResultOrder", "Query",
    "KeyQuery", "RangeQuery", "TimestampedKeyQuery", "TimestampedRangeQuery",
    "WindowKeyQuery", "WindowRangeQuery", "VersionedKeyQuery", "MultiVersionedKeyQuery",
    "ValueAndTimestamp", "VersionedRecord", "KeyValue", "KeyValueIterator", "TimeWindow", "Windowed",
    "Column", "SqlType", "StoreKind", "StoreSpec", "StoreTopology", "StateDirReader",
]

_LAZY = {
    "StreamsApp": ("stores.app", "StreamsApp"),
    "StoreTopology": ("stores.app", "StoreTopology"),
    "StateDirReader": ("stores.reader", "StateDirReader"),
    "EventLog": ("stores.eventlog", "EventLog"),
    "Topology": ("stores.spark_topology", "Topology"),
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
