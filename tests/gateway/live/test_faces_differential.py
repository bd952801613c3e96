"""SUBSCRIBE / EMIT CHANGES through every face, held to pull queries through the same face: a subscriber that
applies the snapshot and the changes holds, at every progress Position, exactly what the same SELECT answered
as a pull query while the store was at that Position (every store kind; projections, computed columns, filters on
keys, windows, times and values, rows leaving and entering a value filter, deletes)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.gateway.live.livefixtures import (
    CASES,
    LiveEnv,
    Ndjson,
    batch_at,
    hashable,
    held_for,
    http_pull,
    live_env,
    wait_until,
)

STEPS = 8


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveEnv]:
    with live_env(tmp_path_factory.mktemp("live-faces")) as e:
        yield e


class _Engine:
    def __init__(self, env: LiveEnv) -> None:
        self.env = env

    def open(self, sql: str) -> Any:
        sub = self.env.gw.subscribe(sql)
        names = [n for n, _ in sub.columns]
        return sub, held_for(names, list(sub.identity), list(sub.appended))

    def messages(self, sub: Any) -> Iterator[tuple[str, Any, Any]]:
        for c in _changes(sub):
            yield c.op, c.position, c.row

    def pull(self, sql: str) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(hashable(v) for v in r) for r in self.env.gw.sql(sql).rows())

    def close(self, sub: Any) -> None:
        sub.close()


class _Http:
    def __init__(self, env: LiveEnv) -> None:
        assert env.http is not None
        self.url = env.http.url

    def open(self, sql: str) -> Any:
        sub = Ndjson(self.url, sql)
        assert sub.status == 200 and sub.headers["content-type"].startswith("application/x-ndjson"), sub.headers
        return sub, sub.held()

    def messages(self, sub: Ndjson) -> Iterator[tuple[str, Any, Any]]:
        while True:
            msg = sub.next()
            assert "error" not in msg, msg
            yield msg["op"], msg["position"], msg.get("row")

    def pull(self, sql: str) -> Counter[tuple[Any, ...]]:
        return http_pull(self.url, sql)

    def close(self, sub: Ndjson) -> None:
        sub.close()


class _Pg:
    """``COPY (SUBSCRIBE …) TO STDOUT`` read by psycopg, against ``COPY (SELECT …) TO STDOUT``: the same text."""

    def __init__(self, env: LiveEnv) -> None:
        self.url = env.pg_url
        self.puller = psycopg.connect(self.url, autocommit=True)

    def open(self, sql: str) -> Any:
        conn = psycopg.connect(self.url, autocommit=True)
        cur = conn.cursor()
        copy_cm = cur.copy(f"COPY ({sql}) TO STDOUT")
        copy = copy_cm.__enter__()
        rows = copy.rows()
        first = next(rows)  # the snapshot's first row (or its progress): the subscription runs
        state = {"conn": conn, "cm": copy_cm, "rows": rows, "first": first}
        # the columns: the same statement described as a cursor's rows (DECLARE + FETCH 0 names them)
        with psycopg.connect(self.url) as other:
            c = other.cursor()
            c.execute(f"DECLARE shape CURSOR FOR {sql}")
            c.execute("FETCH 0 FROM shape")
            names = [d.name for d in c.description][2:]
        sub_plan = _shape(sql)
        return state, held_for(names, sub_plan[0], sub_plan[1])

    def messages(self, state: Any) -> Iterator[tuple[str, Any, Any]]:
        yield _split(state["first"])
        for row in state["rows"]:
            yield _split(row)

    def pull(self, sql: str) -> Counter[tuple[Any, ...]]:
        with self.puller.cursor().copy(f"COPY ({sql}) TO STDOUT") as copy:
            return Counter(tuple(r) for r in copy.rows())

    def close(self, state: Any) -> None:
        conn = state["conn"]
        conn.cancel_safe()
        try:
            for _ in state["rows"]:
                pass
        except psycopg.errors.QueryCanceled:
            pass
        try:
            state["cm"].__exit__(None, None, None)
        except psycopg.Error:
            pass
        conn.close()


def _split(row: tuple[Any, ...]) -> tuple[str, Any, Any]:
    op, position, *values = row
    return op, json.loads(position), None if op in ("progress", "reset") else tuple(values)


_PLANS: dict[str, tuple[list[str], list[str]]] = {}


def _shape(sql: str) -> tuple[list[str], list[str]]:
    """(identity, appended) of a subscription: the planner's, as every face reports them."""
    from planner import plan
    from tests.stores.live.workload import SPECS

    if sql not in _PLANS:
        p = plan(sql, SPECS).subscription
        _PLANS[sql] = (list(p.identity), list(p.added))
    return _PLANS[sql]


