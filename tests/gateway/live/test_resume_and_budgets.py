"""Resuming live answers exactly (a dropped connection, Last-Event-ID, a closed server), and their budgets: a slow
subscriber ends SUBSCRIBER_TOO_SLOW with where to resume (never memory growth), the per-server limit counted in
/metrics and /v1/health, a thousand subscriptions on one gateway."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from typing import Any

import psycopg
import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.errors import SubscriptionError
from gateway.engine.gateway import Gateway
from stores.engine.change import Change
from tests.gateway.live.livefixtures import (
    Held,
    LiveEnv,
    Ndjson,
    batch_at,
    hashable,
    held_for,
    http_pull,
    live_env,
    wait_until,
)
from tests.stores.live.workload import source_position

SQL = "SUBSCRIBE (SELECT k, total, n FROM kv WHERE n > 2)"
PULL = "SELECT k, total, n FROM kv WHERE n > 2"


def _read_to(sub: Ndjson, held: Held, topic: str, batch: int, answers: dict[int, Counter[Any]] | None = None,
             timeout_s: float = 15) -> int:
    """Apply NDJSON messages until a progress at ``batch``, checking the held answer at every progress with a
    known pull answer; how many were checked."""
    checked = 0
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, f"no progress at batch {batch}"
        msg = sub.next()
        assert "error" not in msg, msg
        held.apply(msg["op"], msg["position"], msg.get("row"))
        if msg["op"] == "progress":
            b = batch_at(msg["position"], topic)
            if answers is not None and b in answers:
                assert held.answer() == answers[b], f"batch {b}"
                checked += 1
            if b >= batch:
                return checked


def _write_pulling(env: LiveEnv, upto: int, url: str, answers: dict[int, Counter[Any]]) -> None:
    for b in range(env.batches, upto):
        env.write(b + 1)
        answers[b] = http_pull(url, PULL)


@pytest.fixture
def env(tmp_path):
    with live_env(tmp_path, kinds=("kv",), batches=80) as e:
        yield e


def test_a_dropped_connection_resumes_exactly_after_its_last_progress(env: LiveEnv) -> None:
    url = env.http.url  # type: ignore[union-attr]
    topic = env.topic("kv")
    answers = {env.batches - 1: http_pull(url, PULL)}
    first = Ndjson(url, SQL)
    held = first.held()
    _write_pulling(env, env.batches + 3, url, answers)
    _read_to(first, held, topic, env.batches - 1, answers)
    token = held.position
    first.close()  # the connection drops; the stores go on
    _write_pulling(env, env.batches + 6, url, answers)
    again = Ndjson(url, SQL + " WITH (SNAPSHOT = false) AS OF POSITION '" + json.dumps(token) + "'")
    assert again.status == 200
    assert _read_to(again, held, topic, env.batches - 1, answers) >= 2  # exactly the changes after it
    again.close()
    # the browser's way: an SSE reconnect with the last event id it saw resumes the same way
    _write_pulling(env, env.batches + 4, url, answers)
    sse = Ndjson(url, SQL, accept="text/event-stream", last_event_id=json.dumps(held.position))
    assert sse.status == 200
    seen_id = None
    event: dict[str, str] = {}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = sse.resp.readline().decode().rstrip("\n")
        if line:
            key, _, value = line.partition(": ")
            event[key] = value
            continue
        if event.get("event") not in (None, "columns"):
            msg = json.loads(event["data"])
            assert msg["op"] != "insert", "a resume sends no snapshot"
            held.apply(msg["op"], msg["position"], msg.get("row"))
            seen_id = event.get("id", seen_id)
            if msg["op"] == "progress" and batch_at(msg["position"], topic) >= env.batches - 1:
                break
        event = {}
    sse.close()
    assert held.answer() == answers[env.batches - 1]
    assert seen_id is not None and json.loads(seen_id) == held.position  # the id a reconnect would send


def test_a_closed_server_ends_with_the_position_a_new_one_resumes_from(env: LiveEnv) -> None:
    topic = env.topic("kv")
    gw = env.gw
    sub = gw.subscribe(SQL)
    names = [n for n, _ in sub.columns]
    held = held_for(names, list(sub.identity), list(sub.appended))
    env.write(env.batches + 3)
    with pytest.raises(SubscriptionError) as err:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for c in sub.take(100, 0.2):
                held.apply(c.op, c.position, c.row)
                if c.op == "progress" and batch_at(c.position, topic) == env.batches - 1:
                    gw.close()  # the server stops under the subscriber
    assert err.value.code == "SUBSCRIPTION_CLOSED" and err.value.retryable
    assert err.value.resume_from == sub.position and batch_at(err.value.resume_from, topic) == env.batches - 1
    env.write(env.batches + 4)
    fresh = Gateway(env.app)  # a new server: nothing of the old one held in memory
    env.gw = fresh
    again = fresh.subscribe(SQL, resume=err.value.resume_from)
    assert again.position == err.value.resume_from
    while held.position is None or batch_at(held.position, topic) < env.batches - 1:
        for c in again.take(100, 5):
            assert c.op != "insert"
            held.apply(c.op, c.position.to_json_map() if c.op == "progress" else c.position, c.row)
    want = Counter(tuple(hashable(v) for v in r) for r in fresh.sql(PULL).rows())
    assert held.answer() == want
    again.close()


def _big_batches(env: LiveEnv, upto: int, rows: int = 1500) -> None:
    """Batches of ``rows`` changed keys each (the workload's are a few): more than a subscriber's buffers hold."""
    w = env.stores["kv"]
    writer = env.writers.get("kv", None)
    for i in range(w.done, upto):
        writer.write_batch(i, [Change(f"k{(i * 7 + j) % 5000:05d}", (float(i), j, j % 2 == 0), ) for j in range(rows)],
                           source_position(i))
        w.done = i + 1
    env.batches = upto


def test_a_slow_subscriber_ends_too_slow_with_where_to_resume(tmp_path) -> None:
    config = GatewayConfig(subscription_buffer_bytes=20_000)
    with live_env(tmp_path, config, kinds=("kv",), batches=200, faces=False) as env:
        topic = env.topic("kv")
        sub = env.gw.subscribe("SUBSCRIBE kv")
        held = held_for([n for n, _ in sub.columns], list(sub.identity), list(sub.appended))
        answers: dict[int, Counter[Any]] = {}

        def pull() -> Counter[Any]:
            return Counter(tuple(hashable(v) for v in r) for r in env.gw.sql("SELECT * FROM kv").rows())

        answers[env.batches - 1] = pull()
        for b in range(env.batches, env.batches + 12):  # the subscriber reads nothing meanwhile
            _big_batches(env, b + 1)
            answers[b] = pull()
        with pytest.raises(SubscriptionError) as err:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for c in sub.take(5000, 0.2):
                    held.apply(c.op, c.position, c.row)
                    if c.op == "progress":
                        assert held.answer() == answers[batch_at(c.position, topic)]
        assert err.value.code == "SUBSCRIBER_TOO_SLOW" and err.value.retryable, err.value
        at = err.value.resume_from
        assert at is not None and at == sub.position  # the subscriber holds the whole answer there
        assert held.answer() == answers[batch_at(at, topic)] and batch_at(at, topic) < env.batches - 1
        assert env.gw.subscriptions()["ended"].get("SUBSCRIBER_TOO_SLOW") == 1
        again = env.gw.subscribe("SUBSCRIBE kv", resume=at)
        while batch_at(again.position, topic) < env.batches - 1:
            for c in again.take(5000, 5):
                held.apply(c.op, c.position, c.row)
        assert held.answer() == answers[env.batches - 1]
        again.close()


def test_a_client_that_stops_reading_is_ended_and_freed(tmp_path) -> None:
    """Over HTTP: the connection holds a bounded backlog; past it (and the feed's buffer) the server ends the
    subscription SUBSCRIBER_TOO_SLOW instead of buffering for the client."""
    config = GatewayConfig(subscription_buffer_bytes=20_000)
    with live_env(tmp_path, config, kinds=("kv",), batches=400) as env:
        url = env.http.url  # type: ignore[union-attr]
        host, port = url.split("//")[1].split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        body = json.dumps({"sql": "SUBSCRIBE kv"}).encode()
        sock.sendall(b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_until(lambda: env.gw.subscriptions()["open"] == 1, 10, "the subscription started")
        try:
            deadline = time.monotonic() + 60
            b = env.batches
            while not env.gw.subscriptions()["ended"].get("SUBSCRIBER_TOO_SLOW"):
                assert time.monotonic() < deadline and b < 400, "the server kept buffering for a client that " \
                                                                 "does not read"
                _big_batches(env, b + 1)
                b += 1
                time.sleep(0.05)
            wait_until(lambda: env.gw.subscriptions()["open"] == 0, 10, "the subscription was freed")
        finally:
            sock.close()


def test_the_limit_of_concurrent_subscriptions_is_enforced_and_counted(tmp_path) -> None:
    with live_env(tmp_path, GatewayConfig(max_subscriptions=2), kinds=("kv",)) as env:
        url = env.http.url  # type: ignore[union-attr]
        one = env.gw.subscribe("SUBSCRIBE kv")
        two = Ndjson(url, "SUBSCRIBE kv")
        with pytest.raises(SubscriptionError) as err:
            env.gw.subscribe("SUBSCRIBE kv")
        assert err.value.code == "TOO_MANY_SUBSCRIPTIONS" and err.value.retryable and err.value.http_status == 429
        three = Ndjson(url, "SUBSCRIBE kv")
        body = json.loads(three.resp.read())
        assert three.status == 429 and body["error"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
        three.close()
        with psycopg.connect(env.pg_url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.TooManyConnections) as pg_err:
                conn.execute("DECLARE c CURSOR FOR SUBSCRIBE kv")
            assert "TOO_MANY_SUBSCRIPTIONS" in str(pg_err.value)
        health = json.loads(_get(url, "/v1/health"))
        assert health["subscriptions"]["open"] == 2 and health["subscriptions"]["limit"] == 2
        metrics = _get(url, "/metrics")
        assert "iqgate_subscriptions_open 2" in metrics and "iqgate_subscriptions_limit 2" in metrics
        one.close()
        two.close()
        wait_until(lambda: env.gw.subscriptions()["open"] == 0, 5, "both ended")
        metrics = _get(url, "/metrics")
        assert 'iqgate_subscriptions_ended_total{reason="CLOSED_BY_CLIENT"} 2' in metrics
        assert "iqgate_subscriptions_started_total 2" in metrics
        env.gw.subscribe("SUBSCRIBE kv").close()  # room again


def _get(url: str, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url + path, timeout=10) as resp:
        return resp.read().decode()


def test_a_thousand_subscriptions_on_one_gateway(tmp_path) -> None:
    """990 following a key each (as dashboards do) and 10 the whole store: every one exact after the batches."""
    with live_env(tmp_path, kinds=("kv",), faces=False, batches=40) as env:
        topic = env.topic("kv")
        keys = [f"c{i:02d}" for i in range(24)]
        subs = [env.gw.subscribe("SUBSCRIBE (SELECT k, total, n FROM kv WHERE k = ?)", [keys[i % 24]])
                for i in range(990)]
        subs += [env.gw.subscribe("SUBSCRIBE kv") for _ in range(10)]
        assert env.gw.subscriptions()["open"] == 1000
        helds = [held_for([n for n, _ in s.columns], list(s.identity), list(s.appended)) for s in subs]
        env.write(env.batches + 6)
        last = env.batches - 1
        deadline = time.monotonic() + 60
        for s, held in zip(subs, helds):
            while held.position is None or batch_at(held.position, topic) < last:
                assert time.monotonic() < deadline, "a subscription stalled"
                for c in s.take(1000, 2):
                    held.apply(c.op, c.position, c.row)
        for i, (s, held) in enumerate(zip(subs, helds)):
            sql, params = ("SELECT k, total, n FROM kv WHERE k = ?", [keys[i % 24]]) if i < 990 else \
                ("SELECT * FROM kv", None)
            assert held.answer() == Counter(tuple(hashable(v) for v in r) for r in env.gw.sql(sql, params).rows())
            s.close()
        assert env.gw.subscriptions()["open"] == 0
