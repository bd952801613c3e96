"""Live answers over HTTP: ``POST /v1/sql`` with a SUBSCRIBE (or EMIT CHANGES) streams its changes.

Two formats, one message shape (README "Live answers" documents both; tools parse them, keep them stable):

- ``application/x-ndjson``: a first line ``{"columns": [...], "statement": "subscribe", "store": …,
  "identity": [...], "appended": [...]}``, then one object per line: ``{"op": "insert"|"upsert"|"delete",
  "position": {…}, "row": [...]}``, ``{"op": "progress", "position": {…}}``, ``{"op": "reset", "position": {…},
  "columns": [...]}`` (a rebuilt store: drop every row held). The stream ends only with an error line in the
  one error shape, whose ``resume_from`` is where to continue.
- ``text/event-stream`` (SSE, for browsers): the same objects as ``data:``, the ``op`` as the event name (the
  first event is ``columns``, the last ``error``); an event after which the client holds a whole answer carries
  that Position as its ``id``, so a reconnect's ``Last-Event-ID`` resumes exactly there.

``Last-Event-ID`` (either format) resumes after the Position it carries, without a snapshot. A client that goes
away ends the subscription at once (its feed, its outbox, the thread); a client that stops reading is ended
SUBSCRIBER_TOO_SLOW once the connection holds ``STREAM_HIGH_WATER`` bytes it has not taken. The response-size
budget does not apply (the answer is endless by design); each message is small.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from flask import Response

from stores.iqv2.position import Position

from ..engine.errors import BadRequest, GatewayError, GatewayInternalError, SubscriptionError
from ..engine.json_values import dumps
from ..engine.statement import bound_from
from .limits import SqlRequest
from .renderers import NDJSON

__all__ = ["SSE", "live_media", "live_response", "STREAM_KEY"]

SSE = "text/event-stream"
STREAM_KEY = "iqgate.stream"     # gateway.serving.live_streams puts the connection's hooks there
_TAKE = 512                      # messages rendered per write
_WAIT_S = 1.0                    # how often a quiet stream looks at its connection (a disconnect wakes it at once)
_STALL_S = 30.0                  # a client that takes nothing of a full connection for this long is too slow


def live_media(accept: str | None, chosen: str) -> str | None:
    """The format a live answer goes out in, for a request that said ``accept`` (and was answered ``chosen``
    for finite answers); None when the client asked for a finite format only (JSON, CSV, Arrow)."""
    if accept and SSE in accept:
        return SSE
    if chosen == NDJSON:
        return NDJSON
    if not accept or accept.strip() in ("*/*", "*"):  # curl, fetch: anything goes, so the stream it is
        return NDJSON
    return None


def live_response(gateway: Any, req: SqlRequest, environ: dict[str, Any], media: str, *,
                  principal: Any = None) -> Response:
    """The streamed answer of a subscription (errors before the first byte keep their status code); ``principal``
    is the user asking (their grants hold for live answers as for any statement)."""
    resume = _last_event_id(environ.get("HTTP_LAST_EVENT_ID"))
    sub = gateway.subscribe(req.sql, req.params, req.position, session=req.session, resume=resume,
                            principal=principal)
    try:
        head = _head(sub, media)
    except BaseException:
        sub.close()
        raise
    hooks = environ.get(STREAM_KEY)
    gone = environ.get("waitress.client_disconnected")
    render = _sse if media == SSE else _ndjson

    def body() -> Iterator[bytes]:
        cache: dict[int, tuple[Position, str]] = {}
        sent_id: list[Position | None] = [sub.position]
        stalled_since: float | None = None
        try:
            if hooks is not None:
                hooks.on_disconnect(sub.close)  # the client went: free everything now, not at the next write
            with hooks.streaming() if hooks is not None else contextlib.nullcontext():
                yield head
                while True:
                    if (gone is not None and gone()) or (hooks is not None and hooks.closing()):
                        if hooks is not None and hooks.closing():
                            yield _end(SubscriptionError(
                                "the server is stopping: resume from the Position given", code="SUBSCRIPTION_CLOSED",
                                resume_from=sub.position), media)
                        return
                    if hooks is not None and hooks.backlog() >= _HIGH_WATER:
                        now = time.monotonic()
                        stalled_since = stalled_since or now
                        if sub.ending or now - stalled_since > _STALL_S:
                            # the client reads nothing: no line would reach it (it resumes from its last progress)
                            # and a write would wait for room for ever; the connection goes, and its thread
                            sub.close("SUBSCRIBER_TOO_SLOW")
                            hooks.abort()
                            return
                        time.sleep(0.05)
                        continue
                    stalled_since = None
                    try:
                        changes = sub.take(_TAKE, _WAIT_S)
                    except GatewayError as exc:
                        if sub.closed:  # closed when the client went: nobody to tell
                            return
                        yield _end(exc, media)
                        return
                    if changes:
                        yield render(changes, sub, cache, sent_id)
        except GeneratorExit:
            raise
        except Exception as exc:  # noqa: BLE001 - the status line is gone; the client must still learn of it
            yield _end(GatewayInternalError(f"{type(exc).__name__}: {exc}"), media)
        finally:
            sub.close()

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    if sub.position is not None:
        headers["X-IQ-Position"] = sub.position.to_json()
    return Response(body(), mimetype=media, headers=headers)


_HIGH_WATER = 256 << 10  # unsent bytes on the connection past which the stream waits for the client


def _last_event_id(raw: str | None) -> Position | None:
    if not raw or not raw.strip():
        return None
    try:
        return bound_from(raw)
    except BadRequest as exc:
        raise BadRequest(f"the Last-Event-ID header is not a Position a subscription sent: {exc.message}") from None


def _columns(columns: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": n, "type": t} for n, t in columns]


def _head(sub: Any, media: str) -> bytes:
    doc = {"columns": _columns(sub.columns), "statement": "subscribe", "store": sub.store,
           "identity": list(sub.identity), "appended": list(sub.appended),
           "position": None if sub.position is None else sub.position.to_json_map()}
    text = dumps(doc)
    if media == SSE:
        return ("retry: 1000\nevent: columns\ndata: " + text + "\n\n").encode()
    return (text + "\n").encode()


def _position_text(position: Position, cache: dict[int, tuple[Position, str]]) -> str:
    """A message's Position as JSON, made once per batch (every message of a batch has the same object)."""
    got = cache.get(id(position))
    if got is not None and got[0] is position:
        return got[1]
    if len(cache) > 64:
        cache.clear()
    text = position.to_json()
    cache[id(position)] = (position, text)
    return text


