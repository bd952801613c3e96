"""The classic read-only views (IQv1) and the KIP-216 exceptions they raise in each state."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from stores.app.handles import (
    QueryableStoreTypes,
    ReadOnlyKeyValueStore,
    ReadOnlySessionStore,
    ReadOnlyWindowStore,
)
from stores.catalog.schema import StoreKind
from stores.iqv2.errors import (
    InvalidStateStoreException,
    InvalidStateStorePartitionException,
    StateStoreMigratedException,
    StateStoreNotAvailableException,
    StreamsNotStartedException,
    StreamsRebalancingException,
    UnknownStateStoreException,
)
from stores.iqv2.state import State
from stores.iqv2.values import KeyValue, ValueAndTimestamp
from tests.stores.iqv2_fixture import MIN, WS, spec_for, write_fixture

KV = QueryableStoreTypes.key_value()


@pytest.fixture
def kv_app(make_app: Any) -> Any:
    spec = spec_for(StoreKind.TIMESTAMPED_KEY_VALUE, "kv")
    app = make_app([spec])
    write_fixture(app, "kv", StoreKind.TIMESTAMPED_KEY_VALUE)
    return app


def test_key_value_view(kv_app: Any) -> None:
    store = kv_app.store("kv", KV)
    assert isinstance(store, ReadOnlyKeyValueStore)
    assert store.get(2) == (5,)
    assert store.get(42) is None
    assert list(store.range(1, 3)) == [KeyValue(1, (3,)), KeyValue(2, (5,)), KeyValue(3, (7,))]  # merged in key order
    assert [kv.key for kv in store.reverse_range(1, 3)] == [3, 2, 1]
    assert [kv.key for kv in store.all()] == [0, 1, 2, 3, 4]
    assert [kv.key for kv in store.reverse_all()] == [4, 3, 2, 1, 0]
    assert store.approximate_num_entries() == 5
    with pytest.raises(TypeError):
        store.get(None)


def test_timestamped_view_and_partition_view(kv_app: Any) -> None:
    ts = kv_app.store("kv", QueryableStoreTypes.timestamped_key_value())
    assert ts.get(2) == ValueAndTimestamp((5,), WS + 10 * MIN)
    only1 = kv_app.store("kv", KV, partition=1)
    assert [kv.key for kv in only1.all()] == [1, 3]
    assert only1.get(2) is None


def test_iterator_peek_and_has_next(kv_app: Any) -> None:
    it = kv_app.store("kv", KV).range(0, 2)
    assert it.peek_next_key() == 0
    assert it.has_next()
    assert next(it).key == 0
    assert it.peek_next_key() == 1
    assert [kv.key for kv in it] == [1, 2]
    assert not it.has_next()
    with pytest.raises(StopIteration):
        it.peek_next_key()


def test_store_lookup_errors(make_app: Any) -> None:
    spec = spec_for(StoreKind.KEY_VALUE, "kv")
    app = make_app([spec, spec_for(StoreKind.VERSIONED, "ver")], start=False,
                   hosted_partitions={"kv": {0}}, standby_partitions={"kv": {1}})
    with pytest.raises(StreamsNotStartedException) as ei:
        app.store("kv", KV)
    assert ei.value.retryable
    app.start()
    with pytest.raises(UnknownStateStoreException):
        app.store("nope", KV)
    with pytest.raises(InvalidStateStoreException, match="does not accept the actual store type"):
        app.store("kv", QueryableStoreTypes.window())
    with pytest.raises(InvalidStateStoreException, match="does not accept"):
        app.store("ver", KV)
    with pytest.raises(InvalidStateStorePartitionException,
                       match="The specified partition 1 for store kv does not exist."):
        app.store("kv", KV, partition=1)  # a standby is not served to handles (no stale stores)
    with pytest.raises(InvalidStateStorePartitionException, match="partition 9"):
        app.store("kv", KV, partition=9)
    with pytest.raises(TypeError):
        app.store("kv", "keyValueStore")
    assert [kv.key for kv in app.store("kv", KV).all()] == []


def test_handle_raises_by_state(kv_app: Any) -> None:
    store = kv_app.store("kv", KV)
    it = store.all()
    kv_app.mark_rebalancing()
    with pytest.raises(StreamsRebalancingException) as ei:
        store.get(1)
    assert ei.value.retryable
    with pytest.raises(StreamsRebalancingException):
        next(it)
    with pytest.raises(StreamsRebalancingException):
        it.peek_next_key()
    rebalancing_handle = kv_app.store("kv", KV)  # Kafka hands out handles while REBALANCING; access raises
    kv_app.mark_running()
    assert store.get(1) == (3,) and rebalancing_handle.get(1) == (3,)
    assert next(it).key == 0
    kv_app.close(timeout_s=10)
    with pytest.raises(StateStoreNotAvailableException) as ei2:
        store.get(1)
    assert not ei2.value.retryable
    with pytest.raises(StateStoreNotAvailableException):
        it.has_next()
    with pytest.raises(StateStoreNotAvailableException):
        kv_app.store("kv", KV)


class BlockingStopRuntime:
    """Stand-in for the Spark runtime whose stop() waits for the test: holds the app in PENDING_ERROR."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def start(self) -> None:
        pass

    def replace(self, unit: str) -> None:
        pass

    def stop(self, timeout_s: float) -> None:
        self.gate.wait(10)


