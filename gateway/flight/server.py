"""The Flight SQL server: pyarrow's FlightServerBase, each Flight SQL command dispatched to its module.

GetFlightInfo runs statements and catalog commands (``answers``,
``metadata``, ``sqlinfo``, ``prepared``), DoGet streams what a ticket names,
DoPut binds parameters or runs an update (only SET: the server is read-only),
DoAction creates, closes and cancels, GetSchema describes without running.
Every handler answers a failure with a Flight status (``errors``), never a
traceback, and one call's failure never touches another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from .answers import Answer, Runner, Tickets, data_stream
from .arrow_types import ArrowTypes
from .auth import (
    MIDDLEWARE,
    AuthMiddlewareFactory,
    CallState,
    FlightAuth,
    HandshakeAuth,
    SessionTokens,
    TokenAuth,
    UsersAuth,
)
from .errors import Unimplemented, mapped_errors, refusal
from .internals import Gateway, RequestTooLarge, SqlError
from .limits import FlightLimits
from .metadata import SCHEMAS, metadata_answer
from .prepared import PreparedStatements, run_update
from .protocol import REFUSED, WRITES, DecodeError, Message, command_name, message, pack, unpack
from .sessions import SessionStore
from .sqlinfo import SQL_INFO_SCHEMA, sql_info, sql_info_table

__all__ = ["FlightSqlServer", "FlightHandle", "start_flight"]

log = logging.getLogger("iqgate.flight")

_METADATA = ("CommandGetCatalogs", "CommandGetDbSchemas", "CommandGetTables", "CommandGetTableTypes",
             "CommandGetPrimaryKeys", "CommandGetExportedKeys", "CommandGetImportedKeys", "CommandGetCrossReference",
             "CommandGetXdbcTypeInfo")
_ACTIONS = {
    "CreatePreparedStatement": "Prepare a statement: its result schema and its parameters' (Flight SQL)",
    "ClosePreparedStatement": "Close a prepared statement (Flight SQL)",
    "CancelFlightInfo": "Stop the statement a FlightInfo names, waiting or streaming",
    "CancelQuery": "Stop the statement a FlightInfo names (Flight SQL, deprecated for CancelFlightInfo)",
}
_UNSERVED_ACTIONS = ("BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint",
                     "CreatePreparedSubstraitPlan", "SetSessionOptions", "GetSessionOptions", "CloseSession")
_CANCELLED, _NOT_CANCELLABLE = 1, 3  # CancelStatus (Flight.proto) and ActionCancelQueryResult.CancelResult


class FlightSqlServer(fl.FlightServerBase):
    def __init__(self, gateway: Gateway, location: str, *, auth: FlightAuth, limits: FlightLimits,
                 tls: list[fl.CertKeyPair] | None = None, access: Any = None) -> None:
        self.gateway = gateway
        self.limits = limits
        self.config = gateway.config
        self.sessions = SessionStore(gateway, limits.max_sessions, limits.session_idle_s)
        self.types = ArrowTypes(gateway)
        self.runner = Runner(gateway, self.types, self.sessions, access)
        self.tickets = Tickets(limits)
        self.prepared = PreparedStatements(self.runner, limits, self.config.max_request_bytes)
        self.info = sql_info(pa.__version__, int(limits.prepared_idle_s * 1000))
        factory = AuthMiddlewareFactory(auth, SessionTokens())
        super().__init__(location, auth_handler=HandshakeAuth(), tls_certificates=tls,
                         middleware={MIDDLEWARE: factory})

    # -- helpers ------------------------------------------------------------------------------------------------
    @staticmethod
    def _call(context: Any) -> CallState:
        call = context.get_middleware(MIDDLEWARE)
        call.attach(context)  # forgotten when the call completes (CallState.call_completed)
        return call

    def _command(self, descriptor: fl.FlightDescriptor, context: Any) -> tuple[str, Message | None]:
        if descriptor.descriptor_type != fl.DescriptorType.CMD:
            raise refusal("NOT_A_COMMAND", "iqgate serves Flight SQL: describe the flight by a command (a Flight SQL "
                          "message in google.protobuf.Any), not by a path", context=context)
        raw = descriptor.command
        if len(raw) > self.config.max_request_bytes:
            raise RequestTooLarge(f"the command has {len(raw):,} bytes; the limit is {self.config.max_request_bytes:,}")
        try:
            name, value = command_name(raw)
        except DecodeError:
            raise refusal("BAD_COMMAND", "the command is not a google.protobuf.Any holding a Flight SQL message",
                          context=context) from None
        if name in WRITES:
            raise SqlError("iqgate is read-only: it takes no ingest (its stores are written by the pipeline)",
                           code="READ_ONLY")
        if name in REFUSED:
            raise refusal("NOT_SUPPORTED", f"{name} is not served: iqgate has no transactions and takes SQL, not "
                          "Substrait plans", status=Unimplemented, context=context)
        try:
            return name, unpack(name, value)
        except KeyError:
            raise refusal("BAD_COMMAND", f"{name or 'the command'} is not a Flight SQL command this server knows",
                          context=context) from None
        except DecodeError:
            raise refusal("BAD_COMMAND", f"the {name} message does not decode", context=context) from None

    @staticmethod
    def _no_transaction(cmd: Message, context: Any) -> None:
        if cmd.HasField("transaction_id"):
            raise refusal("NOT_SUPPORTED", "iqgate has no transactions: send the statement without a transaction id",
                          status=Unimplemented, context=context)

    # -- GetFlightInfo / DoGet --------------------------------------------------------------------------------
    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        call = self._call(context)
        with mapped_errors(context, "GetFlightInfo"):
            name, cmd = self._command(descriptor, context)
            answer = self._answer(call, name, cmd, context)
            try:
                handle = self.tickets.put(answer)
            except BaseException:
                answer.close()
                raise
            ticket = fl.Ticket(pack(message("TicketStatementQuery", statement_handle=handle)))
            meta = answer.app_metadata()
            context.add_header("x-iq-position", answer.position)
            return fl.FlightInfo(answer.schema, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1,
                                 app_metadata=meta)

    def _answer(self, call: CallState, name: str, cmd: Any, context: Any) -> Answer:
        if name == "CommandStatementQuery":
            self._no_transaction(cmd, context)
            return self.runner.run(call, cmd.query)
        if name == "CommandPreparedStatementQuery":
            return self.prepared.execute(call, cmd.prepared_statement_handle)
        if name == "CommandGetSqlInfo":
            return Answer.of_table(sql_info_table(self.info, cmd.info), call.principal)
        if name in _METADATA:
            return metadata_answer(self.runner, call, name, cmd)
        raise refusal("BAD_COMMAND", f"{name} is not a query: it goes with {_rpc_of(name)}", context=context)

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.FlightDataStream:
        call = self._call(context)
        with mapped_errors(context, "DoGet"):
            try:
                name, value = command_name(ticket.ticket)
                handle = unpack("TicketStatementQuery", value).statement_handle if name == "TicketStatementQuery" else b""
            except DecodeError:
                handle = b""
            if not handle:
                raise refusal("UNKNOWN_TICKET", "this is not a ticket this server issued (GetFlightInfo gives them)",
                              context=context)
            answer = self.tickets.take(handle, call.principal)
            call.on_complete(answer.close)  # also when pyarrow never starts the stream (the client left first)
            return data_stream(answer, context, call, self.runner.response_limit(call))

    def get_schema(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.SchemaResult:
        call = self._call(context)
        with mapped_errors(context, "GetSchema"):
            name, cmd = self._command(descriptor, context)
            if name == "CommandStatementQuery":
                self._no_transaction(cmd, context)
                session = self.sessions.get(call.session_id)
                columns = self.gateway.result_columns(cmd.query, session=session, context=self.runner.context(call),
                                                      principal=self.runner.principal(call))
                return fl.SchemaResult(self.types.schema(columns))
            if name == "CommandPreparedStatementQuery":
                return fl.SchemaResult(self.prepared.get(call, cmd.prepared_statement_handle).dataset_schema)
            if name == "CommandGetSqlInfo":
                return fl.SchemaResult(SQL_INFO_SCHEMA)
            if name in _METADATA:
                key = name + ("+schema" if name == "CommandGetTables" and cmd.include_schema else "")
                return fl.SchemaResult(SCHEMAS[key])
            raise refusal("BAD_COMMAND", f"{name} has no result schema: it goes with {_rpc_of(name)}",
                          context=context)

    # -- DoPut ---------------------------------------------------------------------------------------------
    def do_put(self, context: Any, descriptor: fl.FlightDescriptor, reader: Any, writer: Any) -> None:
        call = self._call(context)
        with mapped_errors(context, "DoPut"):
            name, cmd = self._command(descriptor, context)
            if name == "CommandPreparedStatementQuery":
                handle = cmd.prepared_statement_handle
                self.prepared.bind(call, handle, reader)
                # PutResult metadata is the message itself, not an Any (as Arrow's own servers and clients do)
                writer.write(pa.py_buffer(message("DoPutPreparedStatementResult",
                                                  prepared_statement_handle=handle).SerializeToString()))
                return
            if name == "CommandStatementUpdate":
                self._no_transaction(cmd, context)
                count = run_update(self.runner, call, cmd.query, None)
            elif name == "CommandPreparedStatementUpdate":
                prepared = self.prepared.get(call, cmd.prepared_statement_handle)
                self.prepared.bind(call, cmd.prepared_statement_handle, reader)
                count = run_update(self.runner, call, prepared.sql, self.prepared.parameter_sets(prepared))
            else:
                raise refusal("BAD_COMMAND", f"{name} is not an update: it goes with {_rpc_of(name)}",
                              context=context)
            writer.write(pa.py_buffer(message("DoPutUpdateResult", record_count=count).SerializeToString()))

    # -- DoAction -------------------------------------------------------------------------------------------
    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return list(_ACTIONS.items())

    def do_action(self, context: Any, action: fl.Action) -> Iterator[bytes]:
        call = self._call(context)
        with mapped_errors(context, "DoAction"):
            kind = action.type
            body = action.body.to_pybytes() if action.body is not None else b""
            if kind == "CreatePreparedStatement":
                req = self._action_body(body, "ActionCreatePreparedStatementRequest", context)
                self._no_transaction(req, context)
                return iter([self.prepared.create(call, req.query)])
            if kind == "ClosePreparedStatement":
                req = self._action_body(body, "ActionClosePreparedStatementRequest", context)
                self.prepared.close(call, req.prepared_statement_handle)
                return iter([])
            if kind in ("CancelFlightInfo", "CancelQuery"):
                return iter([self._cancel(call, kind, body, context)])
            if kind in _UNSERVED_ACTIONS:
                raise refusal("NOT_SUPPORTED", f"{kind} is not served: iqgate has no transactions, Substrait plans "
                              "or session options (SET on the session sets its settings)", status=Unimplemented,
                              context=context)
            raise refusal("UNKNOWN_ACTION", f"unknown action {kind!r}; this server serves "
                          f"{', '.join(_ACTIONS)}", status=Unimplemented, context=context)

    @staticmethod
    def _action_body(body: bytes, expected: str, context: Any) -> Any:
        try:
            name, value = command_name(body)
            if name != expected:
                raise DecodeError(name)
            return unpack(expected, value)
        except DecodeError:
            raise refusal("BAD_COMMAND", f"the action's body must be a google.protobuf.Any holding {expected}",
                          context=context) from None

    def _cancel(self, call: CallState, kind: str, body: bytes, context: Any) -> bytes:
        try:
            if kind == "CancelFlightInfo":
                raw = unpack("CancelFlightInfoRequest", body).info
            else:
                raw = self._action_body(body, "ActionCancelQueryRequest", context).info
            info = fl.FlightInfo.deserialize(raw)
        except (DecodeError, pa.ArrowInvalid, OSError):
            raise refusal("BAD_COMMAND", f"{kind} needs the FlightInfo of the statement to cancel",
                          context=context) from None
        cancelled = False
        for endpoint in info.endpoints:
            try:
                name, value = command_name(endpoint.ticket.ticket)
                handle = unpack("TicketStatementQuery", value).statement_handle
            except (DecodeError, KeyError):
                continue
            cancelled = self.tickets.cancel(handle, call.principal) or cancelled
        status = _CANCELLED if cancelled else _NOT_CANCELLABLE
        if kind == "CancelFlightInfo":
            return message("CancelFlightInfoResult", status=status).SerializeToString()
        return pack(message("ActionCancelQueryResult", result=status))

    # -- the rest of Flight ----------------------------------------------------------------------------------
    def list_flights(self, context: Any, criteria: bytes) -> Iterator[fl.FlightInfo]:
        return iter([])

    def do_exchange(self, context: Any, descriptor: fl.FlightDescriptor, reader: Any, writer: Any) -> None:
        raise refusal("NOT_SUPPORTED", "DoExchange is not part of Flight SQL", status=Unimplemented, context=context)

    # -- housekeeping --------------------------------------------------------------------------------------
    def reap(self) -> None:
        self.tickets.reap()
        self.sessions.reap()
        self.prepared.reap()

    def stop_statements(self) -> None:
        self.runner.cancel_all()
        self.tickets.close_all()


def _rpc_of(name: str) -> str:
    if name in ("CommandStatementUpdate", "CommandPreparedStatementUpdate", "CommandStatementIngest"):
        return "DoPut"
    if name.startswith("Action"):
        return "DoAction"
    return "GetFlightInfo"



@dataclass
class FlightHandle:
    """A running Flight SQL port: where it is, and ``close()``."""

    server: FlightSqlServer
    host: str
    port: int
    tls: bool
    _stop: threading.Event
    _reaper: threading.Thread

    @property
    def location(self) -> str:
        return f"grpc{'+tls' if self.tls else ''}://{self.host}:{self.port}"

    def stats(self) -> dict[str, int]:
        """What the port holds now: answers waiting for DoGet, streaming, sessions with settings, prepared."""
        s = self.server
        return {"pending": len(s.tickets), "streaming": s.tickets.streaming, "sessions": len(s.sessions),
                "prepared": len(s.prepared)}

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every statement, then the server (bounded: a client that stopped reading does not hold it)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.server.stop_statements()
        done = threading.Thread(target=self.server.shutdown, name="iqgate-flight-shutdown", daemon=True)
        done.start()
        done.join(timeout_s)
        if done.is_alive():
            log.warning("the Flight SQL port did not stop within %.0f s (a client still holds a call)", timeout_s)
        self.server.sessions.clear()
        self.server.prepared.clear()

    def __enter__(self) -> FlightHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tls_pair(tls_cert: str | None, tls_key: str | None) -> list[fl.CertKeyPair] | None:
    if not tls_cert and not tls_key:
        return None
    if not (tls_cert and tls_key):
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    try:
        cert, key = Path(tls_cert).read_bytes(), Path(tls_key).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS certificate --tls-cert {tls_cert} with --tls-key {tls_key}: "
                         f"{exc.strerror or exc}") from None
    if b"-----BEGIN" not in cert or b"-----BEGIN" not in key:
        raise ValueError(f"the TLS certificate --tls-cert {tls_cert} and key --tls-key {tls_key} must be PEM files")
    return [fl.CertKeyPair(cert=cert, key=key)]


def start_flight(gateway: Gateway, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None, auth: FlightAuth | None = None,
                 access: Any = None, **limits: Any) -> FlightHandle:
    """Serve ``gateway`` as Arrow Flight SQL on ``host:port`` (0: a free port, see ``handle.port``).

    ``token``: the credential clients must present (Bearer, or the password of basic auth); None lets every
    client in, as the HTTP port does. ``tls_cert``/``tls_key``: PEM files; the port then speaks TLS only
    (``grpc+tls://``). ``auth``: a hook object replacing the token check (``FlightAuth``). ``access``: the
    server's users, audit log and admission (``gateway.access.AccessContext``): its users authenticate, each
    statement sees only their stores, within their limits, and is audited. ``limits``: the
    face's own bounds (``FlightLimits``); the gateway's statement budgets apply as well. Raises ValueError
    (naming what was wrong) for bad TLS files or limits, OSError when the address cannot be served.
    """
    flight_limits = FlightLimits.of(**limits)
    tls = _tls_pair(tls_cert, tls_key)
    location = f"grpc{'+tls' if tls else ''}://{host}:{port}"
    try:
        default = UsersAuth(access) if access is not None else TokenAuth(token)
        server = FlightSqlServer(gateway, location, auth=auth or default, limits=flight_limits, tls=tls,
                                 access=access)
    except (pa.ArrowException, fl.FlightError) as exc:
        raise OSError(f"cannot serve Flight SQL on {host}:{port}: {str(exc).split('. Detail:')[0]}") from None
    stop = threading.Event()

    def reap() -> None:
        every = min(flight_limits.ticket_ttl_s / 4, 5.0)
        while not stop.wait(every):
            try:
                server.reap()
            except Exception:  # noqa: BLE001 - housekeeping must never stop; the next round tries again
                log.exception("Flight SQL housekeeping failed")

    reaper = threading.Thread(target=reap, name="iqgate-flight-reaper", daemon=True)
    reaper.start()
    return FlightHandle(server, host, server.port, tls is not None, stop, reaper)
