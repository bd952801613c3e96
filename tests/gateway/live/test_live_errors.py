"""Every way a live answer is refused or ends, on every face, says what was wrong (and where to resume): never a
stack trace, a silent gap or a confusing EXECUTION_ERROR."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from gateway import connect
from gateway.engine.errors import (
    BadRequest,
    ExecutionError,
    NotSupported,
    SqlError,
    StreamRequired,
    SubscriptionError,
    UnknownStoreError,
)
from gateway.engine.gateway import Gateway
from gateway.engine.live.changes import RESET, Change, flat_rows
from gateway.http import create_app
from gateway.pg.server import PgServer
from gateway.serving.http_server import ServerThread
from stores.catalog.schema import Column, SqlType
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog
from tests.gateway.live.livefixtures import TOKEN, LiveEnv, Ndjson, batch_at, hashable, held_for, live_env
from tests.stores.live.workload import SPECS, Writer, open_app, workload


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveEnv]:
    with live_env(tmp_path_factory.mktemp("live-errors"), kinds=("kv",)) as e:
        yield e


def _http(env: LiveEnv, sql: str, accept: str = "application/x-ndjson", **kw: Any) -> tuple[int, dict[str, Any]]:
    sub = Ndjson(env.http.url, sql, accept=accept, **kw)  # type: ignore[union-attr]
    try:
        assert sub.status != 200, sub.status
        return sub.status, json.loads(sub.resp.read())
    finally:
        sub.close()


def _pg_error(env: LiveEnv, sql: str) -> psycopg.Error:
    with psycopg.connect(env.pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(sql)
        return err.value


def test_a_subscription_sent_the_finite_way_says_how_to_stream_it(env: LiveEnv) -> None:
    with pytest.raises(StreamRequired) as err:
        env.gw.sql("SUBSCRIBE kv")
    assert err.value.code == "STREAM_REQUIRED" and "Gateway.subscribe" in err.value.message
    for accept in ("application/json", "text/csv", "application/vnd.apache.arrow.stream"):
        status, body = _http(env, "SUBSCRIBE kv", accept)
        assert status == 406 and body["error"]["code"] == "STREAM_REQUIRED", (accept, body)
        assert "application/x-ndjson" in body["error"]["message"]
    pg = _pg_error(env, "SELECT * FROM kv EMIT CHANGES")
    assert pg.sqlstate == "0A000" and "COPY (SUBSCRIBE" in str(pg)


def test_what_is_not_a_subscription_is_refused_where_only_subscriptions_go(env: LiveEnv) -> None:
    with pytest.raises(BadRequest) as err:
        env.gw.subscribe("SELECT * FROM kv")
    assert "not a live answer" in err.value.message
    status, body = _http(env, "SELECT * FROM kv", "text/event-stream")
    assert status == 400 and "not a live answer" in body["error"]["message"]
    pg = _pg_error(env, "DECLARE c CURSOR FOR SELECT * FROM kv")
    assert pg.sqlstate == "0A000" and "SUBSCRIBE" in str(pg)


def test_bad_subscriptions_are_planning_errors_with_their_place(env: LiveEnv) -> None:
    with pytest.raises(UnknownStoreError):
        env.gw.subscribe("SUBSCRIBE nope")
    with pytest.raises(NotSupported) as err:
        env.gw.subscribe("SUBSCRIBE (SELECT k, count(*) FROM kv GROUP BY k)")
    assert err.value.line == 1 and err.value.col is not None and "aggregation" in err.value.message
    status, body = _http(env, "SUBSCRIBE (SELECT k FROM kv ORDER BY k)")
    assert status == 400 and body["error"]["code"] == "UNSUPPORTED" and body["error"]["line"] == 1
    status, body = _http(env, "SUBSCRIBE (SELECT nope FROM kv)")
    assert status == 400 and body["error"]["code"] == "UNKNOWN_COLUMN"
    pg = _pg_error(env, "COPY (SUBSCRIBE (SELECT k FROM kv LIMIT 3)) TO STDOUT")
    assert pg.sqlstate == "0A000" and "LIMIT" in str(pg)


def test_resume_points_that_cannot_be_resumed_are_refused(env: LiveEnv) -> None:
    topic = env.topic("kv")
    skipped = Position.from_map({"orders": {0: 15, 1: 4}})  # between two batches' Positions: never one of the store's
    with pytest.raises(SubscriptionError) as err:
        env.gw.subscribe("SUBSCRIBE kv", resume=skipped)
    assert err.value.code == "INVALID_RESUME_POSITION" and err.value.http_status == 400, err.value
    bogus = json.dumps({"orders": {"0": 9}, topic: {"0": 3, "1": 4, "2": 3}})
    status, body = _http(env, f"SUBSCRIBE kv WITH (SNAPSHOT = false) AS OF POSITION '{bogus}'")
    assert status == 400 and body["error"]["code"] == "INVALID_RESUME_POSITION", body
    status, body = _http(env, "SUBSCRIBE kv", last_event_id="not a position")
    assert status == 400 and body["error"]["code"] == "BAD_REQUEST" and "Last-Event-ID" in body["error"]["message"]


def test_a_store_without_changelogs_cannot_be_followed(gw: Gateway) -> None:
    """(the shop fixture of tests/gateway: stores written without changelogs)"""
    with pytest.raises(SubscriptionError) as err:
        gw.subscribe("SUBSCRIBE revenue")
    assert err.value.code == "SUBSCRIPTION_UNAVAILABLE" and "changelog" in err.value.message
    assert gw.subscriptions()["open"] == 0


def test_a_value_the_sql_cannot_compute_ends_the_subscription_with_its_error(env: LiveEnv) -> None:
    sub = env.gw.subscribe("SUBSCRIBE (SELECT CAST(k AS INTEGER) AS number FROM kv)")
    with pytest.raises(ExecutionError) as err:
        sub.take(100, 10)
    assert "Could not convert" in err.value.message or "convert" in err.value.message.lower()
    with Ndjson(env.http.url, "SUBSCRIBE (SELECT CAST(k AS INTEGER) AS number FROM kv)") as http:  # type: ignore[union-attr]
        assert http.status == 200  # the headers went out before the first batch was computed: the end is in-band
        last = http.next()
        assert last["error"]["code"] == "EXECUTION_ERROR"


def test_pg_cursors_say_what_is_wrong(env: LiveEnv) -> None:
    with psycopg.connect(env.pg_url) as conn:
        cur = conn.cursor()
        cur.execute("DECLARE c CURSOR FOR SUBSCRIBE kv")
        with pytest.raises(psycopg.errors.DuplicateCursor):
            cur.execute("DECLARE c CURSOR FOR SUBSCRIBE kv")
    for sql, state in (("FETCH 1 FROM nope", "34000"), ("DECLARE s SCROLL CURSOR FOR SUBSCRIBE kv", "0A000"),
                       ("FETCH BACKWARD 1 FROM c", "0A000"), ("DECLARE CURSOR", "42601")):
        assert _pg_error(env, sql).sqlstate == state, sql
    with psycopg.connect(env.pg_url, autocommit=True) as conn:
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE kv")
        with pytest.raises(psycopg.Error) as err:
            conn.execute("FETCH ALL c WITH (timeout = 'soon')")
        assert err.value.sqlstate == "22023"
        rows = conn.execute("FETCH ALL c WITH (timeout = '5s')").fetchall()  # the snapshot, at least its start
        assert rows and rows[0][0] in ("insert", "progress")
        conn.execute("CLOSE c")
        with pytest.raises(psycopg.errors.InvalidCursorName):
            conn.execute("CLOSE c")


def test_the_dbapi_raises_the_end_as_pep_249_errors(env: LiveEnv) -> None:
    for conn in (connect(gateway=env.gw), connect(env.http.url)):  # type: ignore[union-attr]
        with conn:
            cur = conn.cursor()
            with pytest.raises(NotSupported):
                cur.execute("SUBSCRIBE (SELECT k, count(*) FROM kv GROUP BY k)")
            cur.execute("SUBSCRIBE (SELECT CAST(k AS INTEGER) AS number FROM kv)")
            with pytest.raises(ExecutionError):
                cur.fetchone()


def test_rows_of_one_shape_end_at_a_rebuild_with_other_columns() -> None:
    """A PG COPY or cursor and a DB-API cursor keep one row shape: a rebuilt store with other columns ends them."""
    at = Position.from_map({"orders": {0: 1}})
    cols = [("k", "VARCHAR"), ("n", "BIGINT")]
    assert flat_rows([Change(RESET, at, None, cols)], cols) == [("reset", at.to_json(), None, None)]
    with pytest.raises(SubscriptionError) as err:
        flat_rows([Change(RESET, at, None, [*cols, ("avg", "DOUBLE")])], cols)
    assert err.value.code == "SUBSCRIPTION_UNAVAILABLE" and "subscribe again" in err.value.message


V2 = type(SPECS["kv"])("kv", SPECS["kv"].kind, SPECS["kv"].key, (*SPECS["kv"].values, Column("avg", SqlType.DOUBLE)),
                       SPECS["kv"].partitions, SPECS["kv"].source_topics)


def test_a_store_rebuilt_under_a_subscription_resets_it_and_goes_on_exactly(tmp_path) -> None:
    with live_env(tmp_path, kinds=("kv",), faces=False) as env:
        old = env.stores["kv"]
        sub = env.gw.subscribe("SUBSCRIBE kv")
        held = held_for([n for n, _ in sub.columns], list(sub.identity), list(sub.appended))
        _until(sub, held, lambda: held.position is not None)
        g = env.app.begin_rebuild("kv", "a new column", spec=V2)
        env.writers.begin("kv", g)
        changes = [[c if c.value is None else c._replace(value=(*c.value, c.value[0] / (c.value[1] + 1))) for c in b]
                   for b in workload("kv", 60, seed=13)]
        new = Writer(env.app, env.writers, V2, changes, generation=g)
        new.write(old.done)
        env.app.finish_rebuild("kv")
        new.write(old.done + 3)
        resets: list[Change] = []

        def swapped() -> bool:
            return bool(resets) and held.position is not None and new.topic() in held.position.topics() \
                and batch_at(held.position, new.topic()) == new.done - 1

        _until(sub, held, swapped, resets)
        assert [n for n, _ in resets[0].columns or []] == ["k", "total", "n", "vip", "avg"]
        assert held.answer() == Counter(tuple(hashable(v) for v in r) for r in env.gw.sql("SELECT * FROM kv").rows())
        sub.close()


def _until(sub: Any, held: Any, done: Any, resets: list[Change] | None = None, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the subscription did not get there"
        for c in sub.take(1000, 0.5):
            if c.op == RESET and resets is not None:
                resets.append(c)
                held.width = len(c.columns)
            held.apply(c.op, c.position, c.row)


def test_a_resume_older_than_the_changelog_holds_is_too_old_with_the_oldest(tmp_path) -> None:
    with live_env(tmp_path, kinds=("kv",), faces=False) as env:
        topic = env.topic("kv")
        sub = env.gw.subscribe("SUBSCRIBE kv")
        _until(sub, held_for([n for n, _ in sub.columns], list(sub.identity), []), lambda: sub.position is not None)
        token = sub.position
        sub.close()
        env.write(env.batches + 10)
        env.log.delete_records(topic, {p: env.batches - 3 for p in range(3)})  # retention took the start
        oldest = env.batches - 3
    # a restarted server (nothing of the old one in memory) over the same files and log
    app, _writers = open_app(tmp_path / "state", EventLog(tmp_path / "log"), SPECS["kv"])
    gw = Gateway(app)
    http = ServerThread(create_app(gw), threads=2).start()
    pg = PgServer(gw, token=TOKEN, auth_method="password").start()
    try:
        with pytest.raises(SubscriptionError) as err:
            gw.subscribe("SUBSCRIBE kv", resume=token)
        assert err.value.code == "SUBSCRIPTION_TOO_OLD" and not err.value.retryable
        assert err.value.oldest is not None and batch_at(err.value.oldest, topic) == oldest
        assert err.value.http_status == 410
        resume = f"SUBSCRIBE kv WITH (SNAPSHOT = false) AS OF POSITION '{token.to_json()}'"
        with Ndjson(http.url, resume) as sub_http:
            body = json.loads(sub_http.resp.read())
            assert sub_http.status == 410 and body["error"]["code"] == "SUBSCRIPTION_TOO_OLD"
            assert body["error"]["oldest"] == err.value.oldest.to_json_map()
        with psycopg.connect(f"postgresql://u:{TOKEN}@127.0.0.1:{pg.port}/iqgate", autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as pg_err:
                conn.execute(f"DECLARE c CURSOR FOR {resume}")
        assert "SUBSCRIPTION_TOO_OLD" in str(pg_err.value)
        assert "oldest Position" in (pg_err.value.diag.message_detail or "")
        again = gw.subscribe("SUBSCRIBE kv", resume=err.value.oldest)  # the oldest is resumable
        again.close()
    finally:
        pg.close()
        http.close()
        gw.close()
        app.close()


def test_params_bind_a_subscription_over_http(env: LiveEnv) -> None:
    sub = Ndjson(env.http.url, "SUBSCRIBE (SELECT k, total FROM kv WHERE k = ?)", params=["c05"])  # type: ignore[union-attr]
    try:
        rows = []
        while True:
            msg = sub.next()
            if msg["op"] == "progress":
                break
            rows.append(msg["row"])
        want = env.gw.sql("SELECT k, total FROM kv WHERE k = ?", ["c05"]).rows()
        assert [tuple(r) for r in rows] == [tuple(r) for r in want]
    finally:
        sub.close()


def test_sql_errors_keep_their_class_through_the_dbapi(env: LiveEnv) -> None:
    with connect(env.http.url) as conn:  # type: ignore[union-attr]
        with pytest.raises(SqlError):
            conn.cursor().execute("SUBSCRIBE (SELECT nope FROM kv)")


def test_dbapi_cursors_follow_a_subscription_and_resume_from_their_position(env: LiveEnv) -> None:
    """In-process and remote: fetches block for the next changes, ``cursor.position`` is the resume point, and a
    cursor that executes the subscription again from it gets exactly the changes after it."""
    topic = env.topic("kv")
    sql = "SUBSCRIBE (SELECT k, total, n FROM kv WHERE n > 2)"
    pull = "SELECT k, total, n FROM kv WHERE n > 2"
    for conn in (connect(gateway=env.gw), connect(env.http.url)):  # type: ignore[union-attr]
        with conn:
            cur = conn.cursor()
            cur.execute(sql)
            assert cur.statement == "subscribe" and [d[0] for d in cur.description] == \
                ["iq_op", "iq_position", "k", "total", "n"]
            held = held_for(["k", "total", "n"], ["k"], [])

            def follow(c: Any, upto: int) -> None:
                while c.position is None or batch_at(c.position.to_json_map(), topic) < upto:
                    for op, position, *row in c.fetchmany(100):
                        held.apply(op, json.loads(position), row)

            follow(cur, env.batches - 1)
            token = cur.position
            assert token is not None and held.position == token.to_json_map()
            cur.close()  # the subscription ends with the cursor
            env.write(env.batches + 3)
            again = conn.cursor()
            again.execute(f"{sql} WITH (SNAPSHOT = false) AS OF POSITION '{json.dumps(token.to_json_map())}'")
            row = again.fetchone()  # blocks for the first change (or progress) after the token
            assert row is not None and row[0] != "insert"
            held.apply(row[0], json.loads(row[1]), list(row[2:]))
            follow(again, env.batches - 1)
            assert held.answer() == Counter(tuple(hashable(v) for v in r) for r in env.gw.sql(pull).rows())
            again.close()
    wait = time.monotonic() + 5
    while env.gw.subscriptions()["open"] and time.monotonic() < wait:
        time.sleep(0.05)
    assert env.gw.subscriptions()["open"] == 0


def test_a_pg_client_that_closes_its_connection_ends_its_copy(env: LiveEnv) -> None:
    conn = psycopg.connect(env.pg_url, autocommit=True)
    cur = conn.cursor()
    copying = cur.copy("COPY (SUBSCRIBE kv) TO STDOUT")
    copy = copying.__enter__()
    assert next(copy.rows())[0] in ("insert", "progress")
    assert env.gw.subscriptions()["open"] == 1
    conn.pgconn.finish()  # gone, without a CancelRequest
    deadline = time.monotonic() + 5
    while env.gw.subscriptions()["open"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.gw.subscriptions()["open"] == 0


def test_the_cli_says_why_a_subscription_is_refused(env: LiveEnv) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "sql", "--url", env.http.url,  # type: ignore[union-attr]
                          "SUBSCRIBE (SELECT k, count(*) FROM kv GROUP BY k)"], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "UNSUPPORTED at line 1" in out.stderr and "Traceback" not in out.stderr
