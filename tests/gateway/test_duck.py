"""The DuckDB side on its own: even SQL that bypassed the planner cannot reach files, network or settings."""

from __future__ import annotations

import threading
import time

import duckdb
import pytest

from gateway.duck import DuckPool, Watchdog


@pytest.fixture(scope="module")
def pool() -> DuckPool:
    return DuckPool()


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
def test_file_network_and_extension_access_is_refused(pool: DuckPool, sql: str) -> None:
    cur = pool.cursor()
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
def test_settings_cannot_be_unlocked(pool: DuckPool, sql: str) -> None:
    cur = pool.cursor()
    with pytest.raises(duckdb.Error, match="(?i)configuration"):
        cur.execute(sql)
    assert cur.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)


def test_each_cursor_is_utc_and_locked(pool: DuckPool) -> None:
    for _ in range(3):
        cur = pool.cursor()
        assert cur.execute("SELECT current_setting('TimeZone'), current_setting('lock_configuration')"
                           ).fetchone() == ("UTC", True)


def test_watchdog_fires_only_armed_tickets() -> None:
    dog = Watchdog()
    fired: list[str] = []
    done = threading.Event()
    t1 = dog.arm(0.01, lambda: fired.append("cancelled"))
    dog.disarm(t1)
    dog.arm(0.02, lambda: (fired.append("fired"), done.set()))
    assert done.wait(5)
    time.sleep(0.03)
    assert fired == ["fired"]
    assert not dog._live and not dog._cancelled  # nothing left behind to grow


def test_watchdog_interrupts_a_running_statement(pool: DuckPool) -> None:
    cur = pool.cursor()
    dog = Watchdog()
    dog.arm(0.05, cur.interrupt)
    with pytest.raises(duckdb.Error, match="(?i)interrupt"):
        cur.execute("SELECT count(*) FROM range(100000000000) a").fetchall()
