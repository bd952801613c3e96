"""Pings and point lookups answered on the serving loop's own thread, without a hand-off to a handler thread.

Why: waitress parses a request on its serving loop and hands the connection
to a handler thread, which builds the environ, runs the app and answers; the
hand-off (a condition variable, a thread wake-up and the GIL passing twice)
costs more than a point lookup itself (~20 µs through the point lane). With
one keep-alive client a bare waitress app answered in 0.12-0.14 ms and
``iqgate serve`` in 0.23-0.24 ms (issue 50).

How: when the request the loop just parsed is its connection's only one and
asks ``POST /v1/sql`` or ``GET /v1/ping``, the loop runs the app itself with
``environ[INLINE_KEY]`` set. The app (gateway/http/fast.py) then answers only
what cannot wait, plan or scan — a ping, or a statement the point lane
answers (a cached plan, a local partition, an idle connection), asked by a
caller whose token needs no password hash and whose admission would not
wait for a slot (``Admission.admit(may_wait=False)``) — and raises ``NotInline`` before
doing anything for every other request, which goes to a handler thread as
before (its body rewound). So the loop is held for a lookup's tens of
microseconds, never for a statement's budget, and every limit, answer and
face stays as it was: the answer is made by the same code and sent by the
same task class (``whole_answer``), never waiting for the client (what the
socket does not take waits in the connection's buffer for the loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from waitress.channel import ClientDisconnected, HTTPChannel

from ..http.fast import NotInline

__all__ = ["InlineChannel", "InlineCounts", "answers_inline", "install_inline", "INLINE_PATHS"]

log = logging.getLogger(__name__)

INLINE_PATHS = frozenset({("POST", "/v1/sql"), ("GET", "/v1/ping")})

_here = threading.local()  # on the serving loop, inside ``received``: the channel and whether a request waits


class InlineChannel(HTTPChannel):
    """A waitress channel whose serving loop answers a request itself where the app can (see the module doc)."""

    def received(self, data: bytes) -> bool:
        _here.channel = self
        _here.pending = False
        try:
            more = bool(super().received(data))
        finally:
            _here.channel = None
        if _here.pending:
            _here.pending = False
            _answer(self)
        return more


def answers_inline(app: Any) -> bool:
    """Does ``app`` (a Flask app or WSGI callable) say ``NotInline`` for what it must not answer on the loop?"""
    return bool(getattr(getattr(app, "wsgi_app", app), "answers_inline", False))


def install_inline(server: Any) -> None:
    """Let ``server``'s loop keep a request it just parsed for itself (``add_task`` is where waitress hands it
    off; only the loop, inside ``InlineChannel.received``, keeps one)."""
    dispatch: Callable[[Any], None] = server.add_task

    def add_task(channel: Any) -> None:
        if getattr(_here, "channel", None) is channel and _inline_shape(channel):
            _here.pending = True
            return
        dispatch(channel)

    server.add_task = add_task
    server.dispatch_task = dispatch
    server.inline_counts = InlineCounts()


class InlineCounts:
    """Requests the loop answered itself, and those it kept and then handed to a handler thread (NotInline)."""

    __slots__ = ("answered", "handed_on")

    def __init__(self) -> None:
        self.answered = 0
        self.handed_on = 0


def _inline_shape(channel: Any) -> bool:
    request = channel.requests[0]
    return (not request.error and not request.expect_continue and (request.command, request.path) in INLINE_PATHS
            and not channel.will_close)


def _answer(channel: Any) -> None:
    """Run the channel's first request here; hand it to a handler thread where the app says ``NotInline``."""
    request = channel.requests[0]
    body = request.get_body_stream()
    at = body.tell()
    task = channel.task_class(channel, request)
    task.inline = True
    counts = channel.server.inline_counts
    counts.answered += 1  # before the answer is sent: a client that has it reads the count with it
    try:
        task.service()
    except NotInline:
        counts.answered -= 1
        counts.handed_on += 1
        body.seek(at)
        channel.server.dispatch_task(channel)
        return
    except ClientDisconnected:
        task.close_on_finish = True
    except Exception:  # noqa: BLE001 - as waitress's own service(): the handler thread answers (a 500 if it fails)
        log.exception("answering %s %s on the serving loop", request.command, request.path)
        if not task.wrote_header:
            counts.answered -= 1
            counts.handed_on += 1
            body.seek(at)
            channel.server.dispatch_task(channel)
            return
        task.close_on_finish = True
    _done(channel, task, request)


def _done(channel: Any, task: Any, request: Any) -> None:
    """What waitress's ``HTTPChannel.service`` does after a request (the loop needs no trigger: it is here)."""
    if task.close_on_finish:
        with channel.requests_lock:
            channel.close_when_flushed = True
            for r in channel.requests:
                r.close()
            channel.requests = []
    else:
        request.close()
        with channel.requests_lock:
            channel.requests.pop(0)
            if channel.connected and channel.requests:  # a pipelined request came with it
                channel.server.dispatch_task(channel)
    channel.last_activity = time.time()
