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
    """Reads whole messages from a socket, never more than ``max_message`` bytes for one."""

    def __init__(self, sock: socket.socket, max_message: int, body_timeout_s: float) -> None:
        self.sock = sock
        self.max_message = max_message
        self.body_timeout_s = body_timeout_s

    def _exact(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            try:
                chunk = self.sock.recv(min(n, 1 << 16))
            except TimeoutError:
                raise ClientGone(f"the client sent part of a message and nothing more for {self.body_timeout_s:.0f} s") from None
            except OSError as exc:
                raise ClientGone(str(exc)) from None
            if not chunk:
                raise ClientGone("the client closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _first(self, n: int) -> bytes:
        """The first bytes of a message: wait for them as long as the client likes, then time the rest."""
        self.sock.settimeout(None)
        first = self._exact(1)
        self.sock.settimeout(self.body_timeout_s)
        return first + (self._exact(n - 1) if n > 1 else b"")

    def startup(self) -> tuple[int, bytes]:
        """(code, payload) of a startup-phase packet: SSLRequest, CancelRequest, StartupMessage."""
        (length,) = _I32.unpack(self._first(4))
        if length < 8 or length > 10_000:
            raise ProtocolError(f"invalid length of startup packet: {length}")
        body = self._exact(length - 4)
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
        return kind, self._exact(length - 4)


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

    def portal_suspended(self) -> None:
        self.buf += b"s\0\0\0\4"

    def notice(self, fields: dict[str, str]) -> None:
        self.buf += _msg(b"N", b"".join(k.encode() + _cstr(v) for k, v in fields.items()) + b"\0")

    def error(self, fields: dict[str, str]) -> None:
        self.buf += _msg(b"E", b"".join(k.encode() + _cstr(v) for k, v in fields.items()) + b"\0")

    def flush(self, sock: socket.socket) -> None:
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            try:
                sock.sendall(data)
            except OSError as exc:
                raise ClientGone(str(exc)) from None
