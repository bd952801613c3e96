"""The PG port over the no-Spark shop (every store kind), with a token, beside HTTP on the same Gateway.

Answers through PG clients are compared with the same statement over HTTP
(the ``server`` fixture of tests/gateway) or with the rows written
(``shop``), never with values typed in by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from tests.gateway.gwfixtures import Http

TOKEN = "pg-s3cret token"


@dataclass
class Pg:
    host: str
    port: int
    token: str | None

    def conninfo(self, **extra: Any) -> str:
        parts = {"host": self.host, "port": self.port, "user": "iqgate", "dbname": "iqgate", "connect_timeout": 10}
        if self.token is not None:
            parts["password"] = self.token
        parts.update(extra)
        return " ".join(f"{k}='{str(v)}'" for k, v in parts.items())

    def connect(self, **kw: Any) -> Any:
        import psycopg

        return psycopg.connect(self.conninfo(), **kw)

    def libpq_env(self) -> dict[str, str]:
        env = {"PGHOST": self.host, "PGPORT": str(self.port), "PGUSER": "iqgate", "PGDATABASE": "iqgate",
               "PGCONNECT_TIMEOUT": "10", "PGSSLMODE": "prefer"}
        if self.token is not None:
            env["PGPASSWORD"] = self.token
        return env


@pytest.fixture(scope="module")
def pg_server(gw: Gateway) -> Iterator[PgServer]:
    with PgServer(gw, token=TOKEN, body_timeout_s=5.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def pg(pg_server: PgServer) -> Pg:
    return Pg(pg_server.host, pg_server.port, TOKEN)


def http_rows(server: Http, sql: str, **fields: object) -> list[tuple[object, ...]]:
    """The rows the same statement answers over HTTP (the oracle PG clients are compared with)."""
    status, _, body = server.sql(sql, **fields)
    assert status == 200, body
    return [tuple(r) for r in body["rows"]]


ASYNCPG_DEADLINE_S = 20.0


def asyncpg_run(pg: Pg, body: Callable[[Any], Awaitable[Any]]) -> Any:
    """``body(connection)`` on a fresh asyncpg connection, with a deadline: a hang fails instead of stalling."""
    import asyncpg

    async def main() -> Any:
        con = await asyncpg.connect(host=pg.host, port=pg.port, user="iqgate", database="iqgate", password=pg.token,
                                    ssl=False, timeout=ASYNCPG_DEADLINE_S)
        try:
            return await asyncio.wait_for(body(con), ASYNCPG_DEADLINE_S)
        finally:
            await con.close(timeout=ASYNCPG_DEADLINE_S)
    return asyncio.run(main())
