"""What a response that never ends (a live answer: SUBSCRIBE over HTTP) needs of waitress.

Waitress runs each request's response in a handler thread of a fixed pool, and sends small writes only once
``send_bytes`` (64 KiB here, see ``http_server``) have gathered. A live answer holds its handler thread for as
long as it runs and must reach the client a message at a time, so each request gets ``environ["iqgate.stream"]``,
a ``StreamHooks`` whose ``streaming()`` context, for the length of the stream:

- lends the pool one more thread (the server's threads keep answering other requests however many live answers
  run; the thread is given back when the stream ends);
- makes the connection send every write at once, and hold at most ``STREAM_HIGH_WATER`` bytes unsent;

and whose ``backlog()`` says how many bytes the client has not taken yet (a client that stopped reading is one
the face ends, SUBSCRIBER_TOO_SLOW, instead of the server buffering for it). ``on_disconnect(fn)`` calls ``fn``
from the serving loop the moment the client closes the connection (a stream frees what it holds at once, not at
its next write). ``closing()`` turns true when the server stops, so streams end with their resume point rather
than holding the shutdown; ``abort()`` drops a connection whose client stopped reading.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .head_memo import MemoParser
from .inline import InlineChannel, install_inline
from .whole_answer import WholeAnswerTask

__all__ = ["StreamHooks", "ThreadLender", "install_stream_hooks", "STREAM_HIGH_WATER", "ENVIRON_KEY"]

log = logging.getLogger(__name__)

ENVIRON_KEY = "iqgate.stream"
STREAM_HIGH_WATER = 256 << 10  # bytes a live answer's connection may hold unsent


class ThreadLender:
    """Grows a waitress dispatcher's pool by one thread per running stream, and shrinks it back after."""

    def __init__(self, dispatcher: Any, threads: int) -> None:
        self._dispatcher = dispatcher
        self._base = threads
        self._lent = 0
        self._lock = threading.Lock()
        self.closing = threading.Event()

    @contextlib.contextmanager
    def lend(self) -> Iterator[None]:
        with self._lock:
            self._lent += 1
            if not self.closing.is_set():
                self._dispatcher.set_thread_count(self._base + self._lent)
        try:
            yield
        finally:
            with self._lock:
                self._lent -= 1
                if not self.closing.is_set():
                    self._dispatcher.set_thread_count(self._base + self._lent)

    @property
    def lent(self) -> int:
        return self._lent


class StreamHooks:
    """One request's hooks (see the module doc)."""

    __slots__ = ("_channel", "_lender")

    def __init__(self, channel: Any, lender: ThreadLender) -> None:
        self._channel = channel
        self._lender = lender

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        channel = self._channel
        adj = copy.copy(channel.adj)  # this connection's own: the server's stays as it is
        adj.send_bytes = 1
        adj.outbuf_high_watermark = STREAM_HIGH_WATER
        channel.adj = adj
        with self._lender.lend():
            yield

    def backlog(self) -> int:
        """Bytes written to the connection the client has not taken yet."""
        return int(self._channel.total_outbufs_len)

    def on_disconnect(self, fn: Callable[[], None]) -> None:
        channel = self._channel
        closed = channel.handle_close

        def handle_close() -> None:
            try:
                closed()
            finally:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - the serving loop must go on whatever a stream does
                    log.exception("a stream's disconnect callback failed")

        channel.handle_close = handle_close
        if not channel.connected:  # gone before the callback was set
            fn()

    def closing(self) -> bool:
        return self._lender.closing.is_set()

    def abort(self) -> None:
        """Close the connection now, whatever it holds unsent (a client that stopped reading): the serving loop
        closes it, and a write waiting for room ends (ClientDisconnected) instead of holding its thread."""
        channel = self._channel
        channel.server.trigger.pull_trigger(lambda: channel.handle_close() if channel.connected else None)


def install_stream_hooks(server: Any, threads: int, inline: bool = False) -> ThreadLender:
    """Give every request of ``server`` (a waitress TcpWSGIServer) its ``StreamHooks``, and send small whole
    answers at once (``whole_answer``); ``inline``: the serving loop answers what the app lets it (inline.py)."""
    lender = ThreadLender(server.task_dispatcher, threads)

    class _Task(WholeAnswerTask):
        def get_environment(self) -> dict[str, Any]:
            environ: dict[str, Any] = super().get_environment()
            environ[ENVIRON_KEY] = StreamHooks(self.channel, lender)
            return environ

    class _Channel(InlineChannel):
        task_class = _Task
        parser_class = MemoParser  # a repeated request head is not parsed again (head_memo.py)

    server.channel_class = _Channel
    if inline:
        install_inline(server)
    return lender
