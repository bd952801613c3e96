"""StateDirReader: the read-only Queryable over another app's state directory."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from stores.app import layout
from stores.app.protocol import Queryable
from stores.app.reader import StateDirReader
from stores.catalog.schema import StoreKind
from stores.engine.change import Change
from stores.iqv2.errors import UnknownStateStoreException
from stores.iqv2.position import Position
from stores.iqv2.query import KeyQuery, RangeQuery, WindowKeyQuery
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason
from stores.iqv2.state import State
from tests.stores.iqv2_fixture import INPUT_POSITION, WS, spec_for, write_fixture


def req(name: str, q: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store(name).with_query(q)


@pytest.fixture
def running(make_app: Any) -> Any:
    specs = [spec_for(StoreKind.KEY_VALUE, "kv"), spec_for(StoreKind.WINDOW, "w")]
    app = make_app(specs, hosted_partitions={"kv": {0}, "w": {0, 1}}, standby_partitions={"kv": {1}})
    write_fixture(app, "kv", StoreKind.KEY_VALUE)
    write_fixture(app, "w", StoreKind.WINDOW)
    return app


_readers: list[StateDirReader] = []


def _opened(state_dir: Any) -> StateDirReader:
    """A reader this module closes after each test (its store connections count against process-wide budgets)."""
    reader = StateDirReader(state_dir)
    _readers.append(reader)
    return reader


@pytest.fixture(autouse=True)
def _close_readers() -> Any:
    yield
    while _readers:
        _readers.pop().close()


def test_reader_answers_like_the_app(running: Any) -> None:
    reader = _opened(running.state_dir)
    assert isinstance(reader, Queryable)
    assert reader.state is State.RUNNING
    assert set(reader.catalog()) == {"kv", "w"}
    assert reader.catalog()["w"] == running.catalog()["w"]
    for r in (req("kv", KeyQuery.with_key(2)), req("kv", RangeQuery.with_no_bounds()).with_partitions({0, 1, 5}),
              req("w", WindowKeyQuery.with_key_and_window_start_range(2, WS, 2 * WS))):
        mine, theirs = reader.query(r), running.query(r)
        assert set(mine.partition_results) == set(theirs.partition_results)
        for p, a in mine.partition_results.items():
            b = theirs.partition_results[p]
            assert a.is_success == b.is_success and a.position == b.position
            if a.is_success:
                ra, rb = a.result, b.result
                assert (list(ra) if hasattr(ra, "__iter__") and not isinstance(ra, tuple) else ra) == (
                    list(rb) if hasattr(rb, "__iter__") and not isinstance(rb, tuple) else rb)
            else:
                assert a.failure_reason == b.failure_reason
    assert reader.positions() == {"kv": INPUT_POSITION, "w": INPUT_POSITION}
    with pytest.raises(UnknownStateStoreException):
        reader.query(req("nope", KeyQuery.with_key(1)))
    reader.close()


def test_require_active_follows_the_writer(running: Any) -> None:
    reader = _opened(running.state_dir)
    res = reader.query(req("kv", KeyQuery.with_key(1)).require_active())
    assert res.partition_results[0].is_success
    assert res.partition_results[1].failure_reason is FailureReason.NOT_ACTIVE
    assert "was not active" in res.partition_results[1].failure_message
    running.close(timeout_s=10)
    assert reader.state is State.NOT_RUNNING
    after = reader.query(req("kv", KeyQuery.with_key(1)).require_active())
    assert after.partition_results[0].failure_message == (
        "Query requires a running active task, but partition was in state NOT_RUNNING and was active.")
    plain = reader.query(req("kv", KeyQuery.with_key(1)))  # the files stay readable after the writer stopped
    assert plain.partition_results[1].result == (3,)


def test_missing_app_json_and_partition_file(running: Any) -> None:
    running.close(timeout_s=10)
    layout.app_json_path(running.state_dir).unlink()
    layout.partition_path(running.state_dir, "kv", 1).unlink()
    reader = _opened(running.state_dir)
    assert reader.state is State.NOT_RUNNING
    res = reader.query(req("kv", KeyQuery.with_key(2)))
    assert set(res.partition_results) == {0}  # all-partitions: only the local ones
    res = reader.query(req("kv", KeyQuery.with_key(1)).with_partitions({0, 1, 2}))
    assert res.partition_results[0].is_success
    assert res.partition_results[1].failure_reason is FailureReason.NOT_PRESENT
    assert res.partition_results[2].failure_reason is FailureReason.DOES_NOT_EXIST


def test_dead_writer_reads_as_not_running(running: Any) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    path = layout.app_json_path(running.state_dir)
    info = json.loads(path.read_text())
    info["pid"] = dead.pid
    layout.write_json_atomic(path, info)
    reader = _opened(running.state_dir)
    assert reader.app_info().claimed is State.RUNNING
    assert reader.state is State.NOT_RUNNING


def test_catalog_picks_up_new_stores(make_app: Any, tmp_path: Any) -> None:
    state_dir = tmp_path / "shared"
    make_app([spec_for(StoreKind.KEY_VALUE, "a")], state_dir=state_dir)
    reader = _opened(state_dir)
    assert set(reader.catalog()) == {"a"}
    first = reader.catalog()
    assert reader.catalog() is first  # nothing changed: the same one, not a copy per statement
    with pytest.raises(UnknownStateStoreException):
        reader.query(req("b", KeyQuery.with_key(1)))
    other = make_app([spec_for(StoreKind.KEY_VALUE, "b")], state_dir=state_dir)
    other.writer("b").write_batch(1, [Change(1, (10,))], Position.from_map({"input-topic": {0: 0}}))
    res = reader.query(req("b", KeyQuery.with_key(1)))  # an unknown name triggers a rescan
    assert res.only_partition_result().result == (10,)
    assert set(reader.catalog()) == {"a", "b"}
    assert set(first) == {"a"}  # the one handed out before the change is not changed under its holder
    # without a query naming it, a new store still shows up once the catalog's staleness window passes
    make_app([spec_for(StoreKind.KEY_VALUE, "c")], state_dir=state_dir)
    deadline = time.monotonic() + 5
    while "c" not in reader.catalog() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert set(reader.catalog()) == {"a", "b", "c"}


def test_reader_errors(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        StateDirReader(tmp_path / "nope")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(FileNotFoundError, match="a-file is not a directory"):
        StateDirReader(tmp_path / "a-file")
    d = tmp_path / "bad"
    (d / "stores" / "x").mkdir(parents=True)
    (d / "stores" / "x" / "store.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid store spec"):
        _opened(d).catalog()
    empty = _opened(tmp_path)
    assert empty.catalog() == {} and empty.state is State.NOT_RUNNING


def test_reader_from_many_threads(running: Any) -> None:
    reader = _opened(running.state_dir)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                res = reader.query(req("kv", KeyQuery.with_key(4)))
                assert res.only_partition_result().result == (9,)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    reader.close()


def test_reset_store_empties_it_for_every_reader(running: Any) -> None:
    from stores.app.handles import QueryableStoreTypes
    from stores.iqv2.errors import StateStoreMigratedException

    reader = _opened(running.state_dir)
    handle = running.store("kv", QueryableStoreTypes.key_value())
    assert reader.query(req("kv", KeyQuery.with_key(2))).only_partition_result().result == (5,)
    running.reset_store("kv")
    for q in (running, reader):
        res = q.query(req("kv", RangeQuery.with_no_bounds()).with_partitions({0, 1}))
        assert all(list(r.result) == [] and r.position == Position.empty() for r in res.partition_results.values())
    with pytest.raises(StateStoreMigratedException):
        handle.get(2)
    w = running.writer("kv")
    assert w.last_batch_id() is None
    w.write_batch(1, [Change(2, (50,))], Position.from_map({"input-topic": {0: 1}}))  # batch ids start over
    assert reader.query(req("kv", KeyQuery.with_key(2))).only_partition_result().result == (50,)
    reader.close()


def test_a_replaced_file_is_reopened(make_app: Any, tmp_path: Any) -> None:
    import os
    import time

    from stores.engine.base import EXISTS_CHECK_S

    a = make_app([spec_for(StoreKind.KEY_VALUE, "kv", partitions=1)], state_dir=tmp_path / "a")
    a.writer("kv").write_batch(1, [Change(1, (1,))], Position.from_map({"input-topic": {0: 1}}))
    b = make_app([spec_for(StoreKind.KEY_VALUE, "kv", partitions=1)], state_dir=tmp_path / "b")
    b.writer("kv").write_batch(1, [Change(1, (2,))], Position.from_map({"input-topic": {0: 2}}))
    reader = _opened(tmp_path / "a")
    assert reader.query(req("kv", KeyQuery.with_key(1))).only_partition_result().result == (1,)
    assert a.close(timeout_s=10) and b.close(timeout_s=10)  # b checkpointed: no WAL left
    target = layout.partition_path(tmp_path / "a", "kv", 0)
    for suffix in ("", "-wal", "-shm"):  # as a rebuild would: the old file and its WAL go, a new file comes
        if os.path.exists(f"{target}{suffix}"):
            os.unlink(f"{target}{suffix}")
    os.replace(layout.partition_path(tmp_path / "b", "kv", 0), target)
    time.sleep(EXISTS_CHECK_S * 1.5)  # readers re-check their file at most this often
    got = reader.query(req("kv", KeyQuery.with_key(1))).only_partition_result()
    assert got.result == (2,) and got.position == Position.from_map({"input-topic": {0: 2}})
    reader.close()
