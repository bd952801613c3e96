"""One statement, one moment (issue 47), on stores written batch by batch so every Position is known.

Two key-value stores over ``orders`` (``counts`` and ``totals``) are written
as two streaming queries would: batch by batch, at Positions 10, 20, 30, …,
one store ahead of the other. A join of them at ``snapshot`` must answer
from one Position (the leading store read as of the lagging one's); at
``eventual`` it mixes two. The expected rows are computed from the batches
written, never typed in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.errors import BadRequest, NoCommonPositionError, NotSupported, SqlError
from gateway.engine.gateway import Gateway
from gateway.engine.session_token import token_of
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import Http

COUNTS = StoreSpec("counts", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
                   (Column("n", SqlType.BIGINT),), partitions=2, source_topics=("orders",))
TOTALS = StoreSpec("totals", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
                   (Column("n", SqlType.BIGINT),), partitions=2, source_topics=("orders",))
OTHER = StoreSpec("other", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
                  (Column("n", SqlType.BIGINT),), partitions=1, source_topics=("payments",))
KEYS = [f"c{i}" for i in range(6)]
JOIN = "SELECT c.k, c.n AS counted, t.n AS totalled FROM counts c JOIN totals t USING (k) ORDER BY k"


def _at(step: int) -> Position:
    """The Position after batch ``step``: both partitions of ``orders`` at 10 × (step + 1) - 1."""
    off = 10 * (step + 1) - 1
    return Position.from_map({"orders": {0: off, 1: off}})


def _values(step: int) -> dict[str, int]:
    """What both stores hold after batch ``step`` (the same for both: a join of them matches row by row)."""
    return {k: (step + 1) * 100 + i for i, k in enumerate(KEYS)}


class Pipeline:
    """Two stores written like two streaming queries: ``write(store, step)`` applies batch ``step`` to one."""

    def __init__(self, app: StreamsApp) -> None:
        self.app = app
        self.steps = {"counts": -1, "totals": -1}

    def write(self, store: str, step: int) -> None:
        self.app.writer(store).write_batch(step, [Change(k, (v,)) for k, v in _values(step).items()], _at(step))
        self.steps[store] = step

    def catch_up(self) -> None:
        top = max(self.steps.values())
        for store, step in list(self.steps.items()):
            for s in range(step + 1, top + 1):
                self.write(store, s)


@pytest.fixture()
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    app = StreamsApp(StoreTopology((COUNTS, TOTALS, OTHER)), application_id="moment", state_dir=str(tmp_path / "s"),
                     coordination_base=str(tmp_path / "coord"))
    app.start()
    p = Pipeline(app)
    yield p
    app.close()


@pytest.fixture()
def gw(pipeline: Pipeline) -> Iterator[Gateway]:
    g = Gateway(pipeline.app, config=GatewayConfig(consistency_wait_ms=300))
    yield g
    g.close()


def _expected(step: int) -> list[tuple[str, int, int]]:
    return [(k, v, v) for k, v in sorted(_values(step).items())]


def test_a_join_reads_both_stores_at_the_lagging_ones_position(pipeline: Pipeline, gw: Gateway) -> None:
    for s in range(3):
        pipeline.write("counts", s)
    pipeline.write("totals", 0)
    pipeline.write("totals", 1)  # counts at step 2, totals at step 1
    result = gw.sql(JOIN)
    assert result.rows() == _expected(1)
    assert result.position == _at(1)
    assert {p.position for p in result.partitions} == {_at(1)}  # every store partition at the one Position


def test_eventual_reads_each_store_at_its_latest_and_mixes(pipeline: Pipeline, gw: Gateway) -> None:
    for s in range(3):
        pipeline.write("counts", s)
    pipeline.write("totals", 0)
    rows = gw.sql(JOIN, session={"consistency": "eventual"}).rows()
    assert rows == [(k, a, b) for (k, a, _), (_, _, b) in zip(_expected(2), _expected(0))]
    assert rows != _expected(0) and rows != _expected(2)  # two moments in one answer


def test_a_scan_of_one_store_reads_its_partitions_at_one_position(pipeline: Pipeline, gw: Gateway) -> None:
    """Partitions commit a batch one after another: a full scan of ``counts`` between the two commits read
    partition 0 after batch 1 and partition 1 before it (one store, one request: no alignment was asked)."""
    pipeline.write("counts", 0)
    part0 = pipeline.app.partition_store("counts", 0)
    mine = [k for k in KEYS if partition_for_key(k, COUNTS.partitions, SqlType.VARCHAR) == 0]
    assert mine and len(mine) < len(KEYS)
    part0.apply_batch(1, [Change(k, (_values(1)[k],)) for k in mine], _at(1))  # partition 1 not yet
    scan = "SELECT k, n FROM counts ORDER BY k"
    result = gw.sql(scan)
    assert result.rows() == [(k, v) for k, v in sorted(_values(0).items())]
    assert {p.position for p in result.partitions} == {_at(0)}
    mixed = gw.sql(scan, session={"consistency": "eventual"}).rows()
    assert mixed == [(k, _values(1 if k in mine else 0)[k]) for k in sorted(KEYS)]  # the check can fail


def test_point_lookups_of_two_stores_agree(pipeline: Pipeline, gw: Gateway) -> None:
    for s in range(4):
        pipeline.write("totals", s)
    pipeline.write("counts", 0)
    got = gw.sql("SELECT c.n, t.n FROM counts c, totals t WHERE c.k = 'c3' AND t.k = 'c3'").rows()
    assert got == [(_values(0)["c3"], _values(0)["c3"])]


def test_a_self_join_is_one_moment_while_batches_land(pipeline: Pipeline, gw: Gateway) -> None:
    """Writes race the statement: every answer of the self-join pairs rows of one step, never two."""
    pipeline.write("counts", 0)
    stop = threading.Event()

    def writer() -> None:
        for s in range(1, 400):
            if stop.is_set():
                return
            pipeline.write("counts", s)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        answers = 0
        while t.is_alive() and time.monotonic() < deadline and answers < 300:
            rows = gw.sql("SELECT a.k, a.n, b.n FROM counts a JOIN counts b USING (k) ORDER BY k").rows()
            assert all(a == b for _, a, b in rows), rows
            step = rows[0][1] // 100 - 1
            assert rows == [(k, v, v) for k, v in sorted(_values(step).items())]
            answers += 1
        assert answers > 10
    finally:
        stop.set()
        t.join(10)


def test_explain_position_names_the_store_that_held_the_statement_back(pipeline: Pipeline, gw: Gateway) -> None:
    for s in range(3):
        pipeline.write("counts", s)
    pipeline.write("totals", 0)
    result = gw.sql("EXPLAIN POSITION " + JOIN)
    assert [c for c, _ in result.columns] == ["store", "partition", "latest_position", "read_position", "note"]
    rows = result.rows()
    per = {(r[0], r[1]): r for r in rows if r[0] is not None}
    assert set(per) == {("counts", 0), ("counts", 1), ("totals", 0), ("totals", 1)}
    for p in (0, 1):
        assert Position.from_json(per[("counts", p)][2]) == _at(2)
        assert Position.from_json(per[("counts", p)][3]) == _at(0)
        assert "held" in per[("totals", p)][4]
    summary = rows[-1]
    assert summary[0] is None and Position.from_json(summary[3]) == _at(0)
    assert "'totals' partition 0" in summary[4] and "common Position" in summary[4]
    assert gw.sql("EXPLAIN POSITION SELECT * FROM other").rows()[-1][4].startswith("no two reads share")


def test_explain_position_explains_queries_only(gw: Gateway) -> None:
    with pytest.raises(NotSupported, match="EXPLAIN POSITION explains a query"):
        gw.sql("EXPLAIN POSITION SHOW TABLES")


def test_no_common_position_is_a_retryable_error_naming_the_stores(pipeline: Pipeline, gw: Gateway) -> None:
    """totals is at a Position counts never held (and counts keeps no earlier one that matches): no moment."""
    for s in range(3):
        pipeline.write("counts", s)
    pipeline.app.writer("totals").write_batch(0, [Change(k, (1,)) for k in KEYS],
                                              Position.from_map({"orders": {0: 14, 1: 14}}))
    with pytest.raises(NoCommonPositionError) as err:
        gw.sql(JOIN)
    e = err.value
    assert e.code == "NO_COMMON_POSITION" and e.retryable and e.http_status == 503
    assert "'totals'" in str(e) or "'counts'" in str(e)
    assert {p["store"] for p in e.partitions} <= {"counts", "totals"} and e.partitions
    partial = gw.sql(JOIN, partial=True)
    failed = [p for p in partial.partitions if p.failure_reason]
    assert failed and all("NO_COMMON_POSITION" in (p.failure_message or "") for p in failed)
    assert partial.rows() == []  # no row mixes two moments: the stores that were elsewhere answered none


def test_the_wait_ends_when_the_lagging_store_catches_up(pipeline: Pipeline, gw: Gateway) -> None:
    """A store not at a Position the other keeps is waited for, as of the leader's Position."""
    pipeline.app.writer("totals").write_batch(0, [Change(k, (1,)) for k in KEYS],
                                              Position.from_map({"orders": {0: 14, 1: 14}}))
    pipeline.steps["totals"] = 0
    for s in range(2):
        pipeline.write("counts", s)
    timer = threading.Timer(0.1, lambda: pipeline.write("totals", 1))
    timer.start()
    try:
        rows = gw.sql(JOIN, wait_ms=5_000).rows()
    finally:
        timer.join()
    assert rows == _expected(1)


