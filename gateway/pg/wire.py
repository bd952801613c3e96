"""PostgreSQL protocol v3 framing: reading frontend messages within limits, building backend messages.

Every frontend message after startup is a type byte and an Int32 length that
counts itself; a startup-phase packet has no type byte. A length that is
negative, shorter than the header or longer than the limit cannot be
resynchronised, so it ends the connection (after an ErrorResponse) instead
of being read. Reads wait without limit for the first byte of a message (an
idle pooled connection is normal) and then at most ``body_timeout_s`` for
the rest (a client that stalls mid-message is cut off).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "ProtocolError", "ClientGone", "MessageReader", "Buffer", "Out",
    "SSL_REQUEST", "GSSENC_REQUEST", "CANCEL_REQUEST", "PROTOCOL_3",
]

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
PROTOCOL_3 = 196608

_I32 = struct.Struct("!i")
_I16 = struct.Struct("!h")


class ProtocolError(Exception):
    """The client broke the protocol; ``sqlstate`` goes into the ErrorResponse sent before closing."""

    def __init__(self, message: str, sqlstate: str = "08P01") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class ClientGone(Exception):
    """The client closed the connection (or stalled past the timeout); nothing more can be sent."""


class MessageReader:
    """Reads whole messages from a socket, never more than ``max_message`` bytes for one.

    Buffered: one ``recv`` takes whatever the client has sent (a driver sends
    Bind, Execute and Sync in one packet), and the socket's timeout is only
    changed when the wait switches between "for a new message" (no limit)
    and "for the rest of one" (``body_timeout_s``). Reading a message a
    header and a body at a time, with two timeout changes each, cost the PG
    port about 15 system calls per point lookup, every one of them a GIL
    hand-over between connection threads.
    """

    _RECV = 1 << 16

    def __init__(self, sock: socket.socket, max_message: int, body_timeout_s: float) -> None:
        self.sock = sock
        self.max_message = max_message
        self.body_timeout_s = body_timeout_s
        self._buf = bytearray()
        self._pos = 0  # where the unread bytes of _buf start
        self._timed: bool | None = None  # the socket's timeout as this reader last set it (None: unknown)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as (part of) a message."""
        return len(self._buf) - self._pos

    def refuse_early_data(self) -> None:
        """Before a TLS handshake: bytes already received after the SSLRequest were sent in the clear, where
        only the handshake may follow. PostgreSQL refuses them (CVE-2021-23214), so does this."""
        if self.buffered:
            raise ProtocolError("received unencrypted data after SSL request")

    def switch_to(self, sock: Any) -> None:
        """Read from ``sock`` from now on (the TLS socket wrapping this one's connection; the caller refused early
        data before the handshake, and nothing is read between)."""
        self.sock = sock
        self._timed = None

    def _fill(self, n: int, timed: bool) -> None:
        """Receive until at least ``n`` unread bytes are buffered."""
        while len(self._buf) - self._pos < n:
            if self._timed is not timed:
                self.sock.settimeout(self.body_timeout_s if timed else None)
                self._timed = timed
            try:
                chunk = self.sock.recv(max(self._RECV, n - (len(self._buf) - self._pos)))
            except TimeoutError:
                raise ClientGone(f"the client sent part of a message and nothing more for {self.body_timeout_s:.0f} s") from None
            except OSError as exc:
                raise ClientGone(str(exc)) from None
            if not chunk:
                raise ClientGone("the client closed the connection")
            if self._pos:
                del self._buf[:self._pos]
                self._pos = 0
            self._buf += chunk

    def _take(self, n: int) -> bytes:
        self._fill(n, True)
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += n
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return out

    def _first(self, n: int) -> bytes:
        """The first bytes of a message: wait for them as long as the client likes, then time the rest."""
        if not self.buffered:
            self._fill(1, False)
        return self._take(n)

    def startup(self) -> tuple[int, bytes]:
        """(code, payload) of a startup-phase packet: SSLRequest, CancelRequest, StartupMessage."""
        (length,) = _I32.unpack(self._first(4))
        if length < 8 or length > 10_000:
            raise ProtocolError(f"invalid length of startup packet: {length}")
        body = self._take(length - 4)
        return _I32.unpack_from(body)[0], body[4:]

    def message(self) -> tuple[bytes, bytes]:
        """(type byte, payload) of a regular message."""
        head = self._first(5)
        kind, length = head[:1], _I32.unpack_from(head, 1)[0]
        if length < 4:
            raise ProtocolError(f"invalid message length {length} for message type {kind!r}")
        if length - 4 > self.max_message:
            raise ProtocolError(f"message of type {kind!r} is {length - 4} bytes; the limit is {self.max_message}",
                                "54000")
        return kind, self._take(length - 4)


