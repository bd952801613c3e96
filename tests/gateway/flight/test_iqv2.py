"""The IQv2 contract over Flight: the answer's Position and per-partition outcomes in the FlightInfo's
app_metadata, in the ``x-iq-position`` / ``x-iq-partitions`` trailers, and to ADBC; a position bound, wait,
partial answers and any session setting as call headers or as SET on the session."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from gateway.engine import Gateway
from gateway.flight import start_flight
from stores.app.streams import StoreTopology, StreamsApp
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.flight.conftest import TOKEN, Flight, Raw, Trailers
from tests.gateway.gwfixtures import REVENUE, Http, Shop

LOOKUP = "SELECT customer, revenue FROM revenue WHERE customer = 'c03'"
SCAN = "SELECT customer, orders FROM revenue ORDER BY customer"


def test_position_and_partitions_in_the_metadata_and_trailers(flight: Flight, server: Http, shop: Shop) -> None:
    keep = Trailers()
    raw = Raw(fl.FlightClient(flight.location, middleware=[keep]), TOKEN)
    try:
        for sql in (LOOKUP, SCAN):
            status, headers, body = server.sql(sql)
            assert status == 200
            info = raw.info("CommandStatementQuery", query=sql)
            meta = json.loads(info.app_metadata)
            assert meta["statement"] == "select"
            assert meta["position"] == body["position"] == shop.position.to_json_map()
            assert meta["partitions"] == body["partitions"]
            assert json.loads(keep.received["x-iq-position"][-1]) == body["position"]  # GetFlightInfo's header
            table = raw.client.do_get(info.endpoints[0].ticket, raw.options()).read_all()
            assert table.num_rows == len(body["rows"])
            assert json.loads(keep.received["x-iq-position"][-1]) == body["position"]  # DoGet's trailers
            assert json.loads(keep.received["x-iq-partitions"][-1]) == body["partitions"]
    finally:
        raw.close()


def test_adbc_reads_the_position_in_the_answer_s_schema(flight: Flight, server: Http) -> None:
    """ADBC shows neither app_metadata nor trailers: the answer's schema metadata carries them (the keys the
    HTTP face's Arrow answers use)."""
    _, _, body = server.sql(SCAN)
    with flight.adbc() as con, con.cursor() as cur:
        cur.execute(SCAN)
        meta = cur.fetch_arrow_table().schema.metadata
    assert json.loads(meta[b"iqgate.position"]) == body["position"]
    assert json.loads(meta[b"iqgate.partitions"]) == body["partitions"]


def test_a_position_bound_as_a_header_and_as_a_session_setting(flight: Flight, shop: Shop) -> None:
    raw = flight.client()
    reached = json.dumps(shop.position.to_json_map())
    ahead = json.dumps({"orders": {"0": shop.position.to_json_map()["orders"]["0"] + 1}})
    try:
        assert raw.sql(LOOKUP, {"x-iq-position": reached})[1].num_rows == 1
        with pytest.raises(fl.FlightUnavailableError, match="NOT_UP_TO_BOUND"):
            raw.sql(LOOKUP, {"x-iq-position": ahead})
        started = time.monotonic()
        with pytest.raises(fl.FlightUnavailableError, match="NOT_UP_TO_BOUND"):
            raw.sql(LOOKUP, {"x-iq-position": ahead, "x-iq-wait-ms": "300"})
        assert time.monotonic() - started >= 0.25  # it waited for the bound before answering
    finally:
        raw.close()
    import adbc_driver_manager

    with flight.adbc() as con, con.cursor() as cur:
        cur.execute(f"SET position_bound = '{ahead}'")
        with pytest.raises(adbc_driver_manager.OperationalError, match="NOT_UP_TO_BOUND"):
            cur.execute(LOOKUP)
        cur.execute("RESET position_bound")
        cur.execute(LOOKUP)
        assert len(cur.fetchall()) == 1
        # a call header through ADBC's own option for it
        cur.adbc_statement.set_options(**{"adbc.flight.sql.rpc.call_header.x-iq-position": ahead})
        with pytest.raises(adbc_driver_manager.OperationalError, match="NOT_UP_TO_BOUND"):
            cur.execute(SCAN)


