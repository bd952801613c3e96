"""Live answers over the PG port, the two ways Materialize's clients read a SUBSCRIBE.

- ``COPY (SUBSCRIBE …) TO STDOUT [WITH (FORMAT text|csv|binary, …)]``: the changes as CopyData rows as they
  come, never ending by itself: the client cancels it (a CancelRequest: 57014) or closes the connection; a
  subscription that has to end (too slow, the server stopping, …) ends the COPY with an ErrorResponse whose
  DETAIL says where to resume.
- ``DECLARE c CURSOR FOR SUBSCRIBE …`` then ``FETCH [n | ALL | NEXT | FORWARD [n | ALL]] [FROM | IN] c [WITH
  (timeout = '1s')]``: each FETCH waits for the first row (until the timeout, if given; without one, until a
  row comes) and returns what is ready then, up to n. ``CLOSE c`` (or ``CLOSE ALL``) ends it; a cursor declared
  in a transaction block also ends with the block (COMMIT, ROLLBACK), as PostgreSQL's do; the connection's end
  ends them all.

Rows are ``(iq_op, iq_position, <the subscription's columns>)``: ``iq_op`` is insert / upsert / delete /
progress / reset, ``iq_position`` the Position as JSON (a progress row: the subscriber holds the whole answer
there; resume ``AS OF POSITION`` it ``WITH (SNAPSHOT = false)``), the columns NULL on progress and reset rows
and, for a delete, all but the identity columns. A rebuilt store whose new version answers with other columns
ends the subscription (the row shape of a COPY or a cursor is fixed): subscribe again, with a snapshot.
"""

from __future__ import annotations

import re
import select
import socket
import time
from typing import Any

from ..engine.errors import BadRequest, GatewayError, NotSupported, SqlError, StatementCancelled, SubscriptionError
from ..engine.live.changes import flat_rows
from .answer import Answer
from .copy_out import CopyOut, copy_header, copy_rows, copy_trailer, forced_columns
from .sqlstate import error_fields
from .sqltext import Command
from .types import column_type, encoder

__all__ = ["LIVE_COMMANDS", "copy_subscription", "run_live_command", "end_transaction", "close_all",
           "live_columns", "live_error_fields"]

LIVE_COMMANDS = frozenset({"declare", "fetch", "close_cursor"})
OP_COLUMNS = [("iq_op", "VARCHAR"), ("iq_position", "VARCHAR")]
_TAKE = 1024
_WAIT_S = 0.25
_FETCH_MAX = 100_000  # rows one FETCH ALL returns at most (the rest wait for the next FETCH)

_DECLARE = re.compile(r"^DECLARE\s+(?P<name>\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)\s+(?P<opts>(?:\w+\s+)*?)CURSOR"
                      r"(?:\s+(?:WITH|WITHOUT)\s+HOLD)?\s+FOR\s+(?P<query>.+)$", re.I | re.S)
_FETCH = re.compile(r"^FETCH(?:\s+(?P<dir>NEXT|ALL|FORWARD\s+ALL|FORWARD\s+\d+|FORWARD|\d+))?"
                    r"(?:\s+(?:FROM|IN))?\s+(?P<name>\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)"
                    r"(?:\s+WITH\s*\(\s*timeout\s*=?\s*'(?P<timeout>[^']*)'\s*\))?$", re.I | re.S)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|second|seconds|min|m)?\s*$", re.I)
_UNIT_S = {"ms": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "m": 60.0}


def live_columns(sub: Any) -> list[tuple[str, str]]:
    return OP_COLUMNS + list(sub.columns)


def live_error_fields(err: GatewayError, sql: str | None) -> dict[str, str]:
    """The ErrorResponse of a subscription's end, with where to resume (or the oldest resumable Position)."""
    fields = error_fields(err, sql)
    if isinstance(err, SubscriptionError):
        detail = []
        if err.resume_from is not None:
            detail.append(f"resume from {err.resume_from.to_json()} (AS OF POSITION it, WITH (SNAPSHOT = false))")
        if err.oldest is not None:
            detail.append(f"the oldest Position a subscription can resume from is {err.oldest.to_json()}")
        if detail:
            fields["D"] = "; ".join(detail)
    return fields


def _subscribe(session: Any, sql: str) -> Any:
    session.cancel.reset()
    try:
        return session.gateway.subscribe(sql, session=session.gateway_session, principal=session.principal())
    except BadRequest as exc:  # a plain query: cursors and this COPY are for live answers
        raise NotSupported(f"{exc.message}; a cursor here is for SUBSCRIBE (run a SELECT as it is: its rows stream)"
                           ) from None


def _client_left(sock: Any) -> bool:
    """The client closed its end (or sent Terminate) instead of waiting for the rows. What else it sent ahead
    (the Sync of an extended-protocol COPY) stays unread for the message loop."""
    if sock is None or type(sock) is not socket.socket:
        return False  # TLS: a closed client shows when a write fails
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return first in (b"", b"X")
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