class Buffer:
    """A cursor over one message's payload; running past its end is a ProtocolError, not an IndexError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("message is shorter than its contents say (truncated message)")

    def int32(self) -> int:
        self._need(4)
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def int16(self) -> int:
        self._need(2)
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(v)

    def byte(self) -> bytes:
        self._need(1)
        self.pos += 1
        return self.data[self.pos - 1:self.pos]

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("a string in the message is not NUL-terminated (truncated message)")
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("a string in the message is not valid UTF-8", "22021") from None

    def take(self, n: int) -> bytes:
        self._need(n)
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def rest(self) -> bytes:
        out = self.data[self.pos:]
        self.pos = len(self.data)
        return out


def _msg(kind: bytes, payload: bytes) -> bytes:
    return kind + _I32.pack(len(payload) + 4) + payload


def _cstr(text: str) -> bytes:
    return text.replace("\0", "").encode("utf-8") + b"\0"


class Out:
    """Backend messages, built into one buffer and sent on ``flush`` (one write per round trip)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.flushed = 0  # bytes sent so far (with ``len(buf)``: everything ever written here)

    def raw(self, data: bytes) -> None:
        self.buf += data

    def auth(self, code: int, extra: bytes = b"") -> None:
        self.buf += _msg(b"R", _I32.pack(code) + extra)

    def parameter_status(self, name: str, value: str) -> None:
        self.buf += _msg(b"S", _cstr(name) + _cstr(value))

    def backend_key(self, pid: int, secret: int) -> None:
        self.buf += _msg(b"K", _I32.pack(pid) + _I32.pack(secret))

    def ready(self, status: str) -> None:
        self.buf += _msg(b"Z", status.encode())

    def row_description(self, fields: Sequence[tuple[str, int, int, int]]) -> None:
        """fields: (name, type oid, type size, format code)."""
        parts = [_I16.pack(len(fields))]
        for name, oid, size, fmt in fields:
            parts.append(_cstr(name) + struct.pack("!ihihih", 0, 0, oid, size, -1, fmt))
        self.buf += _msg(b"T", b"".join(parts))

    def no_data(self) -> None:
        self.buf += b"n\0\0\0\4"

    def parameter_description(self, oids: Sequence[int]) -> None:
        self.buf += _msg(b"t", _I16.pack(len(oids)) + b"".join(_I32.pack(o) for o in oids))

    def data_row(self, values: Iterable[bytes | None]) -> None:
        parts = []
        n = 0
        for v in values:
            n += 1
            parts.append(b"\xff\xff\xff\xff" if v is None else _I32.pack(len(v)) + v)
        payload = _I16.pack(n) + b"".join(parts)
        self.buf += b"D" + _I32.pack(len(payload) + 4) + payload

    def command_complete(self, tag: str) -> None:
        self.buf += _msg(b"C", _cstr(tag))

    def empty_query(self) -> None:
        self.buf += b"I\0\0\0\4"

    def parse_complete(self) -> None:
        self.buf += b"1\0\0\0\4"

    def bind_complete(self) -> None:
        self.buf += b"2\0\0\0\4"

    def close_complete(self) -> None:
        self.buf += b"3\0\0\0\4"

    def copy_out_response(self, binary: bool, columns: int) -> None:
        """CopyOutResponse: the overall format and each column's (all text or all binary, as PostgreSQL)."""
        fmt = 1 if binary else 0
        self.buf += _msg(b"H", struct.pack("!bh", fmt, columns) + _I16.pack(fmt) * columns)

    def copy_data(self, data: bytes) -> None:
        self.buf += b"d" + _I32.pack(len(data) + 4) + data

    def copy_done(self) -> None:
        self.buf += b"c\0\0\0\4"

    def portal_suspended(self) -> None:
        self.buf += b"s\0\0\0\4"

    def notice(self, fields: dict[str, str]) -> None:
        self.buf += _msg(b"N", b"".join(k.encode() + _cstr(v) for k, v in fields.items()) + b"\0")

    def error(self, fields: dict[str, str]) -> None:
        self.buf += _msg(b"E", b"".join(k.encode() + _cstr(v) for k, v in fields.items()) + b"\0")

    @property
    def written(self) -> int:
        """Bytes written since this Out was made (sent and still buffered): a response's size is a difference."""
        return self.flushed + len(self.buf)

    def flush(self, sock: socket.socket) -> None:
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            self.flushed += len(data)
            try:
                sock.sendall(data)
            except OSError as exc:
                raise ClientGone(str(exc)) from None
