"""Prepared statements: create (the answer's schema and the parameters' before anything runs), bind parameters
as Arrow (DoPut), execute (GetFlightInfo + DoGet, as a statement), close.

What prepare reports comes from the engine without reading a store: the
result columns (``Gateway.result_columns``) and the parameters' types, as the
SQL around each decides them (``Gateway.parameter_types``; text where it does
not). Bound parameters stay bound until the next DoPut, as Flight SQL says;
each row of them is one execution and their answers are one stream. A
statement without result columns (SET) is what a JDBC client runs as an
update. A handle belongs to the caller that made it, and is closed after
``prepared_idle_s`` unused or by ClosePreparedStatement.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from .answers import Answer, Runner
from .arrow_types import parameter_type
from .auth import CallState, Principal
from .errors import NotFound, refusal
from .internals import BadRequest, RequestTooLarge, SqlError
from .limits import FlightLimits
from .protocol import message, pack
from .sqltext import placeholders

__all__ = ["Prepared", "PreparedStatements", "run_update"]


@dataclass
class Prepared:
    sql: str
    principal: Principal
    parameters: int
    dataset_schema: pa.Schema
    parameter_schema: pa.Schema
    bound: list[list[Any]] | None = None
    used: float = field(default_factory=time.monotonic)


class PreparedStatements:
    def __init__(self, runner: Runner, limits: FlightLimits, max_request_bytes: int) -> None:
        self.runner = runner
        self.limits = limits
        self.max_request_bytes = max_request_bytes
        self._lock = threading.Lock()
        self._open: OrderedDict[bytes, Prepared] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def create(self, call: CallState, query: str) -> bytes:
        """ActionCreatePreparedStatementResult (packed in Any) for ``query``; SQL errors are raised here."""
        if not query.strip():
            raise BadRequest("the prepared statement's query is empty")
        gateway = self.runner.gateway
        session = self.runner.sessions.get(call.session_id)
        principal = self.runner.principal(call)
        columns = gateway.result_columns(query, session=session, context=self.runner.context(call),
                                         principal=principal)
        dataset = self.runner.types.schema(columns)
        found = placeholders(query)
        types = gateway.parameter_types(found.numbered, principal=principal) if found.count else {}
        params = pa.schema([pa.field(f"${i}", parameter_type(types.get(i))) for i in range(1, found.count + 1)])
        prepared = Prepared(query, call.principal, found.count, dataset, params)
        handle = secrets.token_bytes(16)
        self.reap()
        with self._lock:
            full = len(self._open) >= self.limits.max_prepared
            if not full:
                self._open[handle] = prepared
        if full:
            raise refusal("TOO_MANY_PREPARED", f"{self.limits.max_prepared} prepared statements are open already; "
                          "close some (or let them idle out)", status=fl.FlightUnavailableError)
        return pack(message("ActionCreatePreparedStatementResult", prepared_statement_handle=handle,
                            dataset_schema=dataset.serialize().to_pybytes(),
                            parameter_schema=params.serialize().to_pybytes()))

    def get(self, call: CallState, handle: bytes) -> Prepared:
        with self._lock:
            prepared = self._open.get(handle)
            if prepared is not None and prepared.principal == call.principal:
                prepared.used = time.monotonic()
                self._open.move_to_end(handle)
                return prepared
        raise refusal("UNKNOWN_PREPARED_STATEMENT", "no prepared statement has this handle: it was closed, idle for "
                      f"more than {self.limits.prepared_idle_s:g} s, or made by another caller", status=NotFound)

    def close(self, call: CallState, handle: bytes) -> None:
        self.get(call, handle)
        with self._lock:
            self._open.pop(handle, None)

    def bind(self, call: CallState, handle: bytes, reader: Any) -> None:
        """DoPut: the parameter rows (Arrow batches), each one execution, replacing what was bound."""
        prepared = self.get(call, handle)
        rows: list[list[Any]] = []
        size = 0
        for chunk in reader:
            batch = chunk.data
            if batch is None:
                continue
            size += batch.nbytes
            if size > self.max_request_bytes:
                raise RequestTooLarge(f"the bound parameters exceed the request limit of {self.max_request_bytes:,} "
                                      "bytes")
            if batch.num_columns != prepared.parameters and not (batch.num_columns == 0 == prepared.parameters):
                raise SqlError(f"the statement has {prepared.parameters} parameter(s); the bound batch has "
                               f"{batch.num_columns} column(s)", code="PARAMETER_ERROR")
            columns = [c.to_pylist() for c in batch.columns]
            rows.extend([list(r) for r in zip(*columns)] if columns else [[] for _ in range(batch.num_rows)])
            if len(rows) > self.limits.max_parameter_sets:
                raise RequestTooLarge(f"more than {self.limits.max_parameter_sets} parameter rows in one DoPut "
                                      "(each row is one execution)")
        prepared.bound = rows

    def execute(self, call: CallState, handle: bytes) -> Answer:
        prepared = self.get(call, handle)
        sets = self.parameter_sets(prepared)
        return self.runner.run(call, prepared.sql, sets)

    @staticmethod
    def parameter_sets(prepared: Prepared) -> list[list[Any]] | None:
        if prepared.parameters == 0:
            return None
        if not prepared.bound:
            raise SqlError(f"the statement has {prepared.parameters} parameter(s) and none are bound: DoPut them "
                           "first", code="PARAMETER_ERROR")
        return prepared.bound

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            while self._open:
                handle, prepared = next(iter(self._open.items()))
                if now - prepared.used <= self.limits.prepared_idle_s:
                    break
                del self._open[handle]

    def clear(self) -> None:
        with self._lock:
            self._open.clear()


def run_update(runner: Runner, call: CallState, sql: str, param_sets: list[list[Any]] | None) -> int:
    """An update command: iqgate is read-only, so only SET/RESET of a session setting runs (record count 0).

    A statement that answers with rows (a SELECT sent as an update) is refused before it reads anything; a
    write is refused by the planner itself (READ_ONLY, with its line and column).
    """
    if runner.gateway.result_columns(sql, context=runner.context(call), principal=runner.principal(call)):
        raise SqlError("iqgate is read-only: an update may only SET or RESET a session setting; run statements "
                       "that answer with rows as queries (CommandStatementQuery)", code="READ_ONLY")
    answer = runner.run(call, sql, param_sets)
    answer.close()
    return 0