def test_monotonic_sessions_never_go_back(pipeline: Pipeline, gw: Gateway) -> None:
    pipeline.write("counts", 0)
    pipeline.write("counts", 1)
    session = gw.session(consistency="monotonic")
    first = session.sql("SELECT n FROM counts WHERE k = 'c1'")
    assert first.position == _at(1) and session.seen == _at(1)
    # the session now reads a store that is behind what it has seen: it waits, then fails as NOT_UP_TO_BOUND
    pipeline.write("totals", 0)
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:
        session.sql("SELECT n FROM totals WHERE k = 'c1'")
    assert getattr(err.value, "code", "") == "NOT_UP_TO_BOUND"
    assert time.monotonic() - t0 >= 0.25  # it waited (consistency_wait_ms) before saying so
    timer = threading.Timer(0.05, lambda: pipeline.write("totals", 1))
    timer.start()
    try:
        again = session.sql("SELECT n FROM totals WHERE k = 'c1'")
    finally:
        timer.join()
    assert again.rows() == [(_values(1)["c1"],)] and again.position == _at(1)
    # another session, not monotonic, is not held back by what this one saw
    pipeline.write("counts", 2)
    assert gw.sql("SELECT n FROM totals WHERE k = 'c1'", session={"consistency": "eventual"}).position == _at(1)


