"""The classic (IQv1) read-only store views: ``app.store(name, QueryableStoreTypes.key_value())``.

Kafka resolves a handle's stores lazily on every access, so a handle can
outlive the state it was made in; here every access re-checks the client
state and the store's generation and raises the KIP-216 exception KIP-216
names (Kafka itself never wired StreamsRebalancingException,
StateStoreMigratedException and StateStoreNotAvailableException):

- CREATED -> StreamsNotStartedException; REBALANCING -> StreamsRebalancingException;
- PENDING_SHUTDOWN, NOT_RUNNING, PENDING_ERROR, ERROR -> StateStoreNotAvailableException;
- the store was reopened or its partitions moved since the handle was made -> StateStoreMigratedException;
- a requested partition not hosted here -> InvalidStateStorePartitionException.

Views read only active (hosted) partitions, as Kafka without stale stores.
Range results from several partitions are merged in key order.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..catalog.schema import StoreKind, StoreSpec
from ..engine import PartitionStore, StoreClosedError
from ..engine.kv import KeyValueStore
from ..engine.window import SessionStore, WindowStore
from ..iqv2.errors import (
    InvalidStateStoreException,
    InvalidStateStorePartitionException,
    StateStoreMigratedException,
    StateStoreNotAvailableException,
    StreamsNotStartedException,
    StreamsRebalancingException,
)
from ..iqv2.position import PositionBound
from ..iqv2.query import (
    KeyQuery,
    RangeQuery,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    WindowKeyQuery,
)
from ..iqv2.result import QueryResult
from ..iqv2.state import State
from ..iqv2.values import KeyValueIterator


class HandleSource(Protocol):
    """What a handle needs of its app (HandleSource): the client state, the spec and the current stores."""

    @property
    def state(self) -> State: ...

    def spec(self, name: str) -> StoreSpec: ...

    def _current(self, name: str) -> tuple[int, frozenset[int], dict[int, PartitionStore]]: ...

__all__ = [
    "QueryableStoreType", "QueryableStoreTypes", "ReadOnlyKeyValueStore", "ReadOnlyWindowStore",
    "ReadOnlySessionStore", "CheckedIterator", "open_handle", "HandleSource",
]

T = TypeVar("T")
_UNBOUNDED = PositionBound.unbounded()


@dataclass(frozen=True)
class QueryableStoreType:
    """Which store kinds a view accepts, and whether it returns ValueAndTimestamp."""

    name: str
    accepts: frozenset[StoreKind]
    timestamped: bool = False


class QueryableStoreTypes:
    """Kafka's ``QueryableStoreTypes`` factories."""

    @staticmethod
    def key_value() -> QueryableStoreType:
        return QueryableStoreType("keyValueStore", frozenset({StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE}))

    @staticmethod
    def timestamped_key_value() -> QueryableStoreType:
        return QueryableStoreType("timestampedKeyValueStore", frozenset({StoreKind.TIMESTAMPED_KEY_VALUE}), True)

    @staticmethod
    def window() -> QueryableStoreType:
        return QueryableStoreType("windowStore", frozenset({StoreKind.WINDOW}))

    @staticmethod
    def session() -> QueryableStoreType:
        return QueryableStoreType("sessionStore", frozenset({StoreKind.SESSION}))


def _state_error(state: State, name: str) -> InvalidStateStoreException | None:
    if state is State.RUNNING:
        return None
    if state is State.CREATED:
        return StreamsNotStartedException(
            f"Cannot get state store {name} because KafkaStreams has not been started; retry after start()."
        )
    if state is State.REBALANCING:
        return StreamsRebalancingException(
            f"Cannot get state store {name} because the client is REBALANCING; retry once it is RUNNING."
        )
    return StateStoreNotAvailableException(
        f"State store {name} is not available: the client is {state} and its stores are closed."
    )


