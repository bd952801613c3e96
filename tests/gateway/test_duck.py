"""The DuckDB side on its own: even SQL that bypassed the planner cannot reach files, network or settings."""

from __future__ import annotations

import threading

import duckdb
import pytest

import gateway.engine.errors as ge
from gateway.engine.duck import DuckPool
from gateway.engine.guards import Guards


@pytest.fixture(scope="module")
def pool() -> DuckPool:
    return DuckPool()


@pytest.fixture(params=[False, True], ids=["default-lane", "long-chains-lane"])
def lane(request: pytest.FixtureRequest) -> bool:
    """Both connections a pool hands cursors of: the default one and the one for long AND/OR chains."""
    return request.param


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')",
    "COPY (SELECT 1) TO '/tmp/iqgate-should-not-exist.csv'",
    "ATTACH '/tmp/iqgate-should-not-exist.db'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_json_auto('/etc/hostname')",
])
def test_file_network_and_extension_access_is_refused(pool: DuckPool, lane: bool, sql: str) -> None:
    cur = pool.cursor(lane)
    with pytest.raises(duckdb.Error) as info:
        cur.execute(sql).fetchall()
    assert isinstance(info.value, (duckdb.PermissionException, duckdb.InvalidInputException,
                                   duckdb.IOException)), info.value


@pytest.mark.parametrize("sql", [
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET enable_external_access",
    "SET TimeZone = 'America/New_York'",
])
def test_settings_cannot_be_unlocked(pool: DuckPool, lane: bool, sql: str) -> None:
    cur = pool.cursor(lane)
    with pytest.raises(duckdb.Error, match="(?i)configuration"):
        cur.execute(sql)
    assert cur.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)


def test_each_cursor_is_utc_and_locked(pool: DuckPool, lane: bool) -> None:
    for _ in range(3):
        cur = pool.cursor(lane)
        assert cur.execute("SELECT current_setting('TimeZone'), current_setting('lock_configuration')"
                           ).fetchone() == ("UTC", True)


def test_a_statement_past_its_deadline_is_interrupted(pool: DuckPool) -> None:
    guards = Guards(None)
    cur = pool.cursor()
    watch = guards.watch(100)
    watch.attach(cur.interrupt)
    with pytest.raises(duckdb.Error, match="(?i)interrupt"):
        cur.execute("SELECT count(*) FROM range(100000000000) a").fetchall()
    assert watch.reason == "timeout"
    with pytest.raises(ge.StatementTimeout, match="100 ms"):
        watch.check()
    watch.close()
    assert guards.tripped["timeout"] == 1 and not guards._watches  # nothing left behind to grow


def test_a_statement_whose_client_went_away_is_interrupted(pool: DuckPool) -> None:
    guards = Guards(None)
    gone = threading.Event()
    cur = pool.cursor()
    watch = guards.watch(60_000, gone.is_set)
    watch.attach(cur.interrupt)
    threading.Timer(0.1, gone.set).start()
    with pytest.raises(duckdb.Error, match="(?i)interrupt"):
        cur.execute("SELECT count(*) FROM range(100000000000) a").fetchall()
    assert isinstance(watch.error(), ge.StatementCancelled)
    watch.close()


def test_growth_beyond_the_memory_budget_trips_the_statement() -> None:
    """Big LIST values live outside DuckDB's buffer manager (its memory_limit does not see them): the watch does."""
    pool = DuckPool(memory_limit_bytes=64 * 2**20)
    guards = Guards(32 * 2**20)
    cur = pool.cursor()
    watch = guards.watch(60_000)
    watch.attach(cur.interrupt)
    try:
        cur.execute("SELECT list_sum(range(40000000))").fetchall()
    except duckdb.Error:
        pass  # interrupted, or finished: either way the watch saw the growth
    assert watch.reason == "memory"
    with pytest.raises(ge.OutOfMemoryError, match="budget of 32 MB"):
        watch.check()
    watch.close()
    pool.close()


def test_duckdbs_own_memory_limit_never_spills_to_disk(lane: bool) -> None:
    pool = DuckPool(memory_limit_bytes=64 * 2**20)
    cur = pool.cursor(lane)
    with pytest.raises(duckdb.OutOfMemoryException):
        cur.execute("SELECT count(DISTINCT i::VARCHAR || 'padding-padding-padding') FROM range(20000000) t(i)"
                    ).fetchall()
    assert cur.execute("SELECT current_setting('temp_directory')").fetchone() == ("",)
    pool.close()


def test_an_arrow_answer_interrupted_while_it_streams_says_why(gw: object) -> None:
    """DuckDB's errors reach an Arrow reader as pyarrow's (an interrupt is OSError "INTERRUPT Error"): the
    statement's own reason (here its timeout) is raised, not the bare OSError (found by the Flight face)."""
    from gateway.engine import Gateway

    assert isinstance(gw, Gateway)
    result = gw.sql("SELECT md5(repeat(range::VARCHAR, 2000)) AS h FROM range(100000000)", arrow=True,
                    session={"statement_timeout_ms": 800})
    try:
        with pytest.raises(ge.StatementTimeout):
            for _ in result.arrow_batches()[1]:
                pass
    finally:
        result.close()
