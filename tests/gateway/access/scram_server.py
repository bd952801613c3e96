"""A PostgreSQL server that does only start-up and SCRAM, against ``Users.scram_verifier``: for real clients.

Why not gateway/pg's server: its authenticator still derives its keys from
the single token (the lead wires verifiers into it); this one frames the same
protocol v3 messages around ``ScramExchange`` so libpq, pg8000 and asyncpg
check our verifiers and our server signature with their own SCRAM code.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

from gateway.access import ScramExchange, ScramMalformed, ScramRejected, ScramVerifier

_SSL, _GSS = 80877103, 80877104


def _recv(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError("client went away")
        out += chunk
    return out


def _message(conn: socket.socket) -> tuple[bytes, bytes]:
    kind = _recv(conn, 1)
    (size,) = struct.unpack("!i", _recv(conn, 4))
    return kind, _recv(conn, size - 4)


def _send(conn: socket.socket, kind: bytes, payload: bytes) -> None:
    conn.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)


def _auth(conn: socket.socket, code: int, extra: bytes = b"") -> None:
    _send(conn, b"R", struct.pack("!i", code) + extra)


class ScramOnlyServer:
    """Accepts connections on 127.0.0.1 until closed; ``outcomes`` records (user, "ok" | "rejected" | "malformed")."""

    def __init__(self, verifier_for: Callable[[str], ScramVerifier]) -> None:
        self.verifier_for = verifier_for
        self.outcomes: list[tuple[str, str]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ScramOnlyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept (close alone does not, on Linux)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(5)

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        user = "?"
        try:
            while True:
                (size,) = struct.unpack("!i", _recv(conn, 4))
                body = _recv(conn, size - 4)
                (code,) = struct.unpack("!i", body[:4])
                if code in (_SSL, _GSS):
                    conn.sendall(b"N")
                    continue
                break
            words = body[4:].split(b"\0")
            params = dict(zip(words[0::2], words[1::2]))
            user = params.get(b"user", b"").decode()
            exchange = ScramExchange(self.verifier_for(user))
            _auth(conn, 10, b"SCRAM-SHA-256\0\0")
            _, payload = _message(conn)
            mech, _, rest = payload.partition(b"\0")
            (n,) = struct.unpack("!i", rest[:4])
            _auth(conn, 11, exchange.server_first(rest[4:4 + n].decode()).encode())
            _, payload = _message(conn)
            final = exchange.server_final(payload.decode())
            _auth(conn, 12, final.encode())
            _auth(conn, 0)
            for k, v in (("server_version", "16.0"), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
                         ("DateStyle", "ISO, MDY"), ("integer_datetimes", "on"), ("TimeZone", "UTC"),
                         ("standard_conforming_strings", "on")):
                _send(conn, b"S", k.encode() + b"\0" + v.encode() + b"\0")
            _send(conn, b"K", struct.pack("!ii", 1, 2))
            _send(conn, b"Z", b"I")
            self.outcomes.append((user, "ok"))
            while _message(conn)[0] != b"X":
                pass
        except ScramRejected:
            self.outcomes.append((user, "rejected"))
            _send(conn, b"E", b"SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed for user \"" +
                  user.encode() + b"\"\0\0")
        except ScramMalformed:
            self.outcomes.append((user, "malformed"))
            _send(conn, b"E", b"SFATAL\0VFATAL\0C08P01\0Mmalformed SCRAM message\0\0")
        except (ConnectionError, OSError, struct.error):
            pass
        finally:
            conn.close()