@pytest.mark.parametrize("state", [State.PENDING_ERROR, State.ERROR])
def test_handle_in_error_states(tmp_path: Any, state: State) -> None:
    from stores.app.streams import StoreTopology, StreamsApp

    runtime = BlockingStopRuntime()

    class Topo(StoreTopology):
        def create_runtime(self, app: Any) -> Any:
            return runtime

    app = StreamsApp(Topo([spec_for(StoreKind.KEY_VALUE, "kv")]), "h", tmp_path / "s",
                     coordination_base=tmp_path / "coord")
    app.start()
    app.mark_running()
    store = app.store("kv", KV)
    app.handle_uncaught(RuntimeError("boom"), "u")
    if state is State.ERROR:
        runtime.gate.set()
        assert app._fsm.wait_for({State.ERROR}, 10)
    assert app.state is state
    with pytest.raises(StateStoreNotAvailableException):
        store.get(1)
    runtime.gate.set()
    assert app._fsm.wait_for({State.ERROR}, 10)


def test_handle_is_migrated_after_reassignment_or_reopen(kv_app: Any) -> None:
    store = kv_app.store("kv", KV)
    p1 = kv_app.store("kv", KV, partition=1)
    kv_app.reassign_partitions(hosted={"kv": {0}}, standby={"kv": {1}})
    with pytest.raises(StateStoreMigratedException) as ei:
        store.get(1)
    assert ei.value.retryable
    with pytest.raises(StateStoreMigratedException):
        p1.all()
    fresh = kv_app.store("kv", KV)
    assert [kv.key for kv in fresh.all()] == [0, 2, 4]
    with pytest.raises(InvalidStateStorePartitionException):
        kv_app.store("kv", KV, partition=1)
    kv_app.reopen_store("kv")
    with pytest.raises(StateStoreMigratedException):
        fresh.get(0)
    assert kv_app.store("kv", KV).get(0) == (1,)


def test_handle_after_all_partitions_moved_away(kv_app: Any) -> None:
    kv_app.reassign_partitions(hosted={"kv": set()}, standby={"kv": {0, 1}})
    with pytest.raises(StateStoreMigratedException, match="may have migrated"):
        kv_app.store("kv", KV).get(1)


def test_window_view(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.WINDOW, "w")])
    write_fixture(app, "w", StoreKind.WINDOW)
    store = app.store("w", QueryableStoreTypes.window())
    assert isinstance(store, ReadOnlyWindowStore)
    assert store.fetch(3, WS + 10 * MIN) == (13,)
    assert store.fetch(3, WS) is None
    assert [(kv.key, kv.value) for kv in store.fetch(2, WS, WS + 10 * MIN)] == [(WS + 5 * MIN, (4,)), (WS + 10 * MIN, (5,))]
    assert [kv.key for kv in store.backward_fetch(2, WS, WS + 10 * MIN)] == [WS + 10 * MIN, WS + 5 * MIN]
    got = [(kv.key.key, kv.key.window.start, kv.value[0]) for kv in store.fetch(1, 3, WS, WS + 5 * MIN)]
    assert got == [(1, WS, 2), (1, WS + 5 * MIN, 3), (2, WS + 5 * MIN, 4)]
    assert len(list(store.all())) == 7  # k0: 1 window, k1: 2, k2: 2, k3: 1, k4: 1
    assert {kv.value[0] for kv in store.fetch_all(WS + 15 * MIN, WS + 20 * MIN)} == {17}
    with pytest.raises(TypeError):
        store.fetch(1)


def test_session_view(make_app: Any) -> None:
    app = make_app([spec_for(StoreKind.SESSION, "s")])
    write_fixture(app, "s", StoreKind.SESSION, "papi")
    store = app.store("s", QueryableStoreTypes.session())
    assert isinstance(store, ReadOnlySessionStore)
    assert [kv.value[0] for kv in store.fetch(2)] == [4, 5]
    assert [kv.key.key for kv in store.fetch(1, 2)] == [1, 1, 2, 2]
    t4 = WS + 2 * MIN * 4
    assert store.fetch_session(2, t4, t4) == (4,)
    assert store.fetch_session(2, t4, t4 + 1) is None
    assert [kv.value[0] for kv in store.find_sessions(2, t4 + 1, 2**62)] == [5]
    with pytest.raises(TypeError):
        store.fetch(None)


def test_store_failure_under_a_handle(kv_app: Any) -> None:
    store = kv_app.store("kv", KV)
    kv_app.partition_store("kv", 0).close()  # the file's store fails, the app itself is fine
    with pytest.raises(InvalidStateStoreException, match="STORE_EXCEPTION") as ei:
        store.get(0)
    assert type(ei.value) is InvalidStateStoreException
    kv_app.reopen_store("kv")
    with pytest.raises(StateStoreMigratedException):
        store.get(0)
    assert kv_app.store("kv", KV).get(0) == (1,)