FACES = {"engine": _Engine, "http-ndjson": _Http, "pg-copy": _Pg}


@pytest.mark.parametrize("face", list(FACES))
def test_the_held_answer_is_the_pull_answer_at_every_progress(env: LiveEnv, face: str) -> None:
    f = FACES[face](env)
    start = env.batches  # the stores are at batch start - 1
    subs = [(store, pull, *f.open(sql)) for store, sql, pull in CASES]
    answers: list[dict[int, Counter[tuple[Any, ...]]]] = [{start - 1: f.pull(pull)} for _, _, pull in CASES]
    try:
        for b in range(start, start + STEPS):
            env.write(b + 1)
            for i, (_, _, pull) in enumerate(CASES):
                answers[i][b] = f.pull(pull)
        last = start + STEPS - 1
        deadline = time.monotonic() + 30
        for i, (store, _pull, sub, held) in enumerate(subs):
            topic = env.topic(store)
            checked = 0
            for op, position, row in f.messages(sub):
                assert time.monotonic() < deadline, f"{CASES[i][1]}: no progress at batch {last}"
                held.apply(op, position, row)
                if op != "progress":
                    continue
                b = batch_at(position, topic)
                if b in answers[i]:  # (a snapshot the hub kept from before this test starts earlier: not pulled)
                    assert held.answer() == answers[i][b], f"{face} {CASES[i][1]} at batch {b}"
                    checked += 1
                if b >= last:
                    break
            assert checked >= 2, f"{face} {CASES[i][1]}: {checked} progress positions checked"
    finally:
        for _, _, sub, _ in subs:
            f.close(sub)
        if isinstance(f, _Pg):
            f.puller.close()
    # a client that goes away (or cancels) frees its subscription at once
    wait_until(lambda: env.gw.subscriptions()["open"] == 0, 5, "every subscription ended")


def test_every_face_agrees_on_the_messages(env: LiveEnv) -> None:
    """The same subscription through the engine, NDJSON and SSE: the same ops, positions and rows, in order."""
    sql = "SUBSCRIBE (SELECT k, total FROM kv WHERE n > 2)"
    engine = env.gw.subscribe(sql)
    ndjson = Ndjson(env.http.url, sql)  # type: ignore[union-attr]
    sse = Ndjson(env.http.url, sql, accept="text/event-stream")  # type: ignore[union-attr]
    try:
        assert sse.headers["content-type"].startswith("text/event-stream")
        env.write(env.batches + 2)
        want = env.batches - 1
        topic = env.topic("kv")

        def until_last(messages: Iterator[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
            out = []
            for op, position, row in messages:
                out.append((op, json.dumps(position, sort_keys=True), None if row is None else list(row)))
                if op == "progress" and batch_at(position, topic) >= want:
                    return [m for m in out if m[0] != "progress"]  # heartbeats come when they come
            raise AssertionError("ended")

        got_engine = until_last((c.op, c.position.to_json_map(), c.row) for c in _changes(engine))
        got_ndjson = until_last((m["op"], m["position"], m.get("row")) for m in _lines(ndjson))
        got_sse = until_last(_events(sse))
        assert got_engine and got_ndjson == got_sse
        assert [(o, p) for o, p, _ in got_engine] == [(o, p) for o, p, _ in got_ndjson]
        assert len(got_engine) == len(got_ndjson)
    finally:
        engine.close()
        ndjson.close()
        sse.close()


def _changes(sub: Any) -> Iterator[Any]:
    while True:
        yield from sub.take(256, 10)


def _lines(sub: Ndjson) -> Iterator[dict[str, Any]]:
    while True:
        yield sub.next()


def _events(sub: Ndjson) -> Iterator[tuple[str, Any, Any]]:
    """SSE events: ``event:`` name, ``data:`` the same object as an NDJSON line; ``columns`` first."""
    event: dict[str, str] = {}
    saw_columns = False
    while True:
        line = sub.resp.readline().decode()
        assert line, "the stream ended"
        line = line.rstrip("\n")
        if line:
            key, _, value = line.partition(": ")
            event[key] = value
            continue
        if "data" in event:
            msg = json.loads(event["data"])
            if event.get("event") == "columns":
                saw_columns = True
            else:
                assert saw_columns and event["event"] == msg["op"]
                yield msg["op"], msg["position"], msg.get("row")
        event = {}
