"""A statement's answer between GetFlightInfo (which runs it) and DoGet (which streams it).

GetFlightInfo runs the statement through the engine as a lazy Arrow stream
(``Gateway.sql(…, arrow=True)``) and reads its first batch, so everything
that can fail before a row exists (SQL errors, NOT_UP_TO_BOUND, the row
limit within the first batch, a heavy aggregate) fails that call with its
status, and the FlightInfo can carry the answer's Position and partition
outcomes. The answer then waits under a one-time ticket, bound to the caller,
for at most ``ticket_ttl_s``. DoGet sends the batches as DuckDB produces
them: memory is a batch or two whatever the answer's size.

The client is watched throughout: the engine's statement guard polls the
call the statement currently belongs to (GetFlightInfo's, then DoGet's), so
a client that cancels or goes away interrupts the statement where it is,
and every budget (time from the GetFlightInfo, memory, rows, response
bytes) applies to the whole of it.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from .arrow_types import ArrowTypes, conform
from .auth import CallState, Principal
from .errors import NotFound, flight_error, refusal
from .internals import (
    Cancellation,
    Gateway,
    GatewayError,
    GatewayInternalError,
    PartitionOutcome,
    ResponseTooLarge,
    Result,
    Session,
    StatementCancelled,
    SystemContext,
)
from .limits import FlightLimits
from .options import call_options
from .sessions import SessionStore

__all__ = ["Answer", "Liveness", "Runner", "Tickets", "data_stream", "stream"]

log = logging.getLogger("iqgate.flight")

POSITION_TRAILER = "x-iq-position"
PARTITIONS_TRAILER = "x-iq-partitions"
POSITION_KEY = b"iqgate.position"  # schema metadata (the key the HTTP face's Arrow IPC answers use)
PARTITIONS_KEY = b"iqgate.partitions"


class Liveness:
    """Which call a statement belongs to right now; ``gone`` is what the engine polls."""

    __slots__ = ("call",)

    def __init__(self, call: CallState | None) -> None:
        self.call = call

    def gone(self) -> bool:
        call = self.call
        return call is not None and call.gone()


class Answer:
    """Batches to send, their schema, and the IQv2 outcome: the Position and per-partition outcomes."""

    def __init__(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch], *, principal: Principal,
                 position: str, partitions: str, statement: str,
                 cancel: Cancellation | None = None, liveness: Liveness | None = None,
                 close: Callable[[], None] | None = None, whole: list[pa.RecordBatch] | None = None) -> None:
        self.schema = schema
        self.batches = batches
        self.principal = principal
        self.position = position      # JSON text: {topic: {partition: offset}}
        self.partitions = partitions  # JSON text: [{store, partition, failure_reason, …}]
        self.statement = statement
        self.cancel = cancel or Cancellation()
        self.liveness = liveness or Liveness(None)
        self._closers: list[Callable[[], None]] = [close] if close is not None else []
        self.whole = whole  # every batch, when the statement is over already (DoGet sends them from C++)
        self.expires = 0.0
        self.rows_sent = 0   # what DoGet sent of it (the audit line's rows and bytes)
        self.bytes_sent = 0
        self.failed: str | None = None  # the code of the error that ended its stream

    @classmethod
    def of_table(cls, table: pa.Table, principal: Principal, statement: str = "metadata") -> Answer:
        batches = table.to_batches()
        return cls(table.schema, iter(batches), principal=principal, position="{}", partitions="[]",
                   statement=statement, whole=batches)

    def app_metadata(self) -> bytes:
        """``{"statement", "position", "partitions"}`` as JSON: the FlightInfo's app_metadata."""
        return (f'{{"statement":{_json(self.statement)},"position":{self.position},'
                f'"partitions":{self.partitions}}}').encode()

    def on_close(self, action: Callable[[], None]) -> None:
        self._closers.append(action)

    def close(self) -> None:
        """End the statement (idempotent): its cursor, its streams, its place in the tickets."""
        closers, self._closers = self._closers, []
        self.liveness.call = None
        for close in closers:
            close()


