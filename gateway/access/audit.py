"""The audit log (``--audit-log PATH``, ``-`` for stdout): one JSON line per statement and per failed login.

A line says who (user, face, client address) asked what (the statement,
its literals kept or masked), what it read (stores, Position) and how it
ended (status, error code, rows, bytes, duration). It never holds a token
or a password: the faces never pass one, and any text shaped like one of
our tokens is replaced by ``iqg_…`` before writing, wherever it appears (a
token pasted as a user name or into a statement).

Masking replaces every literal (strings, numbers, dollar-quoted text) by
``?`` from the SQL tokenizer's view of the statement, keeping the rest of
the text as written; comments go too (they can hold anything). A statement
that does not tokenize is not written at all in masked mode, only its
length: masked must mean no literal ever reaches the file.

The file rotates by size (as logging's RotatingFileHandler does, without
its cost); one process writes it (``--workers N`` processes should each be
given their own path).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from .tokens import TOKEN_RE

__all__ = ["AuditLog", "mask_literals", "scrub"]

log = logging.getLogger("iqgate.access")

_LITERALS = frozenset({
    TokenType.STRING, TokenType.NUMBER, TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.BYTE_STRING,
    TokenType.NATIONAL_STRING, TokenType.NATIONAL_RAW_STRING, TokenType.RAW_STRING, TokenType.HEREDOC_STRING,
    TokenType.UNICODE_STRING,
})
_MAX_STATEMENT = 64 * 1024  # characters of a statement kept in a line; a longer one is cut and marked
_DIALECT = Postgres()  # the PG face's spelling is the widest: E'', $$…$$, B'', U&''; DuckDB's is a subset here


def scrub(text: str) -> str:
    """``text`` with anything shaped like an iqgate token replaced."""
    return TOKEN_RE.sub("iqg_…", text) if "iqg_" in text else text


@functools.lru_cache(maxsize=1024)
def mask_literals(sql: str) -> str:
    """``sql`` with every literal as ``?`` and comments dropped; placeholders ($1, ?) and names kept.

    Remembered per text: applications and BI tools send the same statement
    texts again and again (with parameters), and tokenizing costs more than
    the rest of an audit line.
    """
    try:
        tokens = _DIALECT.tokenize(sql)
    except (SqlglotError, ValueError, RecursionError):
        return f"<statement not tokenizable, {len(sql)} characters, masked>"
    out: list[str] = []
    end = -1
    prev = None
    for tok in tokens:
        gap = sql[end + 1:tok.start]
        out.append(gap if not gap.strip() else " ")  # a gap holding anything but blanks held a comment
        literal = tok.token_type in _LITERALS and not (
            tok.token_type == TokenType.NUMBER and prev is not None and prev.token_type == TokenType.PARAMETER
            and prev.end + 1 == tok.start)  # the 1 of $1 is a placeholder's number, not a value
        out.append("?" if literal else sql[tok.start:tok.end + 1])
        end = tok.end
        prev = tok
    return "".join(out).strip()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _position(position: Any) -> Any:
    if position is None:
        return None
    if hasattr(position, "to_json_map"):
        return position.to_json_map()
    if isinstance(position, Mapping):
        return {str(t): {str(p): o for p, o in parts.items()} for t, parts in position.items()}
    return str(position)


class _RotatingFile:
    """An append-only file rotated by size, like logging's RotatingFileHandler at a tenth of its cost per line.

    One ``os.write`` per line on an O_APPEND descriptor (no buffer to lose,
    no interleaving within a line); when a line would take the file past
    ``max_bytes`` it becomes ``PATH.1`` (``.1`` becomes ``.2``, …, up to
    ``backups``) and a new file is started. Created 0600: statements can
    hold data the readers of other logs must not see.
    """

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def _rotate(self) -> None:
        """Shift the backups, then switch descriptors (a failure part-way keeps a working one)."""
        for i in range(self.backups - 1, 0, -1):
            if os.path.exists(f"{self.path}.{i}"):
                os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
        try:
            os.replace(self.path, f"{self.path}.1")
        except FileNotFoundError:  # removed under us: just start a new one
            pass
        fd = self._open()
        os.close(self._fd)
        self._fd = fd
        self._size = os.fstat(fd).st_size

    def write(self, data: bytes) -> None:
        if self._fd < 0:
            raise ValueError("the audit log is closed")
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self._size += n

    def close(self) -> None:
        fd, self._fd = self._fd, -1  # never write to a number the process may give another file
        if fd >= 0:
            os.close(fd)


class _Stdout:
    def __init__(self) -> None:
        self._out = sys.stdout

    def write(self, data: bytes) -> None:
        self._out.write(data.decode("utf-8"))
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


def _dumps(record: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # e.g. an integer past 64 bits among the parameters
        return json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":")).encode()


class AuditLog:
    """Writes audit records to ``target`` (a path, or ``-`` for stdout); thread-safe; close() when done.

    ``mask`` masks the statements' literals and leaves parameters out;
    unmasked, parameters are written beside the statement. Writing never
    fails a statement: a line that cannot be written (a full disk) is
    counted in ``dropped`` and logged, once per kind of error.
    """

    def __init__(self, target: str, *, mask: bool = False, max_bytes: int = 100 * 2**20, backups: int = 5) -> None:
        self.target = target
        self.mask = mask
        self.dropped = 0
        self._last_error = ""
        self._lock = threading.Lock()
        if target == "-":
            self._out: _RotatingFile | _Stdout = _Stdout()
        else:
            if max_bytes <= 0 or backups < 1:
                raise ValueError("the audit log's max_bytes must be > 0 and backups >= 1")
            try:
                self._out = _RotatingFile(target, max_bytes, backups)
            except OSError as exc:
                raise ValueError(f"cannot open the audit log {target}: {exc.strerror or exc}") from None

    def _write(self, record: dict[str, Any]) -> None:
        line = _dumps(record)
        if b"iqg_" in line:
            line = scrub(line.decode("utf-8")).encode("utf-8")
        with self._lock:
            try:
                self._out.write(line + b"\n")
            except (OSError, ValueError) as exc:
                self.dropped += 1
                if str(exc) != self._last_error:
                    self._last_error = str(exc)
                    log.error("iqgate: audit log %s: a line could not be written (%s); %d dropped so far",
                              self.target, exc, self.dropped)

    def statement(self, *, user: str | None, face: str, client: str | None, sql: str,
                  stores: Iterable[str] = (), status: str = "ok", error_code: str | None = None,
                  rows: int | None = None, response_bytes: int | None = None, duration_ms: float | None = None,
                  position: Any = None, params: Any = None) -> None:
        """One statement as it ended: ``status`` is "ok" or "error" (with ``error_code``, the wire code)."""
        text = mask_literals(sql) if self.mask else sql
        record: dict[str, Any] = {"time": _now(), "event": "statement", "user": user, "face": face,
                                  "client": client, "statement": text[:_MAX_STATEMENT]}
        if len(text) > _MAX_STATEMENT:
            record["statement_truncated"] = len(text)
        record["masked"] = self.mask
        if params is not None and not self.mask:
            record["params"] = list(params) if isinstance(params, (list, tuple)) else params
        record.update({"stores": sorted(set(stores)), "status": status, "error_code": error_code, "rows": rows,
                       "bytes": response_bytes,
                       "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
                       "position": _position(position)})
        self._write(record)

    def login_failed(self, *, user: str | None, face: str, client: str | None, reason: str) -> None:
        """A refused login. ``user`` is the name claimed (PG) or the token's owner, never the credential."""
        self._write({"time": _now(), "event": "login_failed", "user": user, "face": face, "client": client,
                     "reason": reason})

    def close(self) -> None:
        with self._lock:
            self._out.close()
