"""The KIP-696 client state machine, listeners, close() and the uncaught-exception responses (KIP-671)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stores.app import layout
from stores.app.lifecycle import ClientStateMachine
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import StoreKind
from stores.iqv2.errors import (
    IllegalStateException,
    MissingSourceTopicException,
    StreamsStoppedException,
)
from stores.iqv2.query import KeyQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.state import State, StreamThreadExceptionResponse
from tests.stores.iqv2_fixture import spec_for

S = State
ALLOWED = {  # reference §4, typed in from Kafka's State enum
    S.CREATED: {S.REBALANCING, S.PENDING_SHUTDOWN},
    S.REBALANCING: {S.RUNNING, S.PENDING_SHUTDOWN, S.PENDING_ERROR},
    S.RUNNING: {S.REBALANCING, S.RUNNING, S.PENDING_SHUTDOWN, S.PENDING_ERROR},
    S.PENDING_SHUTDOWN: {S.NOT_RUNNING},
    S.NOT_RUNNING: set(),
    S.PENDING_ERROR: {S.ERROR},
    S.ERROR: set(),
}
SILENT = (
    {(S.PENDING_SHUTDOWN, t) for t in S if t is not S.NOT_RUNNING}
    | {(S.NOT_RUNNING, S.PENDING_SHUTDOWN), (S.NOT_RUNNING, S.NOT_RUNNING), (S.REBALANCING, S.REBALANCING)}
    | {(S.ERROR, S.PENDING_ERROR), (S.ERROR, S.ERROR)}
    | {(S.PENDING_ERROR, t) for t in S if t is not S.ERROR}
)
PATH = {  # how to reach each state with valid transitions
    S.CREATED: [], S.REBALANCING: [S.REBALANCING], S.RUNNING: [S.REBALANCING, S.RUNNING],
    S.PENDING_SHUTDOWN: [S.PENDING_SHUTDOWN], S.NOT_RUNNING: [S.PENDING_SHUTDOWN, S.NOT_RUNNING],
    S.PENDING_ERROR: [S.REBALANCING, S.PENDING_ERROR], S.ERROR: [S.REBALANCING, S.PENDING_ERROR, S.ERROR],
}


@pytest.mark.parametrize("old", list(S), ids=str)
@pytest.mark.parametrize("new", list(S), ids=str)
def test_transition_matrix(old: State, new: State) -> None:
    m = ClientStateMachine("matrix")
    seen: list[tuple[State, State]] = []
    m.set_listener(lambda n, o: seen.append((n, o)))
    for step in PATH[old]:
        assert m.transition(step)
    assert m.state is old
    seen.clear()
    if (old, new) in SILENT:
        assert m.transition(new) is False
        assert m.state is old and seen == []
    elif new in ALLOWED[old]:
        assert m.transition(new) is True
        assert m.state is new and seen == [(new, old)]
    else:
        with pytest.raises(IllegalStateException, match=f"Unexpected state transition from {old} to {new}"):
            m.transition(new)
        assert m.state is old and seen == []
    assert old.is_valid_transition(new) is (new in ALLOWED[old])


def test_state_helpers() -> None:
    assert [s for s in S if s.is_running_or_rebalancing()] == [S.REBALANCING, S.RUNNING]
    assert [s for s in S if s.is_shutting_down()] == [S.PENDING_SHUTDOWN, S.PENDING_ERROR]
    assert [s for s in S if s.has_completed_shutdown()] == [S.NOT_RUNNING, S.ERROR]
    assert [s for s in S if s.has_not_started()] == [S.CREATED]


def test_listener_runs_outside_the_lock() -> None:
    m = ClientStateMachine("reentrant")

    def listener(new: State, old: State) -> None:
        if new is S.PENDING_SHUTDOWN:
            m.transition(S.NOT_RUNNING)  # would deadlock if called under the state lock

    m.set_listener(listener)
    t = threading.Thread(target=m.transition, args=(S.PENDING_SHUTDOWN,), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and m.state is S.NOT_RUNNING


def test_a_failing_listener_does_not_break_transitions(caplog: pytest.LogCaptureFixture) -> None:
    m = ClientStateMachine("faulty")
    m.set_listener(lambda n, o: 1 / 0)
    assert m.transition(S.REBALANCING) and m.state is S.REBALANCING
    assert "state listener failed" in caplog.text


# -- the app ---------------------------------------------------------------------------------------------
class GatedRuntime:
    """A stand-in for the Spark runtime (the external side of the Runtime protocol): records calls."""

    def __init__(self) -> None:
        self.started = 0
        self.replaced: list[str] = []
        self.stopped = 0
        self.release_stop = threading.Event()
        self.release_stop.set()

    def start(self) -> None:
        self.started += 1

    def replace(self, unit: str) -> None:
        self.replaced.append(unit)

    def stop(self, timeout_s: float) -> None:
        self.stopped += 1
        self.release_stop.wait(10)


class RuntimeTopology(StoreTopology):
    def __init__(self, runtime: GatedRuntime) -> None:
        super().__init__([spec_for(StoreKind.KEY_VALUE, "kv")])
        self.runtime = runtime

    def create_runtime(self, app: Any) -> Any:
        return self.runtime


def _app(tmp_path: Path, runtime: GatedRuntime | None = None, app_id: str = "app", sub: str = "s") -> StreamsApp:
    topo = RuntimeTopology(runtime) if runtime else StoreTopology([spec_for(StoreKind.KEY_VALUE, "kv")])
    return StreamsApp(topo, app_id, tmp_path / sub, coordination_base=tmp_path / "coord", shutdown_poll_s=0.05)


def _record(app: StreamsApp) -> list[tuple[State, State]]:
    seen: list[tuple[State, State]] = []
    app.set_state_listener(lambda n, o: seen.append((n, o)))
    return seen


def _wait(app: StreamsApp, state: State) -> bool:
    return app._fsm.wait_for({state}, 10)


def test_start_and_close_without_runtime(tmp_path: Path) -> None:
    app = _app(tmp_path)
    seen = _record(app)
    assert json.loads(layout.app_json_path(app.state_dir).read_text())["state"] == "CREATED"
    app.start()
    assert app.state is S.RUNNING
    info = json.loads(layout.app_json_path(app.state_dir).read_text())
    assert info["state"] == "RUNNING" and info["hosted"] == {"kv": [0, 1]} and info["standby"] == {"kv": []}
    assert info["application_id"] == "app" and isinstance(info["pid"], int)
    assert app.close(timeout_s=10) is True
    assert seen == [(S.REBALANCING, S.CREATED), (S.RUNNING, S.REBALANCING), (S.PENDING_SHUTDOWN, S.RUNNING),
                    (S.NOT_RUNNING, S.PENDING_SHUTDOWN)]
    assert json.loads(layout.app_json_path(app.state_dir).read_text())["state"] == "NOT_RUNNING"
    assert app.close() is True  # idempotent
    assert seen[-1] == (S.NOT_RUNNING, S.PENDING_SHUTDOWN)


def test_start_twice_and_after_close(tmp_path: Path) -> None:
    app = _app(tmp_path)
    app.start()
    with pytest.raises(IllegalStateException, match="already started or already stopped, cannot re-start"):
        app.start()
    app.close(timeout_s=10)
    with pytest.raises(IllegalStateException, match="cannot re-start"):
        app.start()


def test_close_before_start(tmp_path: Path) -> None:
    app = _app(tmp_path)
    seen = _record(app)
    assert app.close(timeout_s=10)
    assert seen == [(S.PENDING_SHUTDOWN, S.CREATED), (S.NOT_RUNNING, S.PENDING_SHUTDOWN)]


def test_close_negative_timeout(tmp_path: Path) -> None:
    app = _app(tmp_path)
    with pytest.raises(ValueError, match="negative"):
        app.close(timeout_s=-1)
    app.close()


def test_close_times_out_while_the_runtime_stops(tmp_path: Path) -> None:
    rt = GatedRuntime()
    rt.release_stop.clear()
    app = _app(tmp_path, rt)
    app.start()
    assert app.close(timeout_s=0.05) is False
    assert app.state is S.PENDING_SHUTDOWN
    assert app.close(timeout_s=0.0) is False  # still waiting: PENDING_SHUTDOWN waits for NOT_RUNNING
    rt.release_stop.set()
    assert app.close(timeout_s=10) is True and app.state is S.NOT_RUNNING


def test_runtime_drives_rebalancing_and_running(tmp_path: Path) -> None:
    rt = GatedRuntime()
    app = _app(tmp_path, rt)
    seen = _record(app)
    app.start()
    assert rt.started == 1 and app.state is S.REBALANCING
    app.writer("kv")  # writers work while REBALANCING (restoring)
    app.mark_running()
    app.mark_running()  # no-op when already RUNNING
    app.mark_rebalancing()
    app.mark_rebalancing()  # no-op when already REBALANCING
    app.mark_running()
    assert seen == [(S.REBALANCING, S.CREATED), (S.RUNNING, S.REBALANCING), (S.REBALANCING, S.RUNNING),
                    (S.RUNNING, S.REBALANCING)]
    app.close(timeout_s=10)
    assert rt.stopped == 1


def test_default_uncaught_response_is_shutdown_client(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt = GatedRuntime()
    app = _app(tmp_path, rt)
    seen = _record(app)
    app.start()
    app.mark_running()
    resp = app.handle_uncaught(MissingSourceTopicException("One or more source topics were missing"), "q1")
    assert resp is StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    assert _wait(app, S.ERROR)
    assert seen[-2:] == [(S.PENDING_ERROR, S.RUNNING), (S.ERROR, S.PENDING_ERROR)]
    assert rt.stopped == 1
    with caplog.at_level(logging.WARNING):
        assert app.close(timeout_s=1) is True
    assert "no-op" in caplog.text and app.state is S.ERROR
    with pytest.raises(StreamsStoppedException):
        app.query(StateQueryRequest.in_store("kv").with_query(KeyQuery.with_key(1)))
    assert json.loads(layout.app_json_path(app.state_dir).read_text())["state"] == "ERROR"


def test_close_during_pending_error_waits_for_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt = GatedRuntime()
    rt.release_stop.clear()
    app = _app(tmp_path, rt)
    app.start()
    app.handle_uncaught(RuntimeError("boom"), "q1")
    assert app.state is S.PENDING_ERROR
    with caplog.at_level(logging.WARNING):
        assert app.close(timeout_s=0.05) is False
    assert app.state is S.PENDING_ERROR and "no-op" in caplog.text
    rt.release_stop.set()
    assert app.close(timeout_s=10) is True and app.state is S.ERROR


def test_replace_thread(tmp_path: Path) -> None:
    rt = GatedRuntime()
    app = _app(tmp_path, rt)
    app.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.REPLACE_THREAD)
    app.start()
    app.mark_running()
    assert app.handle_uncaught(RuntimeError("flaky"), "revenue-query") is StreamThreadExceptionResponse.REPLACE_THREAD
    assert app.state is S.REBALANCING and rt.replaced == ["revenue-query"]
    app.mark_running()
    assert app.state is S.RUNNING
    app.close(timeout_s=10)


def test_handler_only_in_created_and_faulty_handlers(tmp_path: Path) -> None:
    app = _app(tmp_path)
    with pytest.raises(TypeError):
        app.set_uncaught_exception_handler("not callable")  # type: ignore[arg-type]
    app.set_uncaught_exception_handler(lambda exc: 1 / 0)
    app.start()
    with pytest.raises(IllegalStateException, match="before calling start"):
        app.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.REPLACE_THREAD)
    assert app.handle_uncaught(RuntimeError("x"), "u") is StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    assert _wait(app, S.ERROR)


def test_shutdown_application_in_process(tmp_path: Path) -> None:
    a = _app(tmp_path, app_id="shop", sub="a")
    b = _app(tmp_path, app_id="shop", sub="b")
    other = _app(tmp_path, app_id="other", sub="c")
    for app in (a, b, other):
        app.start()
    a.set_state_listener(lambda n, o: a.close() if n is S.ERROR else None)  # close() from a listener: no deadlock
    assert a.handle_uncaught(RuntimeError("poison"), "u") is StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    a2 = _app(tmp_path, app_id="shop2", sub="d")
    a2.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION)
    a2.start()
    assert _wait(a, S.ERROR)
    assert b.state is S.RUNNING  # SHUTDOWN_CLIENT stops only its own client
    b2 = _app(tmp_path, app_id="shop2", sub="e")
    b2.start()
    a2.handle_uncaught(RuntimeError("poison"), "u")
    assert _wait(a2, S.ERROR) and _wait(b2, S.ERROR)
    assert other.state is S.RUNNING and b.state is S.RUNNING
    for app in (b, other):
        app.close(timeout_s=10)


def test_shutdown_application_reaches_other_processes(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("store_procs.py")), "wait-shutdown", str(tmp_path / "child"),
         "multi", str(tmp_path / "coord"), "20"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "RUNNING"
        app = _app(tmp_path, app_id="multi", sub="parent")
        app.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION)
        app.start()
        app.handle_uncaught(RuntimeError("poison pill"), "u")
        assert child.stdout.readline().strip() == "ERROR"
        assert _wait(app, S.ERROR)
        assert child.wait(timeout=20) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def test_old_shutdown_markers_are_ignored(tmp_path: Path) -> None:
    first = _app(tmp_path, app_id="again", sub="a")
    first.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION)
    first.start()
    first.handle_uncaught(RuntimeError("x"), "u")
    assert _wait(first, S.ERROR)
    assert (layout.coordination_dir("again", tmp_path / "coord") / "shutdown-requested").exists()
    time.sleep(0.01)
    later = _app(tmp_path, app_id="again", sub="b")
    later.start()
    stopped = later._fsm.wait_for({S.PENDING_ERROR, S.ERROR}, 0.3)  # six poll periods
    assert not stopped and later.state is S.RUNNING
    later.close(timeout_s=10)


def test_reassign_partitions_is_a_rebalance(tmp_path: Path) -> None:
    app = _app(tmp_path)
    seen = _record(app)
    app.start()
    app.reassign_partitions(hosted={"kv": {1}}, standby={"kv": {0}})
    assert seen[-2:] == [(S.REBALANCING, S.RUNNING), (S.RUNNING, S.REBALANCING)]
    info = json.loads(layout.app_json_path(app.state_dir).read_text())
    assert info["hosted"] == {"kv": [1]} and info["standby"] == {"kv": [0]}
    with pytest.raises(ValueError, match="both hosted"):
        app.reassign_partitions(hosted={"kv": {0}})
    with pytest.raises(ValueError, match="partitions 0..1"):
        app.reassign_partitions(hosted={"kv": {7}})
    app.close(timeout_s=10)
    with pytest.raises(IllegalStateException):
        app.reassign_partitions(hosted={"kv": {0}})


@pytest.mark.parametrize("kwargs,match", [
    ({"hosted_partitions": {"nope": {0}}}, "unknown store 'nope'"),
    ({"hosted_partitions": {"kv": {2}}}, "has partitions 0..1"),
    ({"hosted_partitions": {"kv": {0}}, "standby_partitions": {"kv": {0}}}, "both hosted"),
    ({"synchronous": "OFF"}, "synchronous"),
])
def test_bad_app_arguments(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StreamsApp(StoreTopology([spec_for(StoreKind.KEY_VALUE, "kv")]), "x", tmp_path, **kwargs)
    with pytest.raises(ValueError, match="application_id"):
        StreamsApp(StoreTopology([]), " ", tmp_path)
    with pytest.raises(ValueError, match="duplicate"):
        StoreTopology([spec_for(StoreKind.KEY_VALUE, "kv"), spec_for(StoreKind.WINDOW, "kv")])


@pytest.mark.parametrize("on", [S.RUNNING, S.PENDING_SHUTDOWN])
def test_close_from_a_listener_does_not_wait_for_itself(tmp_path: Path, on: State) -> None:
    app = _app(tmp_path)
    returned: list[bool] = []
    app.set_state_listener(lambda n, o: returned.append(app.close()) if n is on else None)
    t = threading.Thread(target=lambda: (app.start(), app.close()) if on is S.PENDING_SHUTDOWN else app.start(),
                         daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive()
    assert returned == [False]  # shutdown started, not yet finished when the listener returned
    assert _wait(app, S.NOT_RUNNING)


def test_stores_not_named_in_hosting_host_everything_but_standbys(tmp_path: Path) -> None:
    specs = [spec_for(StoreKind.KEY_VALUE, "a"), spec_for(StoreKind.KEY_VALUE, "b", partitions=3)]
    app = StreamsApp(StoreTopology(specs), "h", tmp_path, hosted_partitions={"a": {1}},
                     standby_partitions={"b": {2}}, coordination_base=tmp_path / "coord")
    hosted, standby = app.hosting()
    assert hosted == {"a": frozenset({1}), "b": frozenset({0, 1})}
    assert standby == {"a": frozenset(), "b": frozenset({2})}
    app.close()
