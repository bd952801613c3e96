"""The Flight SQL port against the in-process Arrow path and the PG port, in the same run.

One process serves one Gateway over Flight SQL and over the PostgreSQL
protocol; the clients run in a child process (so their work is not the
server's GIL), each as a user would run it:

- ``SELECT *`` of N keys into a pyarrow Table through the ADBC Flight SQL
  driver, against ``Gateway.sql(…, arrow=True).to_arrow()`` in the server's
  own process (goal >= 0.8x its rows/s: the wire costs little) and against
  the PG port read with psycopg's binary cursor into a pandas DataFrame
  (goal >= 3x).
- a prepared point lookup's p50 through ADBC (the DB-API reuses the prepared
  statement: bind by DoPut, GetFlightInfo, DoGet) against psycopg's prepared
  lookup on the PG port (goal <= 1x). Beside it, what the driver and the
  protocol cost whatever the server does: the same lookups through ADBC to a
  pyarrow Flight SQL server that answers each call with a constant, and the
  three calls from pyarrow's client to iqgate and to that server (the floor
  any server built on pyarrow's Flight reaches on this machine).

Reads alternate between the faces, best of three each, so a burst of other
load on the machine hits all of them alike.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from benchmarks.bench_gateway import _setup
from benchmarks.common import Figure, percentile, scratch_dir, time_calls

__all__ = ["run"]

SCAN = "SELECT * FROM bench_kv"
LOOKUP = "SELECT name, amount FROM bench_kv WHERE id = ?"


def _adbc_scan(location: str, n_keys: int) -> float:
    """In the child: seconds to read the whole store into a pyarrow Table through ADBC."""
    import adbc_driver_flightsql.dbapi as dbapi

    with dbapi.connect(location, autocommit=True) as con, con.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(SCAN)
        table = cur.fetch_arrow_table()
        elapsed = time.perf_counter() - t0
    assert table.num_rows == n_keys, table.num_rows
    return elapsed


def _pg_scan(port: int, n_keys: int) -> float:
    """In the child: seconds to read the whole store into a pandas DataFrame with psycopg's binary cursor."""
    import pandas as pd
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="iqgate", autocommit=True) as con:
        t0 = time.perf_counter()
        with con.cursor(binary=True) as cur:
            cur.execute(SCAN)
            frame = pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])
        elapsed = time.perf_counter() - t0
    assert len(frame) == n_keys, len(frame)
    return elapsed


def _adbc_lookups(location: str, n_keys: int, n: int, max_s: float, check: bool = True) -> list[float]:
    import adbc_driver_flightsql.dbapi as dbapi

    keys = iter(range(0, 10**9, 7919))
    with dbapi.connect(location, autocommit=True) as con, con.cursor() as cur:
        def lookup() -> None:
            cur.execute(LOOKUP, parameters=[next(keys) % n_keys])
            rows = cur.fetchall()
            assert len(rows) == 1 or not check

        return time_calls(lookup, n, warmup=50, max_seconds=max_s)


def _pg_lookups(port: int, n_keys: int, n: int, max_s: float) -> list[float]:
    import psycopg

    keys = iter(range(0, 10**9, 7919))
    with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="iqgate", autocommit=True,
                         prepare_threshold=0) as con:
        def lookup() -> None:
            assert con.execute(LOOKUP.replace("?", "%s"), [next(keys) % n_keys]).fetchone()

        return time_calls(lookup, n, warmup=50, max_seconds=max_s)


def _three_calls(port: int, n: int, max_s: float, handle: bytes | None) -> list[float]:
    """DoPut of one parameter, GetFlightInfo, DoGet from pyarrow's client: to iqgate's prepared lookup
    (``handle``), or to the constant server (None)."""
    import pyarrow as pa
    import pyarrow.flight as fl

    from gateway.flight import protocol

    client = fl.FlightClient(f"grpc://127.0.0.1:{port}")
    options = fl.FlightCallOptions()
    if handle is None:
        descriptor = fl.FlightDescriptor.for_command(b"lookup")
    else:
        options = fl.FlightCallOptions(headers=[client.authenticate_basic_token("bench", "")])
        created = list(client.do_action(("CreatePreparedStatement", protocol.pack(protocol.message(
            "ActionCreatePreparedStatementRequest", query=LOOKUP))), options))
        handle = protocol.unpack("ActionCreatePreparedStatementResult", protocol.command_name(
            created[0].body.to_pybytes())[1]).prepared_statement_handle
        descriptor = fl.FlightDescriptor.for_command(protocol.pack(protocol.message(
            "CommandPreparedStatementQuery", prepared_statement_handle=handle)))
    schema = pa.schema([("id", pa.int64())])
    keys = iter(range(0, 10**9, 7919))

    def lookup() -> None:
        writer, meta = client.do_put(descriptor, schema, options)
        writer.write_batch(pa.record_batch([pa.array([next(keys) % 1000])], schema=schema))
        writer.done_writing()
        meta.read()
        writer.close()
        info = client.get_flight_info(descriptor, options)
        client.do_get(info.endpoints[0].ticket, options).read_all()

    try:
        return time_calls(lookup, 1000, warmup=50, max_seconds=max_s)
    finally:
        client.close()


