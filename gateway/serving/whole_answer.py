"""A small answer whose length is known goes out in one ``send`` from the handler thread that made it.

Why: waitress writes a response's status line and headers, then its body,
each into the connection's buffer; with ``send_bytes`` at 64 KiB
(``http_server``: two sends per request had cost throughput) neither is
sent by the handler thread, which pulls the serving loop's trigger and the
loop sends them. A point lookup's answer (~300–500 bytes, one piece with a
Content-Length) then waits for a second thread hand-off, the loop's wake-up
and the GIL, after the answer is ready: measured with one keep-alive
client, 0.254 ms p50 against 0.122 ms for a bare waitress app (issue 50).

Here headers and body are joined and sent at once by the handler thread,
under the connection's buffer lock, when nothing is waiting before them;
whatever the socket does not take (a full send buffer) or an error goes
into the buffer for the serving loop as before (it is woken at the end of
every request). Sent straight from the handler thread, never put in the
buffer first: a buffer holding bytes makes the loop's poll report the
socket writable at once, and the loop spun on it, taking the GIL from the
handler thread that was about to flush (a ~4 ms p99 with one client).
Answers in several pieces (streamed JSON, NDJSON, live answers), and any
answer larger than ``send_bytes``, are written as waitress writes them.

A task the serving loop runs itself (``inline``, inline.py) must never wait
for the client: its whole answer goes the same way whatever its size, and
what the socket does not take is left in the buffer without waitress's
high-water wait (which only the loop, this thread, could end).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from waitress.task import WSGITask
from waitress.utilities import build_http_date

from ..http.fast import INLINE_KEY

__all__ = ["WholeAnswerTask", "http_date"]

_name = itemgetter(0)
_CAPITALIZED: dict[str, str] = {}  # a response header's name as waitress writes it ("X-IQ-Position" -> "X-Iq-Position")
_date: tuple[int, str] = (0, "")  # the Date of the current second


def http_date(when: float) -> str:
    """``waitress.utilities.build_http_date(when)``, formatted once per second."""
    global _date
    second = int(when)
    cached = _date
    if cached[0] != second:
        cached = _date = (second, build_http_date(second))
    return cached[1]


def _capitalized(name: str) -> str:
    out = _CAPITALIZED.get(name)
    if out is None:
        out = "-".join([x.capitalize() for x in name.split("-")])
        if len(_CAPITALIZED) < 512:
            _CAPITALIZED[name] = out
    return out


class WholeAnswerTask(WSGITask):
    """A WSGI task that sends a whole small answer (one piece, its Content-Length) in one system call."""

    inline = False  # run by the serving loop itself (inline.py)

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        if self.inline:
            environ[INLINE_KEY] = True
        return environ

    def build_response_header(self) -> bytes:
        """Waitress's status line and headers, byte for byte, for the common answer (HTTP/1.1, a body with its
        Content-Length, a connection kept open) without its per-request costs (each header name re-capitalized,
        the date formatted anew, a sort key made per call): 8.8 -> 4.8-6.0 us in a hot loop, on every answer.
        Any other answer is waitress's own (tests/gateway/serving/test_whole_answer_header.py compares the two)."""
        if (self.version != "1.1" or not self.has_body
                or self.request.headers.get("CONNECTION", "").lower() == "close"):
            return bytes(super().build_response_header())
        headers = []
        content_length = date = server = None
        for name, value in self.response_headers:
            name = _capitalized(name)
            if name == "Content-Length":
                content_length = value
            elif name == "Date":
                date = value
            elif name == "Server":
                server = value
            headers.append((name, value))
        if content_length is None:
            if self.content_length is None:  # chunked, and the connection's end: waitress decides
                return bytes(super().build_response_header())
            headers.append(("Content-Length", str(self.content_length)))
        ident = self.channel.server.adj.ident
        if not server:
            if ident:
                headers.append(("Server", ident))
        else:
            headers.append(("Via", ident or "waitress"))
        if not date:
            headers.append(("Date", http_date(self.start_time)))
        self.response_headers = headers
        lines = [f"HTTP/1.1 {self.status}"]
        lines += [f"{name}: {value}" for name, value in sorted(headers, key=_name)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def write(self, data: bytes) -> None:
        channel = self.channel
        if (self.wrote_header or not self.complete or not data or self.content_length != len(data)
                or not self.has_body or (len(data) >= channel.adj.send_bytes and not self.inline)):
            super().write(data)
            return
        answer = self.build_response_header() + data
        self.wrote_header = True
        self.content_bytes_written += len(data)
        with channel.outbuf_lock:
            if channel.connected and not channel.total_outbufs_len:  # nothing before it: it may go now
                try:
                    answer = answer[channel.send(answer, do_close=False):]
                except OSError:  # left to write_soon and the serving loop, which close the connection
                    pass
        if answer and self.inline:
            if channel.connected:
                with channel.outbuf_lock:
                    channel.outbufs[-1].append(answer)
                    channel.total_outbufs_len += len(answer)
        elif answer:
            channel.write_soon(answer)
