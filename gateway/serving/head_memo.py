"""A request's head parsed by waitress once per distinct head, not once per request.

Why: waitress's ``HTTPRequestParser.parse_header`` is pure Python — a
regular expression per header line, an exception per new header name, the
URI through ``urlsplit`` — and took 16.8 µs for a five-header ``POST
/v1/sql`` in a hot loop, half of what the point lane needs for the whole
lookup and a fifth of a ping's server time (issue 50). A keep-alive client
sends the same head again and again: the same method, path, Host, Accept,
Authorization and, for lookups of keys of one length, Content-Length.

``MemoParser`` is waitress's parser with ``parse_header`` remembered by
the head's exact bytes (and the server's URL scheme, the only setting it
reads): on a repeat the attributes waitress set the first time are set
again (the headers dict copied, the body's receiver made anew), which is
the same result for the same input — ``parse_header`` is a function of its
bytes. A head that waitress refuses is never remembered (the next one is
refused again by waitress itself), nor a chunked one, nor one longer than
``MAX_HEAD_BYTES``; at ``MAX_HEADS`` remembered heads the memo starts
again, so a client that sends a new head every time costs one dict insert
per request and the memo's memory stays under ~2 MB. Parses run on serving
loops (one per server in a process), which share the memo through single
dict operations. tests/gateway/serving/test_head_memo.py compares every
attribute with waitress's own parser over many heads.
"""

from __future__ import annotations

from typing import Any

from waitress.buffers import OverflowableBuffer
from waitress.parser import HTTPRequestParser
from waitress.receiver import FixedStreamReceiver

__all__ = ["MemoParser", "MAX_HEAD_BYTES", "MAX_HEADS"]

MAX_HEAD_BYTES = 2048  # a longer head (a large cookie, many headers) is parsed every time
MAX_HEADS = 512

# what waitress 3.x's parse_header sets on the parser (body_rcv, made per request, apart)
_FIELDS = ("first_line", "request_uri", "command", "version", "proxy_scheme", "proxy_netloc", "path", "query",
           "fragment", "url_scheme", "connection_close", "chunked", "expect_continue", "content_length")

_memo: dict[tuple[str, bytes], tuple[dict[str, Any], dict[str, str]]] = {}


class MemoParser(HTTPRequestParser):  # type: ignore[misc]  # waitress has no type hints
    """waitress's request parser, with a head it has parsed before not parsed again (the module doc)."""

    def parse_header(self, header_plus: bytes) -> None:
        key = (self.adj.url_scheme, header_plus)
        known = _memo.get(key)
        if known is not None:
            fields, headers = known
            self.__dict__.update(fields)
            self.headers = dict(headers)
            if self.content_length > 0:
                self.body_rcv = FixedStreamReceiver(self.content_length,
                                                    OverflowableBuffer(self.adj.inbuf_overflow))
            return
        super().parse_header(header_plus)  # raises for a head waitress refuses: nothing is remembered
        if self.chunked or len(header_plus) > MAX_HEAD_BYTES:
            return
        if len(_memo) >= MAX_HEADS:
            _memo.clear()
        state = self.__dict__
        _memo[key] = ({name: state[name] for name in _FIELDS if name in state}, dict(self.headers))