# -- COPY (SUBSCRIBE …) TO STDOUT --------------------------------------------------------------------------------
def copy_subscription(session: Any, command: Command, copy: CopyOut) -> None:
    """Stream the subscription ``copy.query`` as CopyData until the client cancels or leaves, or it ends."""
    sub = _subscribe(session, copy.query)
    out = session.out
    count = 0
    try:
        columns = live_columns(sub)
        binary = copy.format == "binary"
        names = [n for n, _ in columns]
        encoders = [encoder(column_type(d), binary) for _, d in columns]
        forced = forced_columns(copy, names)
        out.copy_out_response(binary, len(names))
        header = copy_header(copy, names)
        if header is not None and not binary:
            out.copy_data(header)
            header = None
        _flush(session)
        shape = list(sub.columns)
        while True:
            if session.cancel.cancelled:
                raise StatementCancelled("canceling statement due to user request")
            if _client_left(session.sock):
                return
            changes = sub.take(_TAKE, _WAIT_S)
            if not changes:
                continue
            for data in copy_rows(copy, flat_rows(changes, shape), encoders, forced):
                out.copy_data(data if header is None else header + data)
                header = None
                count += 1
            _flush(session)
    finally:  # an error ends the COPY as an ErrorResponse (Session.send_error: live_error_fields)
        sub.close()
    trailer = copy_trailer(copy)  # pragma: no cover - a live COPY ends by an error or the client
    if trailer is not None:
        out.copy_data(trailer)
    out.copy_done()
    out.command_complete(f"COPY {count}")


def _flush(session: Any) -> None:
    if session.sock is not None:
        session.out.flush(session.sock)


# -- DECLARE / FETCH / CLOSE --------------------------------------------------------------------------------------
def _name(raw: str) -> str:
    return raw[1:-1].replace('""', '"') if raw.startswith('"') else raw.lower()


def run_live_command(session: Any, command: Command) -> Answer:
    if command.kind == "declare":
        return _declare(session, command.value or "")
    if command.kind == "fetch":
        return _fetch(session, command.value or "")
    return _close(session, command.name)


def _declare(session: Any, text: str) -> Answer:
    m = _DECLARE.match(text.strip())
    if m is None:
        raise SqlError("DECLARE: expected DECLARE name CURSOR FOR SUBSCRIBE …", code="SQL_SYNTAX_ERROR")
    opts = {w.upper() for w in m.group("opts").split()}
    if "SCROLL" in opts and "NO" not in opts:
        raise NotSupported("a live cursor moves forward only: DECLARE … NO SCROLL CURSOR (or leave SCROLL out)")
    name = _name(m.group("name"))
    cursors = session.live_cursors
    if name in cursors:
        raise SqlError(f'cursor "{name}" already exists', code="DUPLICATE_CURSOR")
    sub = _subscribe(session, m.group("query"))
    cursors[name] = (sub, session.tx != "I")
    return Answer(None, [], "DECLARE CURSOR")


def _timeout_s(raw: str | None) -> float | None:
    if raw is None:
        return None
    m = _DURATION.match(raw)
    if m is None:
        raise SqlError(f"FETCH: invalid timeout {raw!r}: write it as '1s' or '500ms'", code="INVALID_SETTING")
    return float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]


def _fetch(session: Any, text: str) -> Answer:
    m = _FETCH.match(text.strip())
    if m is None:
        raise NotSupported("FETCH: a live cursor answers FETCH [n | ALL | NEXT | FORWARD [n | ALL]] [FROM] name "
                           "[WITH (timeout = '1s')] (it moves forward only)")
    name = _name(m.group("name"))
    got = session.live_cursors.get(name)
    if got is None:
        raise SqlError(f'cursor "{name}" does not exist', code="UNKNOWN_CURSOR")
    sub = got[0]
    direction = (m.group("dir") or "NEXT").upper().split()
    word = direction[-1]
    count = 1 if word in ("NEXT", "FORWARD") else _FETCH_MAX if word == "ALL" else min(int(word), _FETCH_MAX)
    timeout = _timeout_s(m.group("timeout"))
    deadline = None if timeout is None else time.monotonic() + timeout
    session.cancel.reset()
    changes: list[Any] = []
    try:
        while True:
            if session.cancel.cancelled:
                raise StatementCancelled("canceling statement due to user request")
            left = _WAIT_S if deadline is None else min(_WAIT_S, max(0.0, deadline - time.monotonic()))
            changes = sub.take(count, left) if count > 0 else []
            if changes or count == 0 or (deadline is not None and time.monotonic() >= deadline):
                break
        rows = flat_rows(changes, sub.columns)
    except GatewayError:
        session.live_cursors.pop(name, None)
        sub.close()
        raise
    return Answer(live_columns(sub), rows, f"FETCH {len(rows)}")


def _close(session: Any, name: str) -> Answer:
    cursors = session.live_cursors
    if name.upper() == "ALL":
        close_all(session)
        return Answer(None, [], "CLOSE CURSOR ALL")
    got = cursors.pop(name, None)
    if got is None:
        raise SqlError(f'cursor "{name}" does not exist', code="UNKNOWN_CURSOR")
    got[0].close()
    return Answer(None, [], "CLOSE CURSOR")


def end_transaction(session: Any) -> None:
    """COMMIT / ROLLBACK: the cursors declared inside the block end with it."""
    for name, (sub, in_block) in list(session.live_cursors.items()):
        if in_block:
            session.live_cursors.pop(name, None)
            sub.close()


def close_all(session: Any) -> None:
    cursors = session.live_cursors
    for sub, _ in list(cursors.values()):
        sub.close()
    cursors.clear()