class _Constant:
    """A Flight SQL server on pyarrow's Flight whose every answer is a constant one-row table: what the
    protocol and the client cost whatever the server does (it prepares, binds and answers, reading nothing)."""

    def __new__(cls) -> object:
        import pyarrow as pa
        import pyarrow.flight as fl

        from gateway.flight import protocol
        from gateway.flight.sqlinfo import sql_info, sql_info_table

        row = pa.table({"name": ["n1"], "amount": [0.25]})
        info = sql_info_table(sql_info(pa.__version__, 0), [8])  # what ADBC asks at connect
        prepared = protocol.pack(protocol.message(
            "ActionCreatePreparedStatementResult", prepared_statement_handle=b"h",
            dataset_schema=row.schema.serialize().to_pybytes(),
            parameter_schema=pa.schema([("id", pa.int64())]).serialize().to_pybytes()))
        bound = protocol.message("DoPutPreparedStatementResult", prepared_statement_handle=b"h").SerializeToString()

        class Server(fl.FlightServerBase):
            def get_flight_info(self, context: object, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
                answer = info if b"CommandGetSqlInfo" in descriptor.command else row
                ticket = b"info" if answer is info else b"row"
                return fl.FlightInfo(answer.schema, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1)

            def do_get(self, context: object, ticket: fl.Ticket) -> fl.FlightDataStream:
                return fl.RecordBatchStream(info if ticket.ticket == b"info" else row)

            def do_put(self, context: object, descriptor: object, reader: object, writer: object) -> None:
                reader.read_all()  # type: ignore[attr-defined]
                writer.write(pa.py_buffer(bound))  # type: ignore[attr-defined]

            def do_action(self, context: object, action: fl.Action) -> list[bytes]:
                return [prepared] if action.type == "CreatePreparedStatement" else []

        return Server("grpc://127.0.0.1:0")


def _in_process(gw: object, n_keys: int) -> float:
    t0 = time.perf_counter()
    result = gw.sql(SCAN, arrow=True)  # type: ignore[attr-defined]
    try:
        table = result.to_arrow()
    finally:
        result.close()
    elapsed = time.perf_counter() - t0
    assert table.num_rows == n_keys
    return elapsed


def run(quick: bool) -> list[Figure]:
    from gateway.flight import start_flight
    from gateway.pg import PgServer
    from gateway.serving.http_server import tune_process_for_serving

    n_keys, n_calls, max_s = (200_000, 300, 8.0) if quick else (1_000_000, 3_000, 30.0)
    tmp: Path = scratch_dir("iqgate-bench-flight-")
    app, gw = _setup(tmp, n_keys)
    try:
        tune_process_for_serving()
        with start_flight(gw) as flight, PgServer(gw) as pg:
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(1) as pool:
                pool.apply(_adbc_scan, (flight.location, n_keys))  # warm every path once
                pool.apply(_pg_scan, (pg.port, n_keys))
                _in_process(gw, n_keys)
                runs: dict[str, list[float]] = {"adbc": [], "pg": [], "arrow": []}
                for _ in range(3):
                    runs["adbc"].append(pool.apply(_adbc_scan, (flight.location, n_keys)))
                    runs["arrow"].append(_in_process(gw, n_keys))
                    runs["pg"].append(pool.apply(_pg_scan, (pg.port, n_keys)))
                adbc_lat = pool.apply(_adbc_lookups, (flight.location, n_keys, n_calls, max_s))
                pg_lat = pool.apply(_pg_lookups, (pg.port, n_keys, n_calls, max_s))
                ours_lat = pool.apply(_three_calls, (flight.port, n_calls, max_s, b""))
                constant = _Constant()
                try:
                    at = f"grpc://127.0.0.1:{constant.port}"  # type: ignore[attr-defined]
                    floor_lat = pool.apply(_three_calls, (constant.port, n_calls, max_s, None))  # type: ignore[attr-defined]
                    adbc_floor = pool.apply(_adbc_lookups, (at, n_keys, n_calls, max_s, False))
                finally:
                    constant.shutdown()  # type: ignore[attr-defined]
    finally:
        gw.close()
        app.close()
    adbc, arrow, pgs = (n_keys / min(runs[k]) for k in ("adbc", "arrow", "pg"))
    note = f"{n_keys:,} keys (BIGINT, VARCHAR, DOUBLE), best of 3; client in a child process"
    a50, p50 = percentile(adbc_lat, 50) * 1e3, percentile(pg_lat, 50) * 1e3
    return [
        Figure("Flight SQL SELECT * into Arrow (ADBC)", adbc, "rows/s", arrow,
               "Gateway.sql(arrow=True).to_arrow() in-process", ">= 0.8x", adbc >= 0.8 * arrow, note),
        Figure("Flight SQL SELECT * vs the PG port", adbc, "rows/s", pgs, "psycopg binary cursor -> pandas",
               ">= 3x", adbc >= 3 * pgs, note),
        Figure("Flight SQL prepared point lookup p50 (ADBC)", a50, "ms", p50, "psycopg prepared lookup p50, PG port",
               "<= 1x", a50 <= p50, f"{len(adbc_lat)} / {len(pg_lat)} lookups, 1 client each"),
        Figure("Flight SQL prepared point lookup p99 (ADBC)", percentile(adbc_lat, 99) * 1e3, "ms",
               percentile(pg_lat, 99) * 1e3, "psycopg p99", "", None),
        Figure("Flight SQL prepared lookup p50, ADBC to a constant server", percentile(adbc_floor, 50) * 1e3, "ms",
               p50, "psycopg prepared lookup p50, PG port", "", None,
               "the driver's and the protocol's own cost: a pyarrow Flight SQL server answering a constant"),
        Figure("Flight SQL prepared lookup p50, pyarrow client", percentile(ours_lat, 50) * 1e3, "ms",
               percentile(floor_lat, 50) * 1e3, "the same 3 calls to the constant server", "", None,
               "DoPut + GetFlightInfo + DoGet without the driver; the baseline is the protocol's floor here"),
    ]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