class Tickets:
    """Answers waiting for their DoGet: one use each, for their caller only, for a bounded time and number."""

    def __init__(self, limits: FlightLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._waiting: dict[bytes, Answer] = {}
        self._streaming: dict[bytes, Answer] = {}  # taken by a DoGet, still sending (CancelFlightInfo reaches them)

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def streaming(self) -> int:
        return len(self._streaming)

    def put(self, answer: Answer) -> bytes:
        self.reap()
        with self._lock:
            if len(self._waiting) >= self.limits.max_pending:
                full = True
            else:
                full = False
                handle = secrets.token_bytes(16)
                answer.expires = time.monotonic() + self.limits.ticket_ttl_s
                self._waiting[handle] = answer
        if full:
            answer.close()
            raise refusal("TOO_MANY_PENDING", f"{self.limits.max_pending} answers are waiting for their DoGet "
                          "already; fetch them (or let them expire) first", status=fl.FlightUnavailableError)
        return handle

    def take(self, handle: bytes, principal: Principal) -> Answer:
        with self._lock:
            answer = self._waiting.get(handle)
            if answer is not None and answer.principal == principal and answer.expires >= time.monotonic():
                del self._waiting[handle]
                self._streaming[handle] = answer
                answer.on_close(lambda: self._forget(handle))
                return answer
        raise refusal("UNKNOWN_TICKET", "no answer waits under this ticket: a ticket is good for one DoGet, by "
                      f"the caller that got it, within {self.limits.ticket_ttl_s:g} s of its GetFlightInfo",
                      status=NotFound)

    def _forget(self, handle: bytes) -> None:
        with self._lock:
            self._streaming.pop(handle, None)

    def cancel(self, handle: bytes, principal: Principal) -> bool:
        """Stop an answer waiting or streaming (CancelFlightInfo); False when there is none for this caller.

        A waiting answer is closed here; a streaming one is interrupted where it is and its DoGet ends with
        CANCELLED (the stream closes it)."""
        with self._lock:
            answer = self._waiting.get(handle) or self._streaming.get(handle)
            if answer is None or answer.principal != principal:
                return False
            waiting = self._waiting.pop(handle, None) is not None
        answer.cancel.cancel()
        if waiting:
            answer.close()
        return True

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [h for h, a in self._waiting.items() if a.expires < now]
            gone = [self._waiting.pop(h) for h in stale]
        for answer in gone:
            answer.close()

    def close_all(self) -> None:
        with self._lock:
            gone, self._waiting = list(self._waiting.values()), {}
            streaming = list(self._streaming.values())
        for answer in streaming:
            answer.cancel.cancel()
        for answer in gone:
            answer.cancel.cancel()
            answer.close()


class Runner:
    """Runs statements for one call through the engine, with the call's session, headers, budgets and user."""

    def __init__(self, gateway: Gateway, types: ArrowTypes, sessions: SessionStore, access: Any = None) -> None:
        self.gateway = gateway
        self.types = types
        self.sessions = sessions
        self.access = access  # an AccessContext: admission and the audit log (None: neither)
        self._lock = threading.Lock()
        self._running: set[Cancellation] = set()

    @staticmethod
    def context(call: CallState) -> SystemContext:
        return SystemContext(user=call.principal.user)

    @staticmethod
    def principal(call: CallState) -> Any:
        """The caller's grants and limits (``gateway.access.Principal``; None: every grant)."""
        return call.principal.access

    def response_limit(self, call: CallState) -> int:
        return self.gateway.config_for(call.principal.access).max_response_bytes

    def run(self, call: CallState, sql: str, param_sets: Sequence[Sequence[Any]] | None = None) -> Answer:
        """The statement's answer, its first batch read (see the module docstring); SET changes the session."""
        options = call_options(call.headers)
        stored = self.sessions.get(call.session_id)
        session = stored if stored is not None else self.sessions.new()
        run_session = session
        if options.settings:  # this call's settings over the session's, for this statement only
            run_session = self.sessions.new()
            run_session.apply(session.settings)
            run_session.apply(options.settings)
        liveness = Liveness(call)
        cancel = Cancellation()
        principal = self.principal(call)
        kwargs = dict(options.engine_kwargs(), session=run_session, arrow=True, cancelled=liveness.gone,
                      cancel=cancel, context=self.context(call), principal=principal)
        if run_session is not session:  # a monotonic session's last Position holds for the call's overlay too
            kwargs["seen"] = session.seen
        sets = list(param_sets) if param_sets else [None]
        access = self.access
        audited = None if access is None or access.plain or principal is None else access.begin(
            principal, face="flight", client=call.peer(), sql=sql, params=sets[0])
        try:
            with self._tracking(cancel):
                result = self.gateway.sql(sql, sets[0], **kwargs)
                try:
                    if stored is not None and run_session is not session:
                        stored.observe(result.position)
                    if result.statement.value == "set":
                        self._keep_setting(call, sql, sets[0], session, stored is None, run_session is not session)
                    answer = self._answer(call, result, sets[1:], sql, kwargs, liveness, cancel)
                except BaseException:
                    result.close()
                    raise
        except BaseException as exc:
            if audited is not None:
                audited.end(error=exc)
            raise
        if audited is not None:
            answer.on_close(lambda: audited.end(result=result, code=answer.failed, rows=answer.rows_sent,
                                                response_bytes=answer.bytes_sent))
        return answer

    def _keep_setting(self, call: CallState, sql: str, params: Any, session: Session, new: bool,
                      overlaid: bool) -> None:
        if call.session_id is None:
            raise refusal("SESSION_REQUIRED", "SET needs a session, and this call came without one: send the "
                          "session token this server returns in the 'authorization' response header (ADBC does), "
                          "or connect with basic auth; or send the setting with each call as an x-iq-setting-<name> "
                          "header")
        if overlaid:  # it ran on this call's copy: the session's own settings take it too
            self.gateway.sql(sql, params, session=session, context=self.context(call),
                             principal=self.principal(call)).close()
        if new:
            self.sessions.adopt(call.session_id, session)

    def _answer(self, call: CallState, result: Result, more: list[Any], sql: str, kwargs: dict[str, Any],
                liveness: Liveness, cancel: Cancellation) -> Answer:
        schema, batches = result.arrow_batches()
        position = result.position.to_json()  # made once per Position
        partitions = partitions_json(result.partitions)
        # the outcome in the schema's metadata too, as the HTTP face's Arrow answers carry it: a client that
        # sees neither app_metadata nor trailers (ADBC) reads it from the answer itself
        target = self.types.schema(result.columns, schema).with_metadata(
            {POSITION_KEY: position, PARTITIONS_KEY: partitions})
        first = next(batches, None)
        second = next(batches, None) if first is not None else None
        if second is None and not more:  # the whole answer is in hand (a lookup, a small result): done
            whole = [] if first is None else [conform(first, target)]
            result.close()
            return Answer(target, iter(whole), principal=call.principal, position=position, partitions=partitions,
                          statement=result.statement.value, cancel=cancel, whole=whole)
        state = {"result": result}
        answer = Answer(target, iter(()), principal=call.principal, position=position, partitions=partitions,
                        statement=result.statement.value, cancel=cancel, liveness=liveness,
                        close=lambda: state["result"].close())

        def gen() -> Iterator[pa.RecordBatch]:
            if first is not None:
                yield conform(first, target)
            if second is not None:
                yield conform(second, target)
            for batch in batches:
                yield conform(batch, target)
            for params in more:  # further parameter sets: one execution each, one answer
                state["result"].close()
                nxt = self.gateway.sql(sql, params, **kwargs)
                state["result"] = nxt
                if [n for n, _ in nxt.columns] != target.names:
                    raise GatewayInternalError("a parameter set answered with other columns than the first")
                _merge_outcome(answer, nxt)
                for batch in nxt.arrow_batches()[1]:
                    yield conform(batch, target)

        answer.batches = gen()
        return answer

    @contextmanager
    def _tracking(self, cancel: Cancellation) -> Iterator[None]:
        """Statements running in a GetFlightInfo, so closing the server can stop them."""
        with self._lock:
            self._running.add(cancel)
        try:
            yield
        finally:
            with self._lock:
                self._running.discard(cancel)

    def cancel_all(self) -> None:
        with self._lock:
            running = list(self._running)
        for cancel in running:
            cancel.cancel()


def _merge_outcome(answer: Answer, result: Result) -> None:
    """The answer's outcome with another execution's (several parameter rows): the positions merged per
    partition (the largest offset), the partitions not listed yet added."""
    pos: dict[str, dict[str, int]] = json.loads(answer.position)
    for topic, parts in result.position.to_json_map().items():
        mine = pos.setdefault(topic, {})
        for p, off in parts.items():
            mine[p] = max(off, mine.get(p, off))
    answer.position = _json(pos)
    partitions = json.loads(answer.partitions)
    seen = {(p["store"], p["partition"]) for p in partitions}
    partitions += [p.to_json() for p in result.partitions if (p.store, p.partition) not in seen]
    answer.partitions = _json(partitions)


_PARTITION_JSON: dict[PartitionOutcome, str] = {}


def partitions_json(outcomes: Sequence[PartitionOutcome]) -> str:
    """The outcomes as a JSON array, each kept once made (a lookup's outcome object repeats until its store
    partition's position moves: the engine hands out one per partition)."""
    out = []
    for p in outcomes:
        text = _PARTITION_JSON.get(p)
        if text is None:
            if len(_PARTITION_JSON) > 4096:
                _PARTITION_JSON.clear()
            text = _PARTITION_JSON[p] = _json(p.to_json())
        out.append(text)
    return "[" + ",".join(out) + "]"


def data_stream(answer: Answer, context: Any, call: CallState, max_response_bytes: int) -> fl.FlightDataStream:
    """What DoGet sends: an answer already whole goes out from pyarrow's C++ side (no Python per batch, the
    trailers set now); a running one through ``stream``."""
    if answer.whole is None:
        return fl.GeneratorStream(answer.schema, stream(answer, context, call, max_response_bytes))
    try:
        answer.bytes_sent = sum(b.nbytes for b in answer.whole)
        if answer.bytes_sent > max_response_bytes:
            answer.failed, answer.bytes_sent = "RESPONSE_TOO_LARGE", 0
            raise flight_error(ResponseTooLarge(
                f"the answer is larger than the server's response limit of {max_response_bytes:,} bytes; add a "
                "LIMIT, select fewer columns, or aggregate"), context)
        answer.rows_sent = sum(b.num_rows for b in answer.whole)
        context.add_trailer(POSITION_TRAILER, answer.position)
        context.add_trailer(PARTITIONS_TRAILER, answer.partitions)
        return fl.RecordBatchStream(pa.Table.from_batches(answer.whole, answer.schema))
    finally:
        answer.close()


def stream(answer: Answer, context: Any, call: CallState, max_response_bytes: int) -> Iterator[pa.RecordBatch]:
    """DoGet's batches: the answer's, as they come, within the response budget; the Position and partitions
    follow as trailers. A failure after batches went out ends the stream with its status (never a short
    answer that looks complete); the statement ends with the stream, however it ends."""
    answer.liveness.call = call
    sent = 0
    try:
        for batch in answer.batches:
            if context.is_cancelled():
                answer.cancel.cancel()
                raise StatementCancelled("the statement was cancelled: the client went away")
            if answer.cancel.cancelled:
                raise StatementCancelled("the statement was cancelled (CancelFlightInfo)")
            sent += batch.nbytes
            if sent > max_response_bytes:
                raise ResponseTooLarge(f"the answer is larger than the server's response limit of "
                                       f"{max_response_bytes:,} bytes; add a LIMIT, select fewer columns, or aggregate")
            yield batch
            answer.rows_sent += batch.num_rows
            answer.bytes_sent = sent
        context.add_trailer(POSITION_TRAILER, answer.position)
        context.add_trailer(PARTITIONS_TRAILER, answer.partitions)
    except GatewayError as exc:
        answer.failed = exc.code
        raise flight_error(exc, context) from None
    except (fl.FlightError, pa.ArrowException):
        raise
    except Exception as exc:  # noqa: BLE001 - a bug ends the stream with INTERNAL, never a traceback
        if answer.cancel.cancelled:  # whatever the interrupted reader raised, it stopped because it was told to
            raise flight_error(StatementCancelled("the statement was cancelled"), context) from None
        log.error("a Flight answer failed while streaming", exc_info=exc)
        raise flight_error(GatewayInternalError(f"{type(exc).__name__}: {exc}"), context) from None
    finally:
        answer.close()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
