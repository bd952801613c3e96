"""Random extended-protocol sessions against a real PG port: no internal error, no hang, no dropped connection.

Each session starts up, prepares a typed statement over the shop's stores,
then sends a random run of Parse / Bind / Describe / Execute / Close / Flush /
Query messages and stray bytes — random parameter type OIDs, text and binary
formats, values of the wrong size, truncated bodies, counts that lie — ends
with Sync, and asks one last query. Every session must end in one of two
ways: that last query answered (the connection recovered from whatever it
was sent), or a FATAL error followed by the close. No error may be an
internal one (class XX), and nothing may be logged as a failure.

A 7,300-session run of this generator found the binary DATE/NUMERIC/array
bugs fixed in 0bad4a1; this bounded version keeps those paths exercised.
Sessions are seeded, so a failure names the seed and session that reproduce it.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from tests.gateway.pg.test_load_and_bad_clients import _no_connections_left, _still_serves

SEEDS = (1, 2, 3, 4)
SESSIONS_PER_SEED = 150
SECONDS_PER_SEED = 45.0  # a bound, not a measure: a seed takes about a second here

STATEMENTS = (
    "SELECT revenue, orders FROM revenue WHERE customer = $1", "SELECT $1", "SELECT $1::int + 1",
    "SELECT $1::text || 'x'", "SELECT count(*) FROM accounts WHERE balance > $1",
    "SELECT * FROM accounts WHERE name = $1 AND id IN ($2, $3)", "SELECT $1::date", "SELECT $1::timestamp",
    "SELECT $1::numeric(10,2)", "SELECT $1::bool", "SELECT $1::bytea", "SELECT $1::uuid", "SELECT $1::json",
    "SELECT $1::int[]", "SELECT $1::interval", "SELECT $1::float8 * 2", "SET x = 1", "SET statement_timeout = $1",
    "SHOW TABLES", "BEGIN", "COMMIT", "ROLLBACK", "", ";", " ", "SELECT 1; SELECT 2", "DISCARD ALL",
    "SELECT version()", "SELECT * FROM pg_catalog.pg_type LIMIT 3", "SELECT * FROM accounts LIMIT $1",
    "SELECT * FROM accounts OFFSET $1 LIMIT 2", "SELECT $2", "SELECT $0", "SELECT $99999999999",
    "SELECT id FROM accounts WHERE id = ANY($1)", "SELECT '\x00'", "SELECT 1 /* ", "select E'\\x'",
    "SELECT * FROM accounts ORDER BY balance DESC LIMIT 5", "SELECT 1::int2 + $1::int2",
    "SELECT $1::int8 * $1::int8", "SELECT current_setting('x')", "SELECT set_config('a','b',false)", "SHOW ALL",
    "SHOW statement_timeout", "SELECT opened FROM accounts WHERE opened < $1 LIMIT 3",
    "COPY accounts TO STDOUT", "SELECT lo_import('/etc/passwd')", "LISTEN x", "PREPARE p AS SELECT 1",
    "EXECUTE p", "DEALLOCATE p", "CLOSE ALL", "FETCH 1 FROM c", "DECLARE c CURSOR FOR SELECT 1",
)
# bool bytea char name int8 int2 int4 text oid json float4 float8 varchar date time timestamp timestamptz
# interval numeric uuid jsonb int4[] float8[] text[] record unknown, and OIDs no type has
OIDS = (0, 16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 700, 701, 1043, 1082, 1083, 1114, 1184, 1186, 1700, 2950,
        3802, 1007, 1016, 1009, 2249, 705, 4294967295, 2**31, 99999)
TEXT_VALUES = (0, 1, -1, 5, 2**31, 2**63, -2**63 - 1, 10**30, "1e308", "nan", "inf", "abc", "", "2024-01-01",
               "2024-13-45", "00:00", "t", "{1,2}", "{", "\\x00ff", "11111111-1111-1111-1111-111111111111",
               "1 day", "'; DROP", "1.5", "-0", " 12 ", "infinity", "c0001")
END = "SELECT 'END-OF-SESSION' AS m"


def _cstr(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass") + b"\0"


def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


class _Session:
    """One random session's messages, drawn from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self) -> bytes | None:
        rng = self.rng
        c = rng.random()
        if c < 0.1:
            return None
        if c < 0.4:
            return str(rng.choice(TEXT_VALUES)).encode()
        if c < 0.8:
            return rng.choice([struct.pack("!i", rng.randint(-2**31, 2**31 - 1)),
                               struct.pack("!q", rng.randint(-2**63, 2**63 - 1)),
                               struct.pack("!d", rng.choice([0.0, float("nan"), float("inf"), 1e300])),
                               struct.pack("!h", 7), b"\x01", b"\x00", b"", b"\xff" * rng.randint(1, 20),
                               struct.pack("!f", 1.5)])
        return rng.randbytes(rng.randint(0, 64))

    def parse(self) -> bytes:
        rng = self.rng
        oids = [rng.choice(OIDS) for _ in range(rng.choice([0, 0, 1, 2, 3, 5]))]
        count = len(oids) if rng.random() > 0.05 else rng.randint(-3, 9)  # sometimes a count that lies
        body = _cstr(rng.choice(["", "", "s1", "s2", "x" * 70])) + _cstr(rng.choice(STATEMENTS))
        return _msg(b"P", body + struct.pack("!h", count) + b"".join(struct.pack("!I", o) for o in oids))

    def bind(self, portal: str | None = None, statement: str | None = None, n: int | None = None) -> bytes:
        """A Bind; given a statement and its parameter count, formats are valid codes (text or binary)."""
        rng = self.rng
        codes = [0, 1, 1, 2, -1] if n is None else [0, 0, 1]
        formats = [rng.choice(codes) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        values = [self.value() for _ in range(rng.choice([0, 1, 2, 3, 4]) if n is None else n)]
        body = _cstr(portal if portal is not None else rng.choice(["", "p1"]))
        body += _cstr(statement if statement is not None else rng.choice(["", "", "s1", "s2", "nope"]))
        body += struct.pack("!h", len(formats)) + b"".join(struct.pack("!h", f) for f in formats)
        body += struct.pack("!h", len(values) if rng.random() > 0.05 else rng.randint(-2, 9))
        for v in values:
            if v is None:
                body += struct.pack("!i", -1)
            else:
                size = len(v) if rng.random() > 0.03 else rng.choice([len(v) + 5, -7, 2**30])
                body += struct.pack("!i", size) + v
        results = [rng.choice([0, 1, 1, 3]) for _ in range(rng.choice([0, 1, 2, 5]))]
        body += struct.pack("!h", len(results)) + b"".join(struct.pack("!h", f) for f in results)
        if rng.random() < 0.05:
            body = body[:rng.randint(0, len(body))]
        return _msg(b"B", body)

    def other(self) -> bytes:
        rng = self.rng
        k = rng.random()
        if k < 0.15:
            return _msg(b"D", rng.choice([b"S", b"P", b"Z"]) + _cstr(rng.choice(["", "s1", "p1", "nope"])))
        if k < 0.35:
            return _msg(b"E", _cstr(rng.choice(["", "p1", "nope"]))
                        + struct.pack("!i", rng.choice([0, 0, 1, 2, -1, 2**31 - 1])))
        if k < 0.45:
            return _msg(b"C", rng.choice([b"S", b"P", b"Q"]) + _cstr(rng.choice(["", "s1", "p1"])))
        if k < 0.55:
            return _msg(b"H", b"")
        if k < 0.75:
            sql = rng.choice(STATEMENTS).replace("$1", rng.choice(["1", "'a'", "NULL", "$1"]))
            return _msg(b"Q", _cstr(sql))
        if k < 0.8:  # a message type that is not one, or one a client never sends
            return _msg(rng.choice([b"d", b"c", b"f", b"F", b"p", b"?", b"\x00"]), rng.randbytes(rng.randint(0, 12)))
        return _msg(b"S", b"")

    def messages(self) -> bytes:
        """A prepared statement s1 with n typed parameters, then a random run of messages, then Sync."""
        rng = self.rng
        n = rng.choice([1, 2, 3])
        dollars = [f"${j + 1}" for j in range(n)]
        sql = rng.choice([
            "SELECT name, balance FROM accounts WHERE id = $1" + "".join(f" AND id <> {d}" for d in dollars[1:]),
            "SELECT " + ", ".join(dollars),
            "SELECT count(*) FROM revenue WHERE customer IN (" + ", ".join(dollars) + ")",
            "SELECT * FROM accounts LIMIT $1" + "".join(f" -- {d}" for d in dollars[1:]),
            "SELECT $1::text" + "".join(f", {d}::int8" for d in dollars[1:]),
        ])
        oids = [0 if rng.random() < 0.5 else rng.choice(OIDS) for _ in range(n)]  # half left to the server
        out = [_msg(b"P", _cstr("s1") + _cstr(sql) + struct.pack("!h", n) + b"".join(struct.pack("!I", o) for o in oids))]
        moves: list[Callable[[], bytes]] = [
            lambda: self.bind("p1", "s1", n), lambda: self.bind("p1", "s1", n),
            lambda: _msg(b"D", b"P" + _cstr("p1")) + _msg(b"E", _cstr("p1") + struct.pack("!i", rng.choice([0, 1, 3]))),
            self.parse, self.bind, self.other,
        ]
        if rng.random() < 0.8:  # most sessions bind and run s1 first; the rest start anywhere
            out += [moves[0](), moves[2]()]
        out += [rng.choice(moves)() for _ in range(rng.randint(1, 12))]
        return b"".join(out) + _msg(b"S", b"")


def _startup() -> bytes:
    body = struct.pack("!i", 196608) + b"user\0fuzz\0database\0iqgate\0\0"
    return struct.pack("!i", len(body) + 4) + body


def _run(s: socket.socket, deadline: float) -> tuple[list[tuple[bytes, bytes]], str]:
    """The server's messages until END's answer and ReadyForQuery ('answered'), the close, or the deadline."""
    got: list[tuple[bytes, bytes]] = []
    buf = b""
    answered = False
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            return got, "closed"
        buf += chunk
        while len(buf) >= 5:
            (length,) = struct.unpack_from("!i", buf, 1)
            if len(buf) < 1 + length:
                break
            kind, body, buf = buf[:1], buf[5:1 + length], buf[1 + length:]
            got.append((kind, body))
            answered = answered or (kind == b"D" and b"END-OF-SESSION" in body)
            if answered and kind == b"Z":
                return got, "answered"
    return got, "timeout"


def _fields(body: bytes) -> dict[str, str]:
    return {chr(p[0]): p[1:].decode("utf-8", "replace") for p in body.split(b"\0") if p}


@pytest.fixture(scope="module")
def fuzz_server(gw: Gateway) -> Iterator[PgServer]:
    with PgServer(gw, max_message_bytes=64 * 1024, body_timeout_s=2.0) as srv:
        yield srv


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sessions_end_answered_or_with_fatal_and_never_internal(fuzz_server: PgServer, seed: int,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(seed)
    problems: list[str] = []
    started = time.monotonic()
    sessions = bound = 0
    with caplog.at_level(logging.WARNING):
        while sessions < SESSIONS_PER_SEED and time.monotonic() - started < SECONDS_PER_SEED:
            sessions += 1
            data = _Session(rng).messages()
            with socket.create_connection((fuzz_server.host, fuzz_server.port), timeout=10) as s:
                s.settimeout(0.5)
                s.sendall(_startup() + data + _msg(b"Q", _cstr("ROLLBACK")) + _msg(b"Q", _cstr(END)))
                got, how = _run(s, time.monotonic() + 15)
            where = f"seed {seed} session {sessions}"
            errors = [_fields(body) for kind, body in got if kind == b"E"]
            bound += sum(kind == b"2" for kind, _ in got)  # BindComplete: a Bind's values were taken
            for e in errors:
                if e.get("C", "").startswith("XX") or "Traceback" in e.get("M", ""):
                    problems.append(f"{where}: internal error {e.get('C')}: {e.get('M', '')[:200]}")
            fatal = any(e.get("S") == "FATAL" for e in errors)
            if how == "timeout":
                problems.append(f"{where}: no answer to the last query within 15 s and no close")
            elif how == "closed" and not fatal:
                problems.append(f"{where}: connection closed without a FATAL error")
            elif how == "answered" and fatal:
                problems.append(f"{where}: a FATAL error, yet the connection went on")
    logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert problems == [] and logged == [], (problems[:10], logged[:5])
    assert sessions >= 10, f"only {sessions} sessions ran in {SECONDS_PER_SEED} s"
    assert bound >= sessions // 8, f"only {bound} binds in {sessions} sessions were taken: the fuzz missed execution"
    _still_serves(fuzz_server)
    _no_connections_left(fuzz_server)

