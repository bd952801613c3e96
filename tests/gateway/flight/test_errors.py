"""Errors over Flight SQL: the gRPC status a client can act on, ``CODE: message (line L, column C)``, the
whole error as JSON in the ``x-iq-error`` trailer, and never a server traceback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from google.protobuf import any_pb2

from gateway import GatewayConfig
from gateway.engine import Gateway
from gateway.flight import protocol as proto
from gateway.flight import start_flight
from stores.app.streams import StreamsApp
from tests.gateway.flight.conftest import TOKEN, Flight, Raw, Trailers

HEAVY = "SELECT count(*) FROM range(100000000000) a"


@pytest.fixture()
def traced(flight: Flight) -> Iterator[tuple[Raw, Trailers]]:
    """A client that keeps what the server sent in headers and trailers."""
    keep = Trailers()
    raw = Raw(fl.FlightClient(flight.location, middleware=[keep]), TOKEN)
    yield raw, keep
    raw.close()


def _error(keep: Trailers) -> dict[str, Any]:
    return json.loads(keep.received["x-iq-error"][-1])


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text and ".py" not in text, text


def test_a_sql_error_is_invalid_argument_with_line_and_column(traced: tuple[Raw, Trailers]) -> None:
    raw, keep = traced
    with pytest.raises(pa.ArrowInvalid) as info:
        raw.sql("SELECT customer\nFROM revenue WHERE nope = 1")
    message = str(info.value)
    assert message.startswith("UNKNOWN_COLUMN: ") and "(line 2, column " in message
    _no_traceback(message)
    err = _error(keep)
    assert err["code"] == "UNKNOWN_COLUMN" and err["line"] == 2 and err["col"] > 0 and err["retryable"] is False
    with pytest.raises(pa.ArrowInvalid, match=r"^UNKNOWN_STORE: .*\(line 1, column 15\)"):
        raw.sql("SELECT * FROM nowhere")
    assert _error(keep)["code"] == "UNKNOWN_STORE"


def test_adbc_sees_the_code_position_and_details(flight: Flight) -> None:
    import adbc_driver_manager

    with flight.adbc() as con, con.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
            cur.execute("SELEC 1")
        assert "INVALID_ARGUMENT" in str(info.value) and "SQL_SYNTAX_ERROR" in str(info.value)
        assert "(line 1, column" in str(info.value)
        _no_traceback(str(info.value))
        details = {bytes(k).decode(): bytes(v) for k, v in info.value.details}
        assert json.loads(details["x-iq-error"])["code"] == "SQL_SYNTAX_ERROR"
        cur.execute("SELECT 1 AS ok")  # the connection goes on
        assert cur.fetchall() == [(1,)]


def test_not_up_to_bound_is_unavailable_and_retryable(traced: tuple[Raw, Trailers]) -> None:
    raw, keep = traced
    far = json.dumps({"orders": {"0": 10**9}})
    with pytest.raises(fl.FlightUnavailableError, match="^NOT_UP_TO_BOUND: ") as info:
        raw.sql("SELECT * FROM revenue WHERE customer = 'c01'", {"x-iq-position": far})
    _no_traceback(str(info.value))
    err = _error(keep)
    assert err["code"] == "NOT_UP_TO_BOUND" and err["retryable"] is True and err["partitions"]


def test_writes_and_updates_are_refused_as_read_only(flight: Flight, traced: tuple[Raw, Trailers]) -> None:
    import adbc_driver_manager

    raw, keep = traced
    session = raw.session()

    def update(query: str) -> int:
        writer, meta = session.client.do_put(raw.command("CommandStatementUpdate", query=query),
                                             pa.schema([]), session.options())
        writer.done_writing()
        ack = meta.read()
        writer.close()
        return proto.unpack("DoPutUpdateResult", ack.to_pybytes()).record_count

    with pytest.raises(pa.ArrowInvalid, match=r"^READ_ONLY: .*got INSERT \(line 1, column 1\)"):
        update("INSERT INTO revenue VALUES ('x', 1.0, 1)")
    with pytest.raises(pa.ArrowInvalid, match="^READ_ONLY: .*SET or RESET"):
        update("SELECT * FROM revenue")
    assert update("SET partial_results = true") == 0  # the one update there is: a session setting
    with pytest.raises(pa.ArrowInvalid, match="^READ_ONLY"):
        raw.sql("DELETE FROM revenue")
    with flight.adbc() as con, con.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="READ_ONLY"):
            cur.adbc_ingest("revenue", pa.table({"customer": ["x"], "revenue": [1.0], "orders": [1]}),
                            mode="append")


def test_transactions_and_substrait_are_unimplemented(raw: Raw) -> None:
    with pytest.raises(pa.ArrowNotImplementedError, match="^NOT_SUPPORTED: .*transactions"):
        list(raw.client.do_action(("BeginTransaction", b""), raw.options()))
    with pytest.raises(pa.ArrowNotImplementedError, match="^NOT_SUPPORTED: .*transaction"):
        raw.fetch("CommandStatementQuery", query="SELECT 1", transaction_id=b"t1")
    with pytest.raises(pa.ArrowNotImplementedError, match="^UNKNOWN_ACTION: "):
        list(raw.client.do_action(("Frobnicate", b""), raw.options()))
    plan = fl.FlightDescriptor.for_command(any_pb2.Any(
        type_url="type.googleapis.com/arrow.flight.protocol.sql.CommandStatementSubstraitPlan").SerializeToString())
    with pytest.raises(pa.ArrowNotImplementedError, match="Substrait"):
        raw.client.get_flight_info(plan, raw.options())


@pytest.mark.parametrize("descriptor, why", [
    (fl.FlightDescriptor.for_path("revenue"), "^NOT_A_COMMAND: "),
    (fl.FlightDescriptor.for_command(b"\xff\xfe not protobuf"), "^BAD_COMMAND: "),
    (fl.FlightDescriptor.for_command(proto.pack(proto.message("DoPutUpdateResult", record_count=1))), "^BAD_COMMAND: "),
    (fl.FlightDescriptor.for_command(proto.pack(proto.message("CommandStatementUpdate", query="SET x = 1"))),
     "^BAD_COMMAND: .*goes with DoPut"),
])
def test_a_descriptor_that_is_not_a_query_is_named(raw: Raw, descriptor: fl.FlightDescriptor, why: str) -> None:
    with pytest.raises(pa.ArrowInvalid, match=why) as info:
        raw.client.get_flight_info(descriptor, raw.options())
    _no_traceback(str(info.value))


def test_unknown_tickets_and_handles_are_not_found(flight: Flight, raw: Raw) -> None:
    with pytest.raises(pa.ArrowKeyError, match="^UNKNOWN_TICKET: "):
        raw.client.do_get(fl.Ticket(proto.pack(proto.message("TicketStatementQuery", statement_handle=b"x" * 16))),
                          raw.options()).read_all()
    with pytest.raises(pa.ArrowInvalid, match="^UNKNOWN_TICKET: "):
        raw.client.do_get(fl.Ticket(b"garbage"), raw.options()).read_all()
    info = raw.info("CommandStatementQuery", query="SELECT 1 AS x")
    other = Raw(raw.client, TOKEN, [raw.client.authenticate_basic_token("someone else", TOKEN)])
    with pytest.raises(pa.ArrowKeyError, match="^UNKNOWN_TICKET: "):  # a ticket is its caller's only
        other.client.do_get(info.endpoints[0].ticket, other.options()).read_all()
    assert raw.client.do_get(info.endpoints[0].ticket, raw.options()).read_all().to_pylist() == [{"x": 1}]
    with pytest.raises(pa.ArrowKeyError, match="^UNKNOWN_TICKET: "):  # and good for one DoGet
        raw.client.do_get(info.endpoints[0].ticket, raw.options()).read_all()
    with pytest.raises(pa.ArrowKeyError, match="^UNKNOWN_PREPARED_STATEMENT: "):
        raw.fetch("CommandPreparedStatementQuery", prepared_statement_handle=b"nope")


def test_parameters_that_do_not_fit_the_statement(raw: Raw) -> None:
    session = raw.session()
    created = list(session.client.do_action(("CreatePreparedStatement", proto.pack(proto.message(
        "ActionCreatePreparedStatementRequest", query="SELECT * FROM revenue WHERE customer = ?"))),
        session.options()))
    handle = proto.unpack("ActionCreatePreparedStatementResult",
                          proto.command_name(created[0].body.to_pybytes())[1]).prepared_statement_handle
    descriptor = raw.command("CommandPreparedStatementQuery", prepared_statement_handle=handle)
    with pytest.raises(pa.ArrowInvalid, match="^PARAMETER_ERROR: .*none are bound"):
        session.client.get_flight_info(descriptor, session.options())
    writer, _ = session.client.do_put(descriptor, pa.schema([("a", pa.string()), ("b", pa.string())]),
                                      session.options())
    writer.write_batch(pa.record_batch([pa.array(["c01"]), pa.array(["c02"])], names=["a", "b"]))
    with pytest.raises(pa.ArrowInvalid, match="^PARAMETER_ERROR: the statement has 1 parameter"):
        writer.close()
    with pytest.raises(pa.ArrowInvalid, match="^SQL_SYNTAX_ERROR"):
        list(session.client.do_action(("CreatePreparedStatement", proto.pack(proto.message(
            "ActionCreatePreparedStatementRequest", query="SELEC 1"))), session.options()))


def test_call_headers_are_checked(traced: tuple[Raw, Trailers]) -> None:
    raw, keep = traced
    for headers, why in (({"x-iq-postion": "{}"}, "unknown header x-iq-postion"),
                         ({"x-iq-wait-ms": "soon"}, "x-iq-wait-ms must be a non-negative integer"),
                         ({"x-iq-partial": "maybe"}, "x-iq-partial must be true or false"),
                         ({"x-iq-position": "{not json"}, "header x-iq-position: "),
                         ({"x-iq-setting-nope": "1"}, "header x-iq-setting-nope: unknown setting")):
        with pytest.raises(pa.ArrowInvalid, match=why):
            raw.sql("SELECT 1", headers)
        assert _error(keep)["code"] in ("BAD_REQUEST",)


def test_budgets_row_limit_statement_timeout(traced: tuple[Raw, Trailers]) -> None:
    raw, keep = traced
    with pytest.raises(pa.ArrowInvalid, match="^ROW_LIMIT_EXCEEDED: "):
        raw.sql("SELECT * FROM revenue", {"x-iq-max-rows": "3"})
    started = time.monotonic()
    with pytest.raises(fl.FlightTimedOutError, match="^STATEMENT_TIMEOUT: "):
        raw.sql(HEAVY, {"x-iq-setting-statement_timeout_ms": "300"})
    assert time.monotonic() - started < 20
    assert _error(keep)["code"] == "STATEMENT_TIMEOUT"
    # out of time while its batches stream: the stream ends with the same status, not as a complete answer
    with pytest.raises(fl.FlightTimedOutError, match="^STATEMENT_TIMEOUT: "):
        raw.sql("SELECT md5(repeat(range::VARCHAR, 2000)) AS h FROM range(100000000)",
                {"x-iq-setting-statement_timeout_ms": "1000"})


def test_an_answer_past_the_response_budget_fails_its_stream(shop_app: StreamsApp) -> None:
    """Found only while streaming: the DoGet ends with the error after the batches already sent, never as an
    answer that looks complete."""
    gw = Gateway(shop_app, config=GatewayConfig(max_response_bytes=20_000, scan_batch_rows=64))
    try:
        with start_flight(gw) as handle:
            raw = Raw(fl.FlightClient(handle.location), None)
            info = raw.info("CommandStatementQuery", query="SELECT a.customer, b.customer, c.customer FROM revenue a, revenue b, revenue c")
            reader = raw.client.do_get(info.endpoints[0].ticket, raw.options())
            received = 0
            with pytest.raises(pa.ArrowInvalid, match="^RESPONSE_TOO_LARGE: "):
                for _ in range(100_000):
                    received += reader.read_chunk().data.num_rows
            assert 0 < received < 25 ** 3
            raw.close()
    finally:
        gw.close()
    gw = Gateway(shop_app, config=GatewayConfig(max_response_bytes=300))
    try:
        with start_flight(gw) as handle:  # an answer whole in hand (one batch): refused before any of it goes
            raw = Raw(fl.FlightClient(handle.location), None)
            small = raw.info("CommandStatementQuery", query="SELECT * FROM revenue")
            with pytest.raises(pa.ArrowInvalid, match="^RESPONSE_TOO_LARGE: "):
                raw.client.do_get(small.endpoints[0].ticket, raw.options()).read_all()
            raw.close()
    finally:
        gw.close()


def test_the_face_s_own_bounds(gw: Gateway) -> None:
    with pytest.raises(TypeError, match="unknown Flight limit.*max_pendng"):
        start_flight(gw, max_pendng=1)
    with pytest.raises(ValueError, match="max_pending must be a positive number"):
        start_flight(gw, max_pending=0)
    with start_flight(gw, max_pending=1, ticket_ttl_s=0.3, max_prepared=1, max_sessions=1) as handle:
        raw = Raw(fl.FlightClient(handle.location), None)
        first = raw.info("CommandStatementQuery", query="SELECT 1 AS x")
        with pytest.raises(fl.FlightUnavailableError, match="^TOO_MANY_PENDING: "):
            raw.info("CommandStatementQuery", query="SELECT 2 AS x")
        time.sleep(0.5)
        with pytest.raises(pa.ArrowKeyError, match="^UNKNOWN_TICKET: .*within 0.3 s"):
            raw.client.do_get(first.endpoints[0].ticket, raw.options()).read_all()
        assert raw.sql("SELECT 3 AS x")[1].to_pylist() == [{"x": 3}]  # the expired one made room
        a, b = raw.session(), raw.session()
        a.sql("SET partial_results = true")
        with pytest.raises(fl.FlightUnavailableError, match="^TOO_MANY_SESSIONS: "):
            b.sql("SET partial_results = true")
        prepare = ("CreatePreparedStatement", proto.pack(proto.message("ActionCreatePreparedStatementRequest",
                                                                       query="SELECT 1")))
        list(a.client.do_action(prepare, a.options()))
        with pytest.raises(fl.FlightUnavailableError, match="^TOO_MANY_PREPARED: "):
            list(a.client.do_action(prepare, a.options()))
        raw.close()


def test_requests_past_the_size_budget(raw: Raw, gw: Gateway) -> None:
    big = "SELECT 1 AS x" + " " * gw.config.max_request_bytes
    with pytest.raises(pa.ArrowInvalid, match="^REQUEST_TOO_LARGE: the command has"):
        raw.sql(big)
    session = raw.session()
    created = list(session.client.do_action(("CreatePreparedStatement", proto.pack(proto.message(
        "ActionCreatePreparedStatementRequest", query="SELECT ? AS v"))), session.options()))
    handle = proto.unpack("ActionCreatePreparedStatementResult",
                          proto.command_name(created[0].body.to_pybytes())[1]).prepared_statement_handle
    descriptor = raw.command("CommandPreparedStatementQuery", prepared_statement_handle=handle)
    schema = pa.schema([("v", pa.string())])
    for batch, why in ((pa.record_batch([pa.array(["x" * (gw.config.max_request_bytes + 1)])], schema=schema),
                        "exceed the request limit"),
                       (pa.record_batch([pa.array(["x"] * 10_001)], schema=schema), "more than 10000 parameter rows")):
        writer, _ = session.client.do_put(descriptor, schema, session.options())
        writer.write_batch(batch)
        with pytest.raises(pa.ArrowInvalid, match=f"^REQUEST_TOO_LARGE: .*{why}"):
            writer.close()


def test_a_failure_of_the_server_itself_is_internal_and_logged(shop_app: StreamsApp,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A gateway closed under the port (a shutdown racing a call): the client reads INTERNAL with the exception's
    type and message; the operator's log has the traceback."""
    gw = Gateway(shop_app)
    with start_flight(gw) as handle:
        gw.close()
        raw = Raw(fl.FlightClient(handle.location), None)
        with caplog.at_level("ERROR", logger="iqgate.flight"):
            with pytest.raises(fl.FlightInternalError, match="^INTERNAL: ConnectionException") as info:
                raw.sql("SELECT count(*) FROM revenue")
        _no_traceback(str(info.value))
        assert any(r.exc_info for r in caplog.records if r.name == "iqgate.flight")
        raw.close()


