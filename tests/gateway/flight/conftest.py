"""The Flight SQL port over the no-Spark shop (every store kind), with a token, beside HTTP on the same Gateway.

Answers through Flight clients (the real ADBC Flight SQL driver, pyarrow's
FlightClient) are compared with the same statement over HTTP (the ``server``
fixture of tests/gateway) or with the rows written (``shop``), never with
values typed in by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from gateway.engine import Gateway
from gateway.flight import FlightHandle, start_flight
from gateway.flight import protocol as proto

TOKEN = "flight-s3cret token"


@dataclass
class Flight:
    """A running port and the ways the tests reach it."""

    handle: FlightHandle
    token: str | None

    @property
    def location(self) -> str:
        return self.handle.location

    def adbc(self, *, autocommit: bool = True, db_kwargs: dict[str, str] | None = None, **kw: Any) -> Any:
        """An ADBC DB-API connection, authenticated with basic auth (the Flight handshake)."""
        import adbc_driver_flightsql.dbapi as dbapi

        kwargs = {"adbc.flight.sql.rpc.timeout_seconds.connect": "10"}
        if self.token is not None:
            kwargs.update(username="flight-tests", password=self.token)
        kwargs.update(db_kwargs or {})
        return dbapi.connect(self.location, db_kwargs=kwargs, autocommit=autocommit, **kw)

    def client(self, **kw: Any) -> Raw:
        return Raw(fl.FlightClient(self.location, **kw), self.token)


class Trailers(fl.ClientMiddlewareFactory):
    """Keeps the headers and trailers of every call a FlightClient makes (the last call's win)."""

    def __init__(self) -> None:
        self.received: dict[str, list[str]] = {}

    def start_call(self, info: Any) -> fl.ClientMiddleware:
        factory = self

        class _Keep(fl.ClientMiddleware):
            def received_headers(self, headers: dict[str, list[Any]]) -> None:
                for k, v in headers.items():
                    factory.received[k] = [x.decode() if isinstance(x, bytes) else x for x in v]

        return _Keep()


class Raw:
    """pyarrow's FlightClient with the Flight SQL messages built here (what a client library would do)."""

    def __init__(self, client: fl.FlightClient, token: str | None, headers: list[tuple[bytes, bytes]] | None = None):
        self.client = client
        self.token = token
        self.headers = headers if headers is not None else (
            [] if token is None else [(b"authorization", f"Bearer {token}".encode())])

    def options(self, headers: dict[str, str] | None = None, timeout: float = 30.0) -> fl.FlightCallOptions:
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        return fl.FlightCallOptions(headers=self.headers + extra, timeout=timeout)

    def session(self) -> Raw:
        """The same client in a session of its own (basic auth's handshake gives the session token)."""
        pair = self.client.authenticate_basic_token("raw", self.token or "")
        return Raw(self.client, self.token, [pair])

    @staticmethod
    def command(name: str, **fields: Any) -> fl.FlightDescriptor:
        return fl.FlightDescriptor.for_command(proto.pack(proto.message(name, **fields)))

    def info(self, name: str, headers: dict[str, str] | None = None, **fields: Any) -> fl.FlightInfo:
        return self.client.get_flight_info(self.command(name, **fields), self.options(headers))

    def fetch(self, name: str, headers: dict[str, str] | None = None, **fields: Any) -> tuple[fl.FlightInfo, pa.Table]:
        info = self.info(name, headers, **fields)
        table = self.client.do_get(info.endpoints[0].ticket, self.options(headers)).read_all()
        assert table.schema.equals(info.schema), (table.schema, info.schema)
        return info, table

    def sql(self, query: str, headers: dict[str, str] | None = None) -> tuple[dict[str, Any], pa.Table]:
        info, table = self.fetch("CommandStatementQuery", headers, query=query)
        return json.loads(info.app_metadata), table

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def flight(gw: Gateway) -> Iterator[Flight]:
    handle = start_flight(gw, token=TOKEN)
    try:
        yield Flight(handle, TOKEN)
    finally:
        handle.close()


@pytest.fixture(scope="module")
def raw(flight: Flight) -> Iterator[Raw]:
    client = flight.client()
    yield client
    client.close()