@pytest.fixture()
def growing(tmp_path: Path) -> Iterator[tuple[StreamsApp, Gateway]]:
    app = StreamsApp(StoreTopology((REVENUE,)), application_id="flight-wait", state_dir=str(tmp_path / "state"))
    app.start()
    app.writer("revenue").write_batch(0, [Change("c01", (1.0, 1))], Position.from_map({"orders": {0: 0}}))
    gw = Gateway(app)
    yield app, gw
    gw.close()
    app.close()


def test_a_reader_waits_for_its_own_write(growing: tuple[StreamsApp, Gateway]) -> None:
    """Read-your-writes: the bound names the offset just appended; the answer comes once the store has it."""
    app, gw = growing
    with start_flight(gw) as handle:
        raw = Raw(fl.FlightClient(handle.location), None)
        timer = threading.Timer(0.4, lambda: app.writer("revenue").write_batch(
            1, [Change("c01", (5.0, 2))], Position.from_map({"orders": {0: 1}})))
        timer.start()
        try:
            meta, table = raw.sql("SELECT revenue, orders FROM revenue WHERE customer = 'c01'",
                                  {"x-iq-position": '{"orders": {"0": 1}}', "x-iq-wait-ms": "10000"})
        finally:
            timer.join()
            raw.close()
        assert table.to_pylist() == [{"revenue": 5.0, "orders": 2}]
        assert meta["position"] == {"orders": {"0": 1}}


def test_partial_answers_as_a_header_and_a_session_setting(half_gw: Gateway, shop: Shop) -> None:
    """Partitions 2 and 3 are not hosted here: an error by default, the rest with their failures when partial."""
    with start_flight(half_gw) as handle:
        raw = Raw(fl.FlightClient(handle.location), None)
        try:
            with pytest.raises(fl.FlightUnavailableError, match="^PARTITION_FAILURE: .*NOT_PRESENT"):
                raw.sql(SCAN)
            meta, table = raw.sql(SCAN, {"x-iq-partial": "true"})
            failed = sorted(p["partition"] for p in meta["partitions"] if p["failure_reason"] == "NOT_PRESENT")
            assert failed == [2, 3]
            assert 0 < table.num_rows < len(shop.revenue)
            session = raw.session()
            session.sql("SET partial_results = true")
            assert session.sql(SCAN)[1].equals(table)
            with pytest.raises(pa.ArrowInvalid, match="^SESSION_REQUIRED: "):  # no session: SET would be lost
                raw.sql("SET partial_results = true")
        finally:
            raw.close()


def test_settings_as_headers_apply_to_one_call(flight: Flight) -> None:
    session = flight.client().session()
    try:
        with pytest.raises(pa.ArrowInvalid, match="TABLE_SCAN_DISABLED"):
            session.sql(SCAN, {"x-iq-setting-table_scans": "false"})
        assert session.sql(SCAN)[1].num_rows > 0  # the next call is back to the session's own settings
        # a SET sent with a header overlay still sets the session (and not the overlay)
        session.sql("SET max_rows = 5", {"x-iq-setting-table_scans": "false"})
        with pytest.raises(pa.ArrowInvalid, match="ROW_LIMIT_EXCEEDED"):
            session.sql(SCAN)
        session.sql("RESET max_rows")
        assert session.sql(SCAN)[1].num_rows > 5
    finally:
        session.close()


def test_an_idle_session_expires_with_a_clear_error(gw: Gateway) -> None:
    with start_flight(gw, session_idle_s=0.3) as handle:
        session = Raw(fl.FlightClient(handle.location), None).session()
        try:
            session.sql("SET partial_results = true")
            assert handle.stats()["sessions"] == 1
            time.sleep(0.5)
            with pytest.raises(fl.FlightUnauthenticatedError, match="^SESSION_EXPIRED: "):
                session.sql(LOOKUP)
            assert handle.stats()["sessions"] == 0
        finally:
            session.close()