def test_a_statement_over_its_memory_budget(shop_app: StreamsApp) -> None:
    gw = Gateway(shop_app, config=GatewayConfig(max_memory_bytes=16 * 2**20))
    try:
        with start_flight(gw) as handle:
            raw = Raw(fl.FlightClient(handle.location), None)
            with pytest.raises(pa.ArrowInvalid, match="^OUT_OF_MEMORY: "):
                raw.sql("SELECT count(DISTINCT a.customer || b.customer || c.customer || d.customer) "
                        "FROM revenue a, revenue b, revenue c, revenue d")
            # the port answers again once DuckDB gave the memory back (it flushes within seconds): bounded retry
            deadline = time.monotonic() + 15
            while True:
                try:
                    assert raw.sql("SELECT count(*) AS n FROM revenue")[1].column("n")[0].as_py() > 0
                    break
                except pa.ArrowInvalid:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            raw.close()
    finally:
        gw.close()


def test_every_gateway_error_has_its_status() -> None:
    """The whole table, class by class (the calls above reach the common ones over the wire)."""
    import gateway.engine.errors as ge
    from gateway.flight.errors import InvalidArgument, flight_error

    expected = {
        fl.FlightUnavailableError: {"NOT_UP_TO_BOUND", "NO_COMMON_POSITION", "STREAMS_NOT_STARTED", "STREAMS_REBALANCING",
                                    "STATE_STORE_MIGRATED", "COLUMN_NOT_YET_AVAILABLE", "STREAMS_STOPPED",
                                    "STATE_STORE_NOT_AVAILABLE", "PARTITION_FAILURE", "TOO_MANY_STATEMENTS",
                                    "SUBSCRIPTION_UNAVAILABLE"},  # a live answer's default code (retryable)
        fl.FlightTimedOutError: {"STATEMENT_TIMEOUT"},
        fl.FlightCancelledError: {"STATEMENT_CANCELLED"},
        fl.FlightUnauthenticatedError: {"UNAUTHORIZED"},
        fl.FlightUnauthorizedError: {"FORBIDDEN"},
        fl.FlightInternalError: {"INTERNAL"},
    }
    classes = [c for c in vars(ge).values() if isinstance(c, type) and issubclass(c, ge.GatewayError)
               and c is not ge.GatewayError]
    assert len(classes) > 20
    for cls in classes:
        err = flight_error(cls("m"))
        want = next((status for status, codes in expected.items() if cls.code in codes), InvalidArgument)
        assert type(err) is want, (cls.code, type(err))
        assert str(err).startswith(f"{cls.code}: m")
