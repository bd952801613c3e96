"""One PG connection after authentication: the simple and extended query protocols over the engine.

Every statement goes through ``Gateway.sql`` (the same engine, limits and
read-only checks as HTTP) with this connection's gateway Session (``SET
position_bound``…), a ``SystemContext`` saying the stores' schema is
``public`` (and the client's settings, for ``current_setting``), and a
``Cancellation`` a CancelRequest can trigger. Session commands (transactions,
client settings, SHOW, DISCARD, DEALLOCATE) are answered here
(``commands``). Errors become ErrorResponse with a SQLSTATE (``sqlstate``);
in the extended protocol everything up to the next Sync is then skipped, as
PostgreSQL does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.systables import SystemContext
from stores.iqv2.position import Position

from ..access.principal import Principal
from ..engine.cancel import Cancellation
from ..engine.errors import (
    GatewayError,
    GatewayInternalError,
    ResponseTooLarge,
    SqlError,
    StreamRequired,
    Unauthorized,
    translate,
)
from .answer import Answer, answer_of
from .commands import ClientSettings, run_command
from .copy_out import copy_header, copy_rows, copy_trailer, forced_columns, parse_copy
from .live import LIVE_COMMANDS, close_all, copy_subscription, end_transaction, live_error_fields, run_live_command
from .sqltext import Command, classify, highest_parameter, quote_label_keywords, split_statements
from .types import column_type, decode_param, encoder, parameter_oid
from .wire import Buffer, Out, ProtocolError

log = logging.getLogger("iqgate.pg")

__all__ = ["Session", "Prepared", "Portal"]


@dataclass
class Prepared:
    sql: str
    params: int                  # the highest $n
    param_oids: list[int]
    command: Command | None
    inferred: list[int] | None = None  # the parameter types the SQL decides (0: undecided), found once


@dataclass
class Portal:
    prepared: Prepared
    params: list[Any]
    formats: list[int]
    answer: Answer | None = None
    sent: int = 0
    described: bool = False


@dataclass
class Session:
    """Protocol state of one connection; ``handle`` processes one frontend message into ``out``."""

    gateway: Any
    out: Out
    user: str
    database: str
    pid: int
    settings: ClientSettings
    cancel: Cancellation = field(default_factory=Cancellation)
    gateway_session: Any = None
    tx: str = "I"                                  # I idle, T in a block, E failed block
    skip_to_sync: bool = False
    failed_in_sync: bool = False
    statements: dict[str, Prepared] = field(default_factory=dict)
    portals: dict[str, Portal] = field(default_factory=dict)
    last_position: Position = field(default_factory=Position.empty)
    on_report: Callable[[str, str], None] | None = None
    sock: Any = None  # set by the server: rows are flushed to it a chunk at a time while a SELECT streams
    live_cursors: dict[str, Any] = field(default_factory=dict)  # DECLARE … CURSOR FOR SUBSCRIBE (live.py)
    access: Any = None  # the server's AccessContext: who the user is now, admission, the audit log (None: open)
    client: str | None = None  # the client's address, for the audit log
    response_limit: int | None = None  # the running statement's user's response budget (None: the server's)

    def __post_init__(self) -> None:
        if self.gateway_session is None:
            self.gateway_session = self.gateway.session()

    # -- running one statement ------------------------------------------------------------------
    def context(self) -> SystemContext:
        return SystemContext(schema="public", database=self.database, user=self.user, flavor="postgres",
                             settings=self.settings.visible(), backend_pid=self.pid,
                             application_name=self.settings.get("application_name"))

    def principal(self) -> Principal | None:
        """The user as of now (a grant revoked in the users file counts from the next statement); None: open."""
        if self.access is None:
            return None
        found = self.access.principal(self.user)
        if found is None:
            raise Unauthorized(f'user "{self.user}" no longer exists on this server; connect as another user')
        return found

    def run(self, prepared: Prepared, params: list[Any]) -> Answer:
        """Run one statement (already split and classified) and give back what to send."""
        command = prepared.command
        if self.tx == "E" and not (command is not None and command.kind in ("rollback", "commit")):
            raise GatewayError("current transaction is aborted, commands ignored until end of transaction block",
                               code="IN_FAILED_TRANSACTION")
        if command is not None:
            if command.kind in LIVE_COMMANDS:
                return run_live_command(self, command)
            answer = run_command(self, command, params)
            if command.kind in ("commit", "rollback"):
                end_transaction(self)
            return answer
        if not prepared.sql.strip():
            return Answer(columns=None, rows=[], tag="", empty=True)
        self.cancel.reset()
        principal = self.principal()
        self.response_limit = self.gateway.config_for(principal).max_response_bytes
        audited = None if principal is None or self.access.plain else self.access.begin(
            principal, face="pg", client=self.client, sql=prepared.sql, params=params if prepared.params else None)
        try:
            result = self.gateway.sql(prepared.sql, params if prepared.params else None,
                                      session=self.gateway_session, context=self.context(), cancel=self.cancel,
                                      stream=True, principal=principal)
        except BaseException as exc:
            if audited is not None:
                audited.end(error=exc)
            raise
        try:
            answer = answer_of(result)
        except BaseException as exc:
            result.close()
            if audited is not None:
                audited.end(error=exc)
            raise
        if answer.result is None:
            result.close()
        if audited is not None:
            streamed = not answer.done
            answer.on_close = lambda a: audited.end(result=result, code=a.failed, response_bytes=a.bytes,
                                                    rows=a.count if streamed else len(a.rows))
        if answer.position is not None:
            self.last_position = answer.position
        return answer

    # -- sending answers ---------------------------------------------------------------------------
    def send_description(self, answer: Answer, formats: list[int]) -> None:
        if answer.columns is None:
            self.out.no_data()
            return
        fields = []
        for i, (name, duck) in enumerate(answer.columns):
            pg = column_type(duck)
            fields.append((name, pg.oid, pg.length if pg.length > 0 else -1, _format(formats, i)))
        self.out.row_description(fields)

    def send_rows(self, answer: Answer, formats: list[int], start: int, limit: int) -> int:
        """DataRows from ``start``; at most ``limit`` (0: all). Returns how many were sent.

        A streamed answer is sent a chunk at a time, flushed to the client after each (memory: a chunk);
        an error while its rows come (row limit, timeout, cancel) propagates after the rows already sent,
        and the caller sends an ErrorResponse instead of CommandComplete, as PostgreSQL does.
        """
        cols = answer.columns or []
        encoders = [encoder(column_type(d), _format(formats, i) == 1) for i, (_, d) in enumerate(cols)]
        if not answer.done:
            return self._send_streamed(answer, encoders, limit)
        rows = answer.rows
        end = len(rows) if limit <= 0 else min(len(rows), start + limit)
        data_row = self.out.data_row
        began = self.out.written
        for r in range(start, end):
            data_row([None if v is None else enc(v) for enc, v in zip(encoders, rows[r])])
        self._check_size(answer, self.out.written - began)
        return end - start

    def _check_size(self, answer: Answer, wrote: int) -> None:
        """The response-size budget, as every face enforces it: past it the answer ends with an ErrorResponse."""
        answer.bytes += wrote
        limit = self.response_limit or self.gateway.config.max_response_bytes
        if answer.bytes > limit:
            answer.failed = "RESPONSE_TOO_LARGE"
            raise ResponseTooLarge(f"the answer is larger than the server's response limit of {limit:,} bytes; "
                                   "add a LIMIT, select fewer columns, or aggregate")

    def _send_streamed(self, answer: Answer, encoders: list[Any], limit: int) -> int:
        data_row = self.out.data_row
        sent = 0
        while True:
            rows = answer.rows
            take = len(rows) if limit <= 0 else min(len(rows), limit - sent)
            began = self.out.written
            for r in range(take):
                data_row([None if v is None else enc(v) for enc, v in zip(encoders, rows[r])])
            self._check_size(answer, self.out.written - began)
            answer.rows = rows[take:]
            sent += take
            answer.count += take
            if self.sock is not None and len(self.out.buf) >= _FLUSH_BYTES:
                self.out.flush(self.sock)
            if answer.rows:
                return sent  # the row limit of this Execute stopped inside a chunk
            if not answer.next_rows():
                return sent
            if 0 < limit <= sent:
                return sent  # more rows wait: PortalSuspended

    def copy_out(self, command: Command) -> None:
        """``COPY (query) TO STDOUT``: the query's rows as CopyData, streamed a chunk at a time (copy_out.py)."""
        copy = parse_copy(command.value or "")
        inner = _prepare(copy.query, [])
        if inner.command is not None:
            raise SqlError("COPY: the query must be a SELECT, VALUES or WITH statement", code="SQL_SYNTAX_ERROR")
        if inner.params:
            raise ProtocolError(f"there is no parameter ${inner.params}", "42P02")
        try:
            answer = self.run(inner, [])
        except StreamRequired:  # COPY (SUBSCRIBE …) TO STDOUT: the changes as they come (live.py)
            copy_subscription(self, command, copy)
            return
        except GatewayError as exc:  # a position in the query is one in the COPY statement the client sent
            text = command.value or ""
            at = text.find(copy.query)
            if exc.line is not None and exc.col is not None and at >= 0:
                before = text[:at].split("\n")
                exc.col += len(before[-1]) if exc.line == 1 else 0
                exc.line += len(before) - 1
            raise
        count = 0
        try:
            binary = copy.format == "binary"
            columns = answer.columns or []  # only session commands answer without columns, and those are refused
            names = [n for n, _ in columns]
            encoders = [encoder(column_type(d), binary) for _, d in columns]
            forced = forced_columns(copy, names)
            self.send_notices(answer)
            self.out.copy_out_response(binary, len(names))
            header = copy_header(copy, names)
            if header is not None and not binary:
                self.out.copy_data(header)
                header = None
            # binary COPY's signature travels in the first CopyData, with the first row (or the trailer), as
            # PostgreSQL sends it: psycopg reads it only there
            while True:
                began = self.out.written
                for data in copy_rows(copy, answer.rows, encoders, forced):
                    self.out.copy_data(data if header is None else header + data)
                    header = None
                    count += 1
                answer.rows = []
                answer.count = count  # what the audit line counts
                self._check_size(answer, self.out.written - began)
                if self.sock is not None and len(self.out.buf) >= _FLUSH_BYTES:
                    self.out.flush(self.sock)
                if answer.done or not answer.next_rows():
                    break
            trailer = copy_trailer(copy)
            if trailer is not None:
                self.out.copy_data(trailer if header is None else header + trailer)
            self.out.copy_done()
        finally:
            answer.close()
        self.out.command_complete(f"COPY {count}")

    def send_notices(self, answer: Answer) -> None:
        for fields in answer.notices:
            self.out.notice(fields)

    def send_error(self, exc: BaseException, sql: str | None) -> None:
        if isinstance(exc, ProtocolError):
            self.out.error({"S": "ERROR", "V": "ERROR", "C": exc.sqlstate, "M": str(exc)})
        else:
            err = exc if isinstance(exc, GatewayError) else translate(exc)
            if err is None:  # a bug: the client gets XX000, the operator the traceback (as the HTTP face logs it)
                log.error("unexpected error in a PG session%s", f" running {sql!r}" if sql else "", exc_info=exc)
                err = GatewayInternalError(f"{type(exc).__name__}: {exc}")
            fields = live_error_fields(err, sql)
            if err.code == "IN_FAILED_TRANSACTION":
                fields.update(C="25P02", M=err.message)
            self.out.error(fields)
        if self.tx == "T":
            self.tx = "E"

    # -- simple query ----------------------------------------------------------------------------------
    def simple_query(self, text: str) -> None:
        statements = split_statements(text)
        if not statements:
            self.out.empty_query()
        for sql in statements:
            try:
                prepared = _prepare(sql, [])
                if prepared.params:
                    raise ProtocolError(f"there is no parameter ${prepared.params}", "42P02")
                if prepared.command is not None and prepared.command.kind == "copy":
                    self.copy_out(prepared.command)
                    continue
                answer = self.run(prepared, [])
                try:
                    self.send_notices(answer)
                    if answer.columns is not None:
                        self.send_description(answer, [])
                        self.send_rows(answer, [], 0, 0)
                finally:
                    answer.close()
                self.out.command_complete(answer.tag)
            except Exception as exc:  # noqa: BLE001 - every failure is an ErrorResponse; the rest is skipped
                self.send_error(exc, sql)
                break
        self.out.ready(self.tx)

    # -- extended query --------------------------------------------------------------------------------
    def parse(self, buf: Buffer) -> None:
        name, sql = buf.cstring(), buf.cstring()
        oids = [buf.int32() for _ in range(buf.int16())]
        if name and name in self.statements:
            raise ProtocolError(f'prepared statement "{name}" already exists', "42P05")
        pieces = split_statements(sql)
        if len(pieces) > 1:
            raise ProtocolError("cannot insert multiple commands into a prepared statement", "42601")
        self.statements[name] = _prepare(pieces[0] if pieces else "", oids)
        self.out.parse_complete()

    def bind(self, buf: Buffer) -> None:
        portal, stmt = buf.cstring(), buf.cstring()
        prepared = self._statement(stmt)
        param_formats = [buf.int16() for _ in range(buf.int16())]
        count = buf.int16()
        needed = _param_count(prepared)
        if count != needed:
            raise ProtocolError(f"bind message supplies {count} parameters, but prepared statement "
                                f'"{stmt}" requires {needed}')
        params = []
        for i in range(count):
            size = buf.int32()
            raw = None if size == -1 else buf.take(size)
            oid = prepared.param_oids[i] if i < len(prepared.param_oids) else 0
            if oid == 0 and raw is not None and raw[:1] == b"{" and _format(param_formats, i) == 0:
                # an array in text without a declared type (psycopg's list of str): read it in the type its
                # place gives it (``customer = ANY($1)``: text[]), as PostgreSQL does; elsewhere DuckDB casts text
                oid = self._inferred_oids(prepared)[i]
            try:
                params.append(decode_param(raw, oid, _format(param_formats, i) == 1))
            except ProtocolError as exc:  # which parameter, as PostgreSQL's "in bind parameter N"
                raise ProtocolError(f"{exc} in bind parameter {i + 1}", exc.sqlstate) from None
        formats = [buf.int16() for _ in range(buf.int16())]
        _drop(self.portals.get(portal))
        self.portals[portal] = Portal(prepared, params, formats)
        self.out.bind_complete()

    def describe(self, buf: Buffer) -> None:
        what, name = buf.byte(), buf.cstring()
        if what == b"S":
            prepared = self._statement(name)
            shape = self._shape(prepared)  # before anything is sent: a statement that fails is one ErrorResponse
            self.out.parameter_description(self._parameter_oids(prepared))
            self.send_description(shape, [])
        elif what == b"P":
            portal = self._portal(name)
            if portal.prepared.command is not None and portal.prepared.command.kind == "copy":
                self.out.no_data()  # COPY's rows travel as CopyData, not DataRows (PostgreSQL: NoData)
                return
            answer = self._execute_portal(portal)
            portal.described = True
            self.send_description(answer, portal.formats)
        else:
            raise ProtocolError(f"invalid DESCRIBE message subtype {what!r}")

    def execute(self, buf: Buffer) -> None:
        name, limit = buf.cstring(), buf.int32()
        portal = self._portal(name)
        command = portal.prepared.command
        if command is not None and command.kind == "copy":
            self.copy_out(command)
            return
        answer = self._execute_portal(portal)
        if portal.sent == 0:
            self.send_notices(answer)
        if answer.empty:
            self.out.empty_query()
            return
        if answer.columns is not None:
            try:
                portal.sent += self.send_rows(answer, portal.formats, portal.sent, limit)
            except BaseException:
                answer.close()
                raise
            if 0 < limit and (portal.sent < len(answer.rows) if answer.done else True):
                self.out.portal_suspended()
                return
        self.out.command_complete(answer.tag)

    def close(self, buf: Buffer) -> None:
        what, name = buf.byte(), buf.cstring()
        if what == b"S":
            self.statements.pop(name, None)
        else:
            _drop(self.portals.pop(name, None))
        self.out.close_complete()

    def sync(self) -> None:
        self.skip_to_sync = False
        _drop(self.portals.pop("", None))
        self.out.ready(self.tx)

    def close_portals(self) -> None:
        """End every open portal's statement and live cursor (the connection ends)."""
        for portal in self.portals.values():
            _drop(portal)
        self.portals.clear()
        close_all(self)

    def _statement(self, name: str) -> Prepared:
        prepared = self.statements.get(name)
        if prepared is None:
            raise ProtocolError(f'prepared statement "{name}" does not exist', "26000")
        return prepared

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise ProtocolError(f'portal "{name}" does not exist', "34000")
        return portal

    def _execute_portal(self, portal: Portal) -> Answer:
        if portal.answer is None:
            portal.answer = self.run(portal.prepared, portal.params)
        return portal.answer

    def _parameter_oids(self, prepared: Prepared) -> list[int]:
        """The statement's parameter types for ParameterDescription: those its Parse declared, and for the
        rest what the SQL around them decides (``id = $1``: the key's type), else text. Kept on the statement,
        so Bind reads values in the types the client was told (asyncpg sends an int8 in binary)."""
        declared = prepared.param_oids + [0] * (_param_count(prepared) - len(prepared.param_oids))
        if 0 in declared:
            declared = [oid or inferred for oid, inferred in zip(declared, self._inferred_oids(prepared))]
            prepared.param_oids = declared
        return [oid or 25 for oid in declared]

    def _inferred_oids(self, prepared: Prepared) -> list[int]:
        if prepared.inferred is None:
            count = _param_count(prepared)
            types = (self.gateway.parameter_types(prepared.sql, principal=self.principal())
                     if prepared.command is None and prepared.sql.strip() else {})
            prepared.inferred = [parameter_oid(types[n]) if n in types else 0 for n in range(1, count + 1)]
        return prepared.inferred

    def _shape(self, prepared: Prepared) -> Answer:
        """What a prepared statement will answer with, for Describe before Bind: no store is read."""
        command = prepared.command
        if command is not None:
            if command.kind == "settings":
                return Answer(columns=[(column, "VARCHAR") for _fn, column, _args in command.calls], rows=[], tag="")
            return Answer(columns=[(command.name, "VARCHAR")] if command.kind == "show" else None, rows=[], tag="")
        if not prepared.sql.strip():
            return Answer(columns=None, rows=[], tag="")
        cols = self.gateway.result_columns(prepared.sql, session=self.gateway_session, context=self.context(),
                                           principal=self.principal())
        return Answer(columns=cols or None, rows=[], tag="")


_FLUSH_BYTES = 1 << 16


def _drop(portal: Portal | None) -> None:
    if portal is not None and portal.answer is not None:
        portal.answer.close()


def _param_count(prepared: Prepared) -> int:
    return max(len(prepared.param_oids), prepared.params)


def _format(codes: list[int], i: int) -> int:
    if not codes:
        return 0
    code = codes[0] if len(codes) == 1 else (codes[i] if i < len(codes) else 0)
    if code not in (0, 1):
        raise ProtocolError(f"invalid format code {code}")
    return code


def _prepare(sql: str, oids: list[int]) -> Prepared:
    command = classify(sql) if sql.strip() else None
    if command is not None:
        return Prepared(sql, command.parameters(), oids, command)
    return Prepared(quote_label_keywords(sql), highest_parameter(sql), oids, None)
