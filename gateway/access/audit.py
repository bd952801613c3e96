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

The file rotates by size (RotatingFileHandler); one process writes it
(``--workers N`` processes should each be given their own path).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import logging.handlers
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from .tokens import TOKEN_RE

__all__ = ["AuditLog", "mask_literals", "scrub"]

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


def mask_literals(sql: str) -> str:
    """``sql`` with every literal as ``?`` and comments dropped; placeholders ($1, ?) and names kept."""
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


class AuditLog:
    """Writes audit records to ``target`` (a path, or ``-`` for stdout); thread-safe; close() when done.

    ``mask`` masks the statements' literals and leaves parameters out;
    unmasked, parameters are written beside the statement.
    """

    def __init__(self, target: str, *, mask: bool = False, max_bytes: int = 100 * 2**20, backups: int = 5) -> None:
        self.target = target
        self.mask = mask
        self._logger = logging.Logger(f"iqgate.audit[{target}]")  # not in the logging tree: nothing propagates
        self._logger.propagate = False
        if target == "-":
            handler: logging.Handler = logging.StreamHandler(sys.stdout)
        else:
            if max_bytes <= 0 or backups < 0:
                raise ValueError("the audit log's max_bytes must be > 0 and backups >= 0")
            try:
                # created 0600: statements can hold data the readers of other logs must not see
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
                handler = logging.handlers.RotatingFileHandler(target, maxBytes=max_bytes, backupCount=backups,
                                                               encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"cannot open the audit log {target}: {exc.strerror or exc}") from None
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler = handler
        self._logger.addHandler(handler)

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":"))
        self._logger.log(logging.CRITICAL, scrub(line))  # the level never filters: every record is written

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
        self._logger.removeHandler(self._handler)
        if self.target == "-":
            self._handler.flush()
        else:
            self._handler.close()
