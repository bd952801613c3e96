"""The PG port: a listener thread and one thread per connection, bounded in number.

A connection goes through start-up (SSLRequest answered 'S' and wrapped in
TLS when the server has a certificate, else 'N'; GSSENCRequest 'N'; a
CancelRequest looks the target up by process id and secret and cancels its
running statement; protocol 2 and anything else is refused), password
authentication of the startup user name against the server's users (``auth``), the parameter status
PostgreSQL clients expect, then the message loop (``session``). A
connection that breaks the protocol gets an ErrorResponse and is closed; one
connection's failure never touches another, and the server never dies of a
client.
"""

from __future__ import annotations

import logging
import secrets
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..access.context import AccessContext
from ..engine.errors import GatewayError
from .auth import Authenticator, AuthFailed
from .commands import REPORTED, ClientSettings
from .session import Session
from .wire import (
    CANCEL_REQUEST,
    GSSENC_REQUEST,
    PROTOCOL_3,
    SSL_REQUEST,
    Buffer,
    ClientGone,
    MessageReader,
    Out,
    ProtocolError,
)

__all__ = ["PgServer"]

log = logging.getLogger("iqgate.pg")


class PgServer:
    """Serves ``gateway`` over PostgreSQL protocol v3 on ``host:port`` (0: a free port, see ``.port``)."""

    def __init__(self, gateway: Any, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 auth_method: str = "scram-sha-256", tls_cert: str | None = None, tls_key: str | None = None,
                 max_connections: int = 64, max_message_bytes: int = 16 << 20, body_timeout_s: float = 30.0,
                 sock: socket.socket | None = None, access: AccessContext | None = None) -> None:
        """``sock``: an already listening socket to accept from (a serving process's, inherited from its
        supervisor, which keeps the port bound while it starts a new one). ``access``: the process's users,
        audit log and admission (default: ``token`` alone, or no authentication)."""
        self.gateway = gateway
        self.access = access or AccessContext.of_token(token)
        self.auth = Authenticator(self.access.users, auth_method, token=token)
        self.tls: ssl.SSLContext | None = None
        if tls_cert or tls_key:
            if not (tls_cert and tls_key):
                raise ValueError("TLS needs both --tls-cert and --tls-key")
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                self.tls.load_cert_chain(tls_cert, tls_key)
            except (OSError, ssl.SSLError) as exc:  # a bare "[Errno 2] No such file" would not say which file
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ValueError(f"cannot load the TLS certificate --tls-cert {tls_cert} with --tls-key {tls_key}: "
                                 f"{reason}") from None
        self.max_connections = max_connections
        self.max_message_bytes = max_message_bytes
        self.body_timeout_s = body_timeout_s
        self._listener = sock if sock is not None else socket.create_server((host, port), backlog=128,
                                                                           reuse_port=False)
        self.host = host if sock is None else str(sock.getsockname()[0])
        self.port = int(self._listener.getsockname()[1])
        self._sessions: dict[int, tuple[int, Session]] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._refusers = threading.BoundedSemaphore(8)
        self._closing = False
        self._thread = threading.Thread(target=self._accept_loop, name="iqgate-pg", daemon=True)
        self._connections: set[socket.socket] = set()

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> PgServer:
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, cut the open connections, and wait (bounded) for the accepting thread to end.

        The listener is shut down before it is closed: closing alone does not
        wake a thread blocked in ``accept`` (Linux), so every close used to
        wait out the whole ``timeout_s``.
        """
        self._closing = True
        for end in (lambda: self._listener.shutdown(socket.SHUT_RDWR), self._listener.close):
            try:
                end()
            except OSError:
                pass
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout_s)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"postgresql://{self.host}:{self.port}/iqgate"

    # -- accepting -----------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, addr = self._listener.accept()
            except OSError:
                if self._closing:
                    return
                continue
            if self._slots.acquire(blocking=False):
                threading.Thread(target=self._serve, args=(conn,), name=f"iqgate-pg-{addr[1]}", daemon=True).start()
            elif self._refusers.acquire(blocking=False):
                threading.Thread(target=self._refuse, args=(conn,), name="iqgate-pg-refuse", daemon=True).start()
            else:
                conn.close()  # a flood: not even a refusal is owed

    def _refuse(self, conn: socket.socket) -> None:
        """Every slot is taken: still negotiate (so libpq shows the reason) and still honour a CancelRequest,
        which is how a client gets out of the very statement that holds a slot; then FATAL 53300."""
        out = Out()
        try:
            conn.settimeout(2.0)
            reader = MessageReader(conn, self.max_message_bytes, 2.0)
            for _ in range(3):
                code, payload = reader.startup()
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    conn.sendall(b"N")
                    continue
                if code == CANCEL_REQUEST:
                    self._cancel(Buffer(payload))
                    return
                break
            out.error({"S": "FATAL", "V": "FATAL", "C": "53300",
                       "M": f"sorry, too many clients already (the PG port serves {self.max_connections} at once)"})
            out.flush(conn)
        except (ClientGone, ProtocolError, OSError):
            pass
        finally:
            _close_gently(conn)
            self._refusers.release()

    @contextmanager
    def _tracked(self, conn: socket.socket) -> Iterator[None]:
        with self._lock:
            self._connections.add(conn)
        try:
            yield
        finally:
            with self._lock:
                self._connections.discard(conn)
            _close_gently(conn)
            self._slots.release()

    def _serve(self, conn: socket.socket) -> None:
        with self._tracked(conn):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out = Out()
            session: Session | None = None
            try:
                reader, session = self._start(conn, out)
                if session is not None:
                    self._loop(reader, session)
            except ClientGone:
                pass
            except ProtocolError as exc:
                out.error({"S": "FATAL", "V": "FATAL", "C": exc.sqlstate, "M": str(exc)})
                self._try_flush(out, conn)
            except AuthFailed as exc:
                out.error({"S": "FATAL", "V": "FATAL", "C": "28P01", "M": str(exc)})
                self._try_flush(out, conn)
            except Exception as exc:  # noqa: BLE001 - a bug must end this connection, never the server
                log.exception("PG connection failed")
                out.error({"S": "FATAL", "V": "FATAL", "C": "XX000", "M": f"internal error: {type(exc).__name__}: {exc}"})
                self._try_flush(out, conn)
            finally:
                if session is not None:
                    session.cancel.cancel()
                    session.close_portals()
                    with self._lock:
                        self._sessions.pop(session.pid, None)

    @staticmethod
    def _try_flush(out: Out, conn: socket.socket) -> None:
        try:
            out.flush(conn)
        except (ClientGone, OSError):
            pass

    # -- start-up ------------------------------------------------------------------------------------------
    def _start(self, conn: socket.socket, out: Out) -> tuple[MessageReader, Session | None]:
        """Negotiate (TLS, protocol version, authentication); the reader goes on reading the same connection,
        so nothing the client sent right behind the start-up messages is lost."""
        sock: Any = conn
        reader = MessageReader(sock, self.max_message_bytes, self.body_timeout_s)
        for _ in range(3):  # SSLRequest and GSSENCRequest may come before the StartupMessage, once each
            code, payload = reader.startup()
            if code == SSL_REQUEST:
                if self.tls is not None:
                    reader.refuse_early_data()
                sock.sendall(b"S" if self.tls is not None else b"N")
                if self.tls is not None:
                    sock.settimeout(self.body_timeout_s)
                    try:
                        sock = self.tls.wrap_socket(sock, server_side=True)
                    except (ssl.SSLError, OSError) as exc:
                        raise ClientGone(f"TLS handshake failed: {exc}") from None
                    reader.switch_to(sock)
                continue
            if code == GSSENC_REQUEST:
                sock.sendall(b"N")
                continue
            if code == CANCEL_REQUEST:
                self._cancel(Buffer(payload))
                return reader, None
            if code >> 16 != 3:
                raise ProtocolError(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: the server supports "
                                    "3.0", "0A000")
            if code != PROTOCOL_3:
                raise ProtocolError(f"unsupported frontend protocol 3.{code & 0xFFFF}: the server supports 3.0",
                                    "0A000")
            return reader, self._startup(sock, reader, out, payload)
        raise ProtocolError("expected a StartupMessage after SSL/GSS negotiation")

    def _startup(self, sock: Any, reader: MessageReader, out: Out, payload: bytes) -> Session:
        buf = Buffer(payload)
        params: dict[str, str] = {}
        while True:
            key = buf.cstring()
            if not key:
                break
            params[key] = buf.cstring()
        user = params.get("user")
        if not user:
            raise ProtocolError('no PostgreSQL user name specified in startup packet', "28000")

        def send(code: int, extra: bytes) -> None:
            out.auth(code, extra)
            out.flush(sock)

        client = _peer(sock)
        try:
            self.auth.authenticate(user, send, reader.message)
        except AuthFailed as exc:
            self.access.login_failed(user, "pg", client, str(exc))
            raise
        out.auth(0)
        settings = ClientSettings(user)
        for key, value in params.items():
            if key not in ("user", "database", "options", "replication"):
                settings.startup(key, value)
        for option in params.get("options", "").replace("--", "-c ").split("-c"):
            name, sep, value = option.strip().partition("=")
            if sep and name.strip():
                settings.startup(name.strip(), value.strip())
        pid = secrets.randbelow(1 << 30) + 1
        with self._lock:
            while pid in self._sessions:
                pid = secrets.randbelow(1 << 30) + 1
            secret = secrets.randbelow(1 << 31)
            session = Session(self.gateway, out, user, params.get("database") or user, pid, settings,
                              access=self.access, client=client)
            self._sessions[pid] = (secret, session)
        for key, name in REPORTED.items():
            out.parameter_status(name, settings.get(key))
        out.backend_key(pid, secret)
        out.ready("I")
        out.flush(sock)
        return session

    def _cancel(self, buf: Buffer) -> None:
        pid, secret = buf.int32(), buf.int32()
        with self._lock:
            entry = self._sessions.get(pid)
        if entry is not None and secrets.compare_digest(entry[0].to_bytes(4, "big"), (secret & 0xFFFFFFFF).to_bytes(4, "big")):
            entry[1].cancel.cancel()

    # -- the message loop ------------------------------------------------------------------------------------
    def _loop(self, reader: MessageReader, session: Session) -> None:
        sock = reader.sock
        out = session.out
        session.sock = sock
        while True:
            kind, payload = reader.message()
            if kind == b"X":
                return
            if session.skip_to_sync and kind not in (b"S",):
                continue
            buf = Buffer(payload)
            try:
                if kind == b"Q":
                    session.simple_query(buf.cstring())
                elif kind == b"P":
                    session.parse(buf)
                elif kind == b"B":
                    session.bind(buf)
                elif kind == b"D":
                    session.describe(buf)
                elif kind == b"E":
                    session.execute(buf)
                elif kind == b"C":
                    session.close(buf)
                elif kind == b"S":
                    session.sync()
                elif kind == b"H":
                    pass
                elif kind in (b"d", b"c", b"f"):
                    pass  # COPY data, done, fail outside COPY: ignored, as PostgreSQL does (a COPY that failed)
                else:
                    raise ProtocolError(f"invalid frontend message type {kind!r}")
            except ProtocolError as exc:
                if kind == b"Q" or exc.sqlstate == "08P01" and kind not in (b"P", b"B", b"D", b"E", b"C"):
                    raise
                session.send_error(exc, None)
                session.skip_to_sync = True
            except (GatewayError, Exception) as exc:  # noqa: BLE001 - extended protocol: error, skip to Sync
                if isinstance(exc, ClientGone):
                    raise
                session.send_error(exc, _sql_of(session, kind, payload))
                session.skip_to_sync = True
            # an ErrorResponse goes out at once, as PostgreSQL flushes it: the client may wait for it before it
            # sends the Sync (asyncpg sends Parse, Describe, Flush; a Flush after the error is skipped)
            if kind in (b"S", b"Q", b"H") or session.skip_to_sync or len(out.buf) > 1 << 16:
                out.flush(sock)


def _peer(sock: Any) -> str | None:
    try:
        return str(sock.getpeername()[0])
    except (OSError, IndexError):
        return None


def _close_gently(conn: socket.socket) -> None:
    """Close so the client reads what was sent: closing with unread input makes the kernel send a reset, and
    the client would lose the ErrorResponse. Half-close, drain what the client still sends (bounded), close."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0.5)
        for _ in range(64):  # at most 4 MB or half a second per read
            if not conn.recv(65536):
                break
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def _sql_of(session: Session, kind: bytes, payload: bytes) -> str | None:
    """The statement text an extended-protocol error refers to (for the error position), when known."""
    try:
        buf = Buffer(payload)
        if kind == b"P":
            buf.cstring()
            return buf.cstring()
        if kind in (b"E", b"D"):
            if kind == b"D":
                buf.byte()
            portal = session.portals.get(buf.cstring())
            return portal.prepared.sql if portal else None
    except ProtocolError:
        return None
    return None