def test_settings_are_checked(gw: Gateway) -> None:
    with pytest.raises(SqlError, match="must be one of snapshot, monotonic, bounded_staleness, eventual"):
        gw.sql("SET consistency = 'strong'", session=gw.session())
    with pytest.raises(SqlError, match="duration such as '2s'"):
        gw.sql("SET max_staleness = 'soon'", session=gw.session())
    s = gw.session()
    s.sql("SET max_staleness = '1.5s'").close()
    assert s.settings["max_staleness"] == 1500


def test_http_session_token_makes_a_session_monotonic(pipeline: Pipeline, gw: Gateway) -> None:
    pipeline.write("counts", 0)
    pipeline.write("counts", 1)
    pipeline.write("totals", 0)
    with ServerThread(create_app(gw), threads=2) as srv:
        http = Http(srv.url)
        mono = {"consistency": "monotonic"}
        status, headers, body = http.sql("SELECT n FROM counts WHERE k = 'c2'", session=mono)
        assert status == 200, body
        token = headers["x-iq-session"]
        assert token == token_of(_at(1))
        status, headers, body = http.request("POST", "/v1/sql", {"sql": "SELECT n FROM totals WHERE k = 'c2'",
                                                                 "session": mono, "wait_ms": 100},
                                             headers={"X-IQ-Session": token})
        assert status == 503 and b"NOT_UP_TO_BOUND" in body  # totals is behind what the session saw
        pipeline.write("totals", 1)
        status, headers, body = http.request("POST", "/v1/sql", {"sql": "SELECT n FROM totals WHERE k = 'c2'",
                                                                 "session": mono},
                                             headers={"X-IQ-Session": token})
        assert status == 200 and headers["x-iq-session"] == token_of(_at(1))
        status, _, body = http.request("POST", "/v1/sql", {"sql": "SELECT 1"}, headers={"X-IQ-Session": "nonsense"})
        assert status == 400 and b"X-IQ-Session" in body
        status, headers, _ = http.sql("SELECT n FROM counts WHERE k = 'c2'")  # not monotonic, no token: none back
        assert status == 200 and "x-iq-session" not in headers


def test_a_bad_token_is_named() -> None:
    from gateway.engine.session_token import seen_of

    for bad in ("p1.!!!", "x" * 10, "p1." + "A" * 8):
        with pytest.raises(BadRequest, match="session token"):
            seen_of(bad)
    assert seen_of(token_of(_at(3))) == _at(3)