def open_handle(app: HandleSource, name: str, store_type: QueryableStoreType, partition: int | None) -> Any:
    """``KafkaStreams.store``: state first (as Kafka's IQv1), then the name, the type and the partition."""
    state = app.state
    if state is State.CREATED or not (state.is_running_or_rebalancing()):
        raise _state_error(state, name)  # type: ignore[misc]
    spec = app.spec(name)
    if not isinstance(store_type, QueryableStoreType):
        raise TypeError(f"store_type must come from QueryableStoreTypes, got {store_type!r}")
    if spec.kind not in store_type.accepts:
        raise InvalidStateStoreException(
            f"Cannot get state store {name} because the queryable store type [{store_type.name}] does not accept"
            f" the actual store type [{spec.kind.value}]."
        )
    if partition is not None and (
        isinstance(partition, bool) or not isinstance(partition, int) or partition not in app._current(name)[1]
    ):
        raise InvalidStateStorePartitionException(
            f"The specified partition {partition} for store {name} does not exist."
        )
    cls = {StoreKind.WINDOW: ReadOnlyWindowStore, StoreKind.SESSION: ReadOnlySessionStore}.get(
        spec.kind, ReadOnlyKeyValueStore
    )
    return cls(app, name, store_type, partition, app._current(name)[0])


class _View:
    def __init__(self, app: HandleSource, name: str, store_type: QueryableStoreType, partition: int | None,
                 generation: int) -> None:
        self._app = app
        self.name = name
        self.store_type = store_type
        self.partition = partition
        self._generation = generation

    def _stores(self) -> list[PartitionStore]:
        err = _state_error(self._app.state, self.name)
        if err is not None:
            raise err
        generation, hosted, stores = self._app._current(self.name)
        if generation != self._generation:
            raise StateStoreMigratedException(
                f"The state store, {self.name}, may have migrated to another instance: its partitions moved or it"
                " was reopened since this handle was made. Get a new handle."
            )
        if self.partition is not None:
            if self.partition not in hosted:
                raise InvalidStateStorePartitionException(
                    f"The specified partition {self.partition} for store {self.name} does not exist."
                )
            parts = [self.partition]
        else:
            parts = sorted(hosted)
        if not parts:
            raise StateStoreMigratedException(f"The state store, {self.name}, may have migrated to another instance.")
        return [stores[p] for p in parts]

    def check(self) -> None:
        """Raise the KIP-216 exception that applies now, if any."""
        self._stores()

    def _run(self, fn: Callable[[list[PartitionStore]], T]) -> T:
        stores = self._stores()
        try:
            return fn(stores)
        except StoreClosedError as exc:
            self._stores()  # raises the state- or generation-specific exception if that is why
            raise StateStoreMigratedException(
                f"State store {self.name} is not available anymore and may have been migrated to another instance."
            ) from exc
        except sqlite3.Error as exc:
            raise InvalidStateStoreException(f"State store {self.name} failed: {type(exc).__name__}: {exc}") from exc

    def _result(self, res: QueryResult) -> Any:
        if res.is_failure:
            self._stores()  # a store closed by a state change or a move raises the KIP-216 exception for that
            raise InvalidStateStoreException(f"State store {self.name}: {res.failure_reason}: {res.failure_message}")
        return res.result

    def _iterator(self, items: list[Any]) -> CheckedIterator:
        return CheckedIterator(items, self.check)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, partition={self.partition})"


class CheckedIterator(KeyValueIterator[Any]):
    """A snapshot iterator whose every step re-checks the handle (KIP-216: iterators raise too)."""

    __slots__ = ("_check",)

    def __init__(self, items: list[Any], check: Callable[[], None]) -> None:
        super().__init__(items)
        self._check = check

    def __next__(self) -> Any:
        self._check()
        return super().__next__()

    def has_next(self) -> bool:
        self._check()
        return super().has_next()

    def peek_next_key(self) -> Any:
        self._check()
        return super().peek_next_key()


def _merge(lists: list[list[Any]], reverse: bool, key: Callable[[Any], Any]) -> list[Any]:
    if len(lists) == 1:
        return lists[0]
    return list(heapq.merge(*lists, key=key, reverse=reverse))


