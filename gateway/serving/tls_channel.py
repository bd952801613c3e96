"""HTTPS on the HTTP port: TLS terminated in the serving process, in waitress's own channel.

Waitress speaks plain HTTP only. Rather than a proxy in front (a second
copy of every byte, a second hop), each accepted connection is wrapped in
TLS where waitress makes its channel (``TlsChannel``, set as the server's
``channel_class``), and the channel's reads and writes go through the TLS
socket without blocking:

- the handshake runs in the serving loop, a step each time the socket is
  ready (``do_handshake`` on a non-blocking socket: want-read / want-write
  decide which readiness the loop waits for next);
- a read drains what TLS has decrypted, not only what the kernel reports:
  a TLS record can hold more than one read takes, and the rest would sit in
  the TLS buffer with no readiness event to wake the loop;
- waitress writes from its handler threads while the loop reads the same
  connection (request lookahead), and an OpenSSL connection must not be
  used by two threads at once: every TLS call of a channel holds its lock
  (sockets are non-blocking, so a call never waits under it);
- a plain-HTTP request to the HTTPS port gets a plain 400 saying so
  (nginx's courtesy) instead of a connection that just closes.

``tls_context`` makes the server context: TLS 1.2 or later, no
renegotiation, ALPN http/1.1; a certificate that cannot be loaded is a
ValueError naming both files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import ssl
import threading
import time
from typing import Any

from waitress.channel import HTTPChannel

__all__ = ["tls_context", "tls_channel", "TlsChannel"]

_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError)
_GONE = frozenset({errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNABORTED, errno.EPIPE, errno.EBADF})
_PLAIN_HTTP = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 58\r\n"
               b"\r\nthis port speaks HTTPS: use https:// to reach this server\n")
_DRAIN_READS = 64  # reads per readiness event at most (a huge pipelined burst waits for the next turn)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """The server's TLS context for ``cert`` (PEM, with its chain) and ``key``; ValueError naming what is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot load the TLS certificate --tls-cert {cert} with --tls-key {key}: {reason}") from None
    with contextlib.suppress(NotImplementedError):
        ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class TlsChannel(HTTPChannel):
    """A waitress channel over a TLS connection (see the module doc); ``context`` is set by ``tls_channel``."""

    context: ssl.SSLContext

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:  # noqa: A002
        self._tls_lock = threading.RLock()
        self._handshaken = False
        self._want_write = False
        sock.setblocking(False)
        tls = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        super().__init__(server, tls, addr, adj, map)

    # -- the loop asks what to wait for ---------------------------------------------------------------
    def readable(self) -> bool:
        if not self._handshaken:
            return not self._want_write
        return bool(super().readable())

    def writable(self) -> bool:
        if not self._handshaken:
            return self._want_write
        return bool(super().writable())

    # -- the handshake ----------------------------------------------------------------------------------
    def _handshake(self) -> None:
        try:
            with self._tls_lock:
                self.socket.do_handshake()
        except ssl.SSLWantReadError:
            self._want_write = False
            return
        except ssl.SSLWantWriteError:
            self._want_write = True
            return
        except (ssl.SSLError, OSError) as exc:
            if getattr(exc, "reason", None) == "HTTP_REQUEST":  # plain HTTP sent to the HTTPS port
                with contextlib.suppress(OSError):
                    os.write(self.socket.fileno(), _PLAIN_HTTP)
            self.handle_close()
            return
        self._handshaken = True
        self._want_write = False
        self.last_activity = time.time()
        if self.socket.pending():  # the request may have come with the handshake's last flight
            self.handle_read()

    # -- reading and writing ---------------------------------------------------------------------------
    def handle_read(self) -> None:
        if not self._handshaken:
            self._handshake()
            return
        for _ in range(_DRAIN_READS):
            try:
                with self._tls_lock:
                    data = self.socket.recv(self.adj.recv_bytes)
            except _WOULD_BLOCK:
                return
            except (ssl.SSLError, OSError):
                self.handle_close()
                return
            if not data:  # the client closed (close_notify, or its end of the TCP connection)
                self.handle_close()
                self.connected = False
                return
            self.last_activity = time.time()
            self.received(data)
            if not self.socket.pending():
                return

    def handle_write(self) -> None:
        if not self._handshaken:
            self._handshake()
            return
        super().handle_write()

    def send(self, data: Any, do_close: bool = True) -> int:
        with self._tls_lock:
            try:
                return int(self.socket.send(data))
            except _WOULD_BLOCK:
                return 0
            except ssl.SSLError:  # the peer's TLS ended (EOF, close_notify, a fatal alert): it is gone
                if do_close:
                    self.handle_close()
                return 0
            except OSError as why:
                if why.args and why.args[0] == errno.EWOULDBLOCK:
                    return 0
                if why.args and why.args[0] in _GONE:
                    if do_close:
                        self.handle_close()
                    return 0
                raise

    def close(self) -> None:
        with self._tls_lock:  # never under a handler thread's TLS write
            super().close()


def tls_channel(context: ssl.SSLContext, base: type[HTTPChannel] = HTTPChannel) -> type[TlsChannel]:
    """The channel class of a server whose connections speak TLS with ``context``, over the server's own channel
    class ``base`` (its task class: live answers' hooks, whole answers; answers on the serving loop)."""
    return type("TlsChannel", (TlsChannel, base), {"context": context})