_RENDERED: dict[int, tuple[Any, str]] = {}  # a message's line, by the message (shared by subscriptions of one SQL)
_RENDERED_MAX = 10_000  # bounded: a batch of the subscriptions of one SQL, not the stream


def _message(change: Any, cache: dict[int, tuple[Position, str]]) -> str:
    """A message as its JSON object. Subscriptions with the same SQL get the very same messages of a batch
    (``changes.Applier``), so the text is made once for all of them (the message kept beside its id)."""
    got = _RENDERED.get(id(change))
    if got is not None and got[0] is change:
        return got[1]
    text = _render(change, cache)
    if change.op != "progress":
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        _RENDERED[id(change)] = (change, text)
    return text


def _render(change: Any, cache: dict[int, tuple[Position, str]]) -> str:
    head = '{"op":"' + change.op + '","position":' + _position_text(change.position, cache)
    if change.row is not None:
        return head + ',"row":' + dumps(change.row) + "}"
    if change.columns is not None:
        return head + ',"columns":' + dumps(_columns(change.columns)) + "}"
    return head + "}"


def _ndjson(changes: list[Any], sub: Any, cache: dict[int, tuple[Position, str]],
            sent_id: list[Position | None]) -> bytes:
    return "".join(_message(c, cache) + "\n" for c in changes).encode()


def _sse(changes: list[Any], sub: Any, cache: dict[int, tuple[Position, str]], sent_id: list[Position | None]
         ) -> bytes:
    out = []
    last = len(changes) - 1
    for i, c in enumerate(changes):
        event = "event: " + c.op + "\ndata: " + _message(c, cache) + "\n"
        if i == last and sub.position is not None and sub.position is not sent_id[0]:
            # the reader holds a whole answer after this event: the resume point a reconnect sends back
            sent_id[0] = sub.position
            event = "id: " + sub.position.to_json() + "\n" + event
        out.append(event + "\n")
    return "".join(out).encode()


def _end(exc: GatewayError, media: str) -> bytes:
    text = dumps(exc.to_error_body())
    if media == SSE:
        return ("event: error\ndata: " + text + "\n\n").encode()
    return (text + "\n").encode()