class ReadOnlyKeyValueStore(_View):
    """``ReadOnlyKeyValueStore``: get, range, reverse_range, all, reverse_all, approximate_num_entries."""

    def get(self, key: Any) -> Any:
        q = (TimestampedKeyQuery if self.store_type.timestamped else KeyQuery).with_key(key)

        def run(stores: list[PartitionStore]) -> Any:
            for s in stores:
                v = self._result(s.query(q, _UNBOUNDED))
                if v is not None:
                    return v
            return None

        return self._run(run)

    def _range(self, lo: Any, hi: Any, reverse: bool) -> CheckedIterator:
        qt = TimestampedRangeQuery if self.store_type.timestamped else RangeQuery
        q = qt.with_range(lo, hi)
        if reverse:
            q = q.with_descending_keys()

        def run(stores: list[PartitionStore]) -> list[Any]:
            return _merge([list(self._result(s.query(q, _UNBOUNDED))) for s in stores], reverse, lambda kv: kv.key)

        return self._iterator(self._run(run))

    def range(self, key_from: Any, key_to: Any) -> CheckedIterator:
        """Keys in [key_from, key_to] ascending; None is open."""
        return self._range(key_from, key_to, False)

    def reverse_range(self, key_from: Any, key_to: Any) -> CheckedIterator:
        return self._range(key_from, key_to, True)

    def all(self) -> CheckedIterator:
        return self._range(None, None, False)

    def reverse_all(self) -> CheckedIterator:
        return self._range(None, None, True)

    def approximate_num_entries(self) -> int:
        return self._run(lambda stores: sum(s.count() for s in stores if isinstance(s, KeyValueStore)))


class ReadOnlyWindowStore(_View):
    """``ReadOnlyWindowStore``: fetch(key, time), fetch(key, from, to), fetch(key_from, key_to, from, to), all, fetch_all."""

    def fetch(self, *args: Any) -> Any:
        if len(args) == 2:
            key, t = args
            q = WindowKeyQuery.with_key_and_window_start_range(key, t, t)

            def one(stores: list[PartitionStore]) -> Any:
                for s in stores:
                    for kv in self._result(s.query(q, _UNBOUNDED)):
                        return kv.value
                return None

            return self._run(one)
        if len(args) == 3:
            key, t0, t1 = args
            q = WindowKeyQuery.with_key_and_window_start_range(key, t0, t1)
            return self._iterator(self._run(lambda stores: _merge(
                [list(self._result(s.query(q, _UNBOUNDED))) for s in stores], False, lambda kv: kv.key)))
        if len(args) == 4:
            return self._fetch_keys(*args)
        raise TypeError("fetch takes (key, time), (key, time_from, time_to) or (key_from, key_to, time_from, time_to)")

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> CheckedIterator:
        it = self.fetch(key, time_from, time_to)
        return self._iterator(list(reversed(it.remaining())))

    def _fetch_keys(self, key_from: Any, key_to: Any, time_from: int | None, time_to: int | None) -> CheckedIterator:
        def run(stores: list[PartitionStore]) -> list[Any]:
            lists = []
            for s in stores:
                assert isinstance(s, WindowStore)
                c = s.codec.coerce_query_key
                _, it = s.fetch_keys(None if key_from is None else c(key_from), None if key_to is None else c(key_to),
                                     time_from, time_to)
                lists.append(it.remaining())
            return _merge(lists, False, lambda kv: (kv.key.key, kv.key.window.start))

        return self._iterator(self._run(run))

    def all(self) -> CheckedIterator:
        return self._fetch_keys(None, None, None, None)

    def fetch_all(self, time_from: int, time_to: int) -> CheckedIterator:
        return self._fetch_keys(None, None, time_from, time_to)


class ReadOnlySessionStore(_View):
    """``ReadOnlySessionStore``: fetch(key), fetch(key_from, key_to), fetch_session(key, start, end)."""

    def fetch(self, key_from: Any, key_to: Any = ..., /) -> CheckedIterator:
        if key_from is None:
            raise TypeError("the key should not be null")
        lo, hi = (key_from, key_from) if key_to is ... else (key_from, key_to)

        def run(stores: list[PartitionStore]) -> list[Any]:
            lists = []
            for s in stores:
                assert isinstance(s, SessionStore)
                c = s.codec.coerce_query_key
                _, it = s.fetch_keys(None if lo is None else c(lo), None if hi is None else c(hi), None, None)
                lists.append(it.remaining())
            return _merge(lists, False, lambda kv: (kv.key.key, kv.key.window.start))

        return self._iterator(self._run(run))

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> CheckedIterator:
        """Sessions of ``key`` that end at or after ``earliest_session_end`` and start at or before ``latest_session_start``."""
        return self._iterator([
            kv for kv in self.fetch(key).remaining()
            if kv.key.window.end >= earliest_session_end and kv.key.window.start <= latest_session_start
        ])

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        for kv in self.fetch(key).remaining():
            if kv.key.window == (session_start, session_end):
                return kv.value
        return None


