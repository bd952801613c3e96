"""A client that goes away cancels its statement (while it runs and while it streams), CancelFlightInfo stops
one, closing the port stops them all, and a million-row answer streams through a worker in bounded memory."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from gateway.engine import Gateway
from gateway.flight import protocol as proto
from gateway.flight import start_flight
from tests.gateway.flight.conftest import Flight, Raw

HEAVY = "SELECT count(*) FROM range(100000000000) a"
STREAM = "SELECT range AS i, range * 2 AS j FROM range(900000)"
ROOT = Path(__file__).resolve().parents[3]


def _cancelled(gw: Gateway) -> int:
    return gw.statements_interrupted.get("cancelled", 0)


def _until(check: object, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_gives_up_cancels_the_running_statement(flight: Flight, raw: Raw, gw: Gateway) -> None:
    before = _cancelled(gw)
    with pytest.raises(fl.FlightTimedOutError):
        raw.client.get_flight_info(raw.command("CommandStatementQuery", query=HEAVY), raw.options(timeout=0.5))
    assert _until(lambda: _cancelled(gw) == before + 1)
    assert raw.sql("SELECT 1 AS x")[1].to_pylist() == [{"x": 1}]  # the port goes on


def test_adbc_cancel(flight: Flight, gw: Gateway) -> None:
    import adbc_driver_manager

    before = _cancelled(gw)
    with flight.adbc() as con, con.cursor() as cur:
        timer = threading.Timer(0.5, cur.adbc_cancel)
        timer.start()
        try:
            with pytest.raises(adbc_driver_manager.OperationalError, match="CANCELLED"):
                cur.execute(HEAVY)
        finally:
            timer.cancel()
        assert _until(lambda: _cancelled(gw) == before + 1)
        cur.execute("SELECT 2 AS x")
        assert cur.fetchall() == [(2,)]


def test_a_reader_that_stops_reading_ends_the_stream(flight: Flight, raw: Raw) -> None:
    info = raw.info("CommandStatementQuery", query=STREAM)
    reader = raw.client.do_get(info.endpoints[0].ticket, raw.options())
    assert reader.read_chunk().data.num_rows > 0
    assert flight.handle.stats()["streaming"] == 1
    reader.cancel()
    assert _until(lambda: flight.handle.stats()["streaming"] == 0)
    for _ in range(5):  # gone before reading anything: the statement ends with the call all the same
        info = raw.info("CommandStatementQuery", query=STREAM)
        raw.client.do_get(info.endpoints[0].ticket, raw.options()).cancel()
    assert _until(lambda: flight.handle.stats()["streaming"] == 0 and flight.handle.stats()["pending"] == 0)


def _cancel_action(raw: Raw, info: fl.FlightInfo, kind: str = "CancelFlightInfo") -> int:
    if kind == "CancelFlightInfo":
        body = proto.message("CancelFlightInfoRequest", info=info.serialize()).SerializeToString()
        result = list(raw.client.do_action((kind, body), raw.options()))
        return proto.unpack("CancelFlightInfoResult", result[0].body.to_pybytes()).status
    body = proto.pack(proto.message("ActionCancelQueryRequest", info=info.serialize()))
    result = list(raw.client.do_action((kind, body), raw.options()))
    return proto.unpack("ActionCancelQueryResult", proto.command_name(result[0].body.to_pybytes())[1]).result


def test_cancel_flight_info_waiting_and_streaming(flight: Flight, raw: Raw) -> None:
    info = raw.info("CommandStatementQuery", query=STREAM)
    assert _cancel_action(raw, info) == 1  # CANCELLED
    with pytest.raises(pa.ArrowKeyError, match="UNKNOWN_TICKET"):
        raw.client.do_get(info.endpoints[0].ticket, raw.options()).read_all()
    assert _cancel_action(raw, info) == 3  # NOT_CANCELLABLE: it is gone
    info = raw.info("CommandStatementQuery", query=STREAM)
    reader = raw.client.do_get(info.endpoints[0].ticket, raw.options())
    reader.read_chunk()
    assert _cancel_action(raw, info, "CancelQuery") == 1
    with pytest.raises(fl.FlightCancelledError, match="STATEMENT_CANCELLED"):
        for _ in range(10_000):
            reader.read_chunk()
    assert _until(lambda: flight.handle.stats()["streaming"] == 0)


def test_closing_the_port_stops_its_statements(gw: Gateway) -> None:
    handle = start_flight(gw)
    raw = Raw(fl.FlightClient(handle.location), None)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            raw.sql(HEAVY)
        except BaseException as exc:  # noqa: BLE001 - the main thread checks it
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    handle.close()
    thread.join(15)
    assert not thread.is_alive() and failed and time.monotonic() - started < 10
    raw.close()


# -- memory --------------------------------------------------------------------------------------------------
ROWS = 1_000_000
_CHILD = r"""
import sys
from gateway.serving.http_server import lean_allocators
lean_allocators()
from gateway.engine import Gateway
from gateway.flight import start_flight
gw = Gateway.open(sys.argv[1])
handle = start_flight(gw)
print(handle.port, flush=True)
sys.stdin.readline()
handle.close()
gw.close()
"""


def _fill(state: Path) -> None:
    """A key-value store of a million keys whose rows are ~125 bytes: the whole answer is ~120 MB of Arrow."""
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
    from stores.engine.change import Change
    from stores.iqv2.position import Position

    spec = StoreSpec("wide", StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT, nullable=False),
                     (Column("name", SqlType.VARCHAR), Column("amount", SqlType.DOUBLE)), partitions=4,
                     source_topics=("wide",))
    app = StreamsApp(StoreTopology([spec]), application_id="flight-memory", state_dir=str(state))
    app.start()
    pad = "x" * 100
    step = 200_000
    for b, lo in enumerate(range(0, ROWS, step)):
        hi = min(ROWS, lo + step)
        app.writer("wide").write_batch(b, [Change(k, (f"{pad}{k}", k * 0.25)) for k in range(lo, hi)],
                                       Position.from_map({"wide": {0: hi - 1}}))
    app.close(30)


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


@pytest.mark.slow
def test_a_million_rows_stream_in_bounded_memory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _fill(state)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(state)], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())  # type: ignore[union-attr]
        raw = Raw(fl.FlightClient(f"grpc://127.0.0.1:{port}"), None)
        assert raw.sql("SELECT * FROM wide WHERE id < 20000")[1].num_rows == 20_000  # warm the path
        before = _kb(child.pid, "VmRSS")
        info = raw.info("CommandStatementQuery", query="SELECT * FROM wide")
        reader = raw.client.do_get(info.endpoints[0].ticket, raw.options(timeout=300))
        rows = size = 0
        for chunk in reader:  # nothing kept
            rows += chunk.data.num_rows
            size += chunk.data.nbytes
        grown_mb = (_kb(child.pid, "VmHWM") - before) / 1024
        raw.close()
        assert rows == ROWS and size > 100 * 2**20  # the answer itself is larger than the budget
        assert grown_mb <= 100, f"the worker grew {grown_mb:.0f} MB streaming {size / 2**20:.0f} MB"
    finally:
        child.stdin.write("\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
