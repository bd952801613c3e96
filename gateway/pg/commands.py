"""Session commands PG clients send on their own: transactions, SET/SHOW/RESET, DISCARD, DEALLOCATE.

Client settings (``DateStyle``, ``application_name``, ``search_path``, …) are
kept per connection and reported as PostgreSQL does; the ones a client may
change but iqgate cannot honour (another encoding, another date style) are
refused rather than silently ignored. ``SET`` of a gateway setting
(``position_bound``, ``partial_results``, ``wait_for_bound_ms``, …) goes to the
connection's gateway Session, validated exactly like ``SET`` over HTTP, and
``statement_timeout`` is the gateway's ``statement_timeout_ms``. ``SHOW
last_position`` is the Position of the connection's last answer, as JSON.
Transactions are read-only groupings: ``BEGIN`` … ``COMMIT`` changes nothing
but the transaction status PostgreSQL clients track.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from planner.settings import SESSION_SETTINGS
from planner.systables import SERVER_VERSION

from ..engine.errors import GatewayError, NotSupported, SqlError
from ..engine.statements import setting_text
from .answer import Answer
from .sqltext import Command
from .wire import Out

__all__ = ["ClientSettings", "run_command", "REPORTED"]

# PostgreSQL reports these to the client at start-up and whenever they change (ParameterStatus).
REPORTED = {"server_version": "server_version", "server_encoding": "server_encoding",
            "client_encoding": "client_encoding", "application_name": "application_name", "datestyle": "DateStyle",
            "timezone": "TimeZone", "integer_datetimes": "integer_datetimes", "intervalstyle": "IntervalStyle",
            "standard_conforming_strings": "standard_conforming_strings", "is_superuser": "is_superuser",
            "session_authorization": "session_authorization",
            "default_transaction_read_only": "default_transaction_read_only", "in_hot_standby": "in_hot_standby"}
_READ_ONLY = {"server_version", "server_version_num", "server_encoding", "integer_datetimes", "is_superuser",
              "in_hot_standby", "max_identifier_length", "lc_collate", "lc_ctype", "block_size", "max_index_keys",
              "session_authorization", "transaction_read_only"}
_KNOWN = {"extra_float_digits", "search_path", "bytea_output", "lc_messages", "lc_monetary", "lc_numeric", "lc_time",
          "client_min_messages", "lock_timeout", "idle_in_transaction_session_timeout", "transaction_isolation",
          "default_transaction_isolation", "jit", "work_mem", "geqo", "join_collapse_limit", "role", "timezone",
          "datestyle", "intervalstyle", "application_name", "client_encoding", "default_transaction_read_only",
          "standard_conforming_strings", "escape_string_warning", "row_security", "synchronous_commit",
          "idle_session_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
          "default_transaction_deferrable", "transaction_deferrable", "enable_seqscan", "plan_cache_mode",
          "max_parallel_workers_per_gather", "statement_timeout", "search_path", "cursor_tuple_fraction",
          "check_function_bodies", "xmloption", "DateStyle".lower()}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)?\s*$", re.I)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


class Session(Protocol):
    """What commands need of a connection's session (``session.Session``)."""

    tx: str
    out: Out
    settings: ClientSettings
    gateway_session: Any
    last_position: Any
    statements: dict[str, Any]
    portals: dict[str, Any]


def _defaults(user: str) -> dict[str, str]:
    return {
        "server_version": SERVER_VERSION, "server_version_num": "160004", "server_encoding": "UTF8",
        "client_encoding": "UTF8", "datestyle": "ISO, MDY", "timezone": "UTC", "intervalstyle": "postgres",
        "integer_datetimes": "on", "standard_conforming_strings": "on", "is_superuser": "off",
        "session_authorization": user, "application_name": "", "default_transaction_read_only": "on",
        "transaction_read_only": "on", "in_hot_standby": "off", "search_path": '"$user", public',
        "transaction_isolation": "read committed", "default_transaction_isolation": "read committed",
        "extra_float_digits": "1", "bytea_output": "hex", "client_min_messages": "notice",
        "max_identifier_length": "63", "lc_collate": "C.UTF-8", "lc_ctype": "C.UTF-8", "lc_messages": "C.UTF-8",
        "block_size": "8192", "max_index_keys": "32", "lock_timeout": "0", "idle_in_transaction_session_timeout": "0",
        "jit": "off",  # nothing is compiled: DuckDB runs the residual SQL
    }


class ClientSettings:
    """A connection's client settings (lower-case names), starting from PostgreSQL 16's defaults."""

    def __init__(self, user: str) -> None:
        self._values = _defaults(user)
        self._initial = dict(self._values)

    def get(self, name: str) -> str:
        return self._values.get(name.lower(), "")

    def visible(self) -> dict[str, str]:
        return dict(self._values)

    def startup(self, name: str, value: str) -> None:
        """A parameter of the StartupMessage: applied like SET, and kept as what RESET returns to."""
        try:
            self.set(name, value)
        except GatewayError:
            return  # PostgreSQL refuses unknown start-up parameters; drivers send some we need not know
        self._initial[name.lower()] = self._values[name.lower()]

    def set(self, name: str, value: str | None) -> str | None:
        """Set (``None``: back to the start-up value); returns the name to report if the client must be told."""
        key = name.lower()
        if key in _READ_ONLY:
            raise SqlError(f'parameter "{name}" cannot be changed', code="CANT_CHANGE_RUNTIME_PARAM")
        if key not in _KNOWN and "." not in key:
            raise SqlError(f'unrecognized configuration parameter "{name}"', code="UNKNOWN_PARAMETER")
        if value is None:
            value = self._initial.get(key, "")
        if key == "client_encoding" and value.upper().replace("-", "") not in ("UTF8", "UNICODE"):
            raise NotSupported(f"client_encoding {value!r} is not supported: iqgate speaks UTF8 only")
        if key == "datestyle" and not value.upper().startswith("ISO"):
            raise NotSupported(f"DateStyle {value!r} is not supported: iqgate writes dates as ISO")
        if key == "client_encoding":
            value = "UTF8"
        self._values[key] = value
        return REPORTED.get(key)

    def reset_all(self) -> list[str]:
        changed = [k for k in self._values if self._values[k] != self._initial.get(k)]
        self._values = dict(self._initial)
        return [REPORTED[k] for k in changed if k in REPORTED]


def _timeout_ms(value: str | None) -> int:
    if value is None:
        return 0
    m = _DURATION.match(value)
    if m is None:
        raise SqlError(f'invalid value for parameter "statement_timeout": "{value}"', code="INVALID_SETTING")
    return int(m.group(1)) * _UNIT_MS[(m.group(2) or "").lower() or None]


_SHOW_ALIASES = {"transaction isolation level": "transaction_isolation", "time zone": "timezone",
                 "session authorization": "session_authorization"}


def _show(session: Session, name: str) -> Answer:
    name = _SHOW_ALIASES.get(" ".join(name.split()), name)
    if name == "all":
        rows = [(k, v, "") for k, v in sorted(session.settings.visible().items())]
        rows += [(k, _gateway_value(session, k), s.doc) for k, s in sorted(SESSION_SETTINGS.items())]
        return Answer([("name", "VARCHAR"), ("setting", "VARCHAR"), ("description", "VARCHAR")], rows, "SHOW")
    if name == "last_position":
        value = session.last_position.to_json()
    elif name in SESSION_SETTINGS:
        value = _gateway_value(session, name)
    elif name == "statement_timeout":
        ms = session.gateway_session.settings.get("statement_timeout_ms") or 0
        value = f"{ms}ms" if ms else "0"
    elif name in session.settings.visible():
        value = session.settings.get(name)
    else:
        raise SqlError(f'unrecognized configuration parameter "{name}"', code="UNKNOWN_PARAMETER")
    return Answer([(name, "VARCHAR")], [(value,)], "SHOW")


def _gateway_value(session: Session, name: str) -> str:
    value = session.gateway_session.settings.get(name, SESSION_SETTINGS[name].default)
    text = setting_text(value)
    return "" if text is None else text


def _set(session: Session, name: str, value: str | None) -> None:
    if name in SESSION_SETTINGS:
        if value is None:
            session.gateway_session.apply({name: None})
        else:
            session.gateway_session.set(name, value)
        return
    if name == "statement_timeout":
        ms = _timeout_ms(value)
        session.gateway_session.apply({"statement_timeout_ms": ms or None})
        return
    report = session.settings.set(name, value)
    if report is not None:
        session.out.parameter_status(report, session.settings.get(name))


def _settings(session: Session, cmd: Command, params: list[Any]) -> Answer:
    """A SELECT of ``set_config(name, value, is_local)`` (SET, answered with the new value; ``is_local`` lasts the
    session) and ``current_setting(name[, missing_ok])`` calls, run left to right as PostgreSQL does.

    Every call is checked before any setting changes: a statement that fails (an unknown setting read, a NULL
    name) changes nothing, as PostgreSQL rolls back what its failed statement set."""
    calls = []
    for fn, _column, args in cmd.calls:
        values = [None if v is None else str(v)
                  for v in (params[int(text) - 1] if kind == "param" else text for kind, text in args)]
        name = None if values[0] is None else values[0].lower()
        missing_ok = fn == "current_setting" and len(values) > 1 and values[1] in ("true", "t", "on", "1")
        if name is None and fn == "set_config":
            raise SqlError("set_config: the setting name must not be NULL", code="INVALID_SETTING")
        if fn == "current_setting" and name is not None and not missing_ok and not _known(session, name):
            raise SqlError(f'unrecognized configuration parameter "{values[0]}"', code="UNKNOWN_PARAMETER")
        calls.append((fn, name, values, missing_ok))
    row: list[str | None] = []
    for fn, name, values, missing_ok in calls:
        if name is None:
            row.append(None)  # current_setting is strict: NULL in, NULL out
        elif fn == "set_config":
            _set(session, name, values[1])
            row.append(_show(session, name).rows[0][0])
        elif missing_ok and not _known(session, name):
            row.append(None)
        else:
            row.append(_show(session, name).rows[0][0])
    return Answer([(column, "VARCHAR") for _fn, column, _args in cmd.calls], [tuple(row)], "SELECT 1")


def _known(session: Session, name: str) -> bool:
    """Whether ``current_setting(name)`` has a value: SHOW's answer, where ``all`` is SHOW ALL's word."""
    if name == "all":
        return False
    try:
        _show(session, name)
    except SqlError:
        return False
    return True


def run_command(session: Session, cmd: Command, params: list[Any] | None = None) -> Answer:
    kind = cmd.kind
    if kind == "settings":
        return _settings(session, cmd, params or [])
    notices: list[dict[str, str]] = []
    if kind == "begin":
        if session.tx != "I":
            notices.append({"S": "WARNING", "V": "WARNING", "C": "25001",
                            "M": "there is already a transaction in progress"})
        session.tx = "T" if session.tx == "I" else session.tx
        return Answer(None, [], cmd.tag, notices=notices)
    if kind in ("commit", "rollback"):
        tag = "ROLLBACK" if kind == "rollback" or session.tx == "E" else "COMMIT"
        if session.tx == "I":
            notices.append({"S": "WARNING", "V": "WARNING", "C": "25P01", "M": "there is no transaction in progress"})
        session.tx = "I"
        return Answer(None, [], tag, notices=notices)
    if kind == "noop":
        return Answer(None, [], cmd.tag)
    if kind == "unsupported":
        raise NotSupported(f"{cmd.name} is not supported by iqgate (a read-only SQL gateway): use SELECT, or the "
                           "extended protocol for prepared statements")
    if kind == "set":
        _set(session, cmd.name, cmd.value)
        return Answer(None, [], "SET")
    if kind == "reset":
        if cmd.name == "all":
            for report in session.settings.reset_all():
                session.out.parameter_status(report, session.settings.get(report))
            session.gateway_session.apply({k: None for k in SESSION_SETTINGS})
        else:
            _set(session, cmd.name, None)
        return Answer(None, [], "RESET")
    if kind == "show":
        return _show(session, cmd.name)
    if kind == "discard":
        session.settings.reset_all()
        session.gateway_session.apply({k: None for k in SESSION_SETTINGS})
        session.statements.clear()
        session.portals.clear()
        return Answer(None, [], cmd.tag)
    if kind == "deallocate":
        if cmd.name.upper() == "ALL" or not cmd.name:
            session.statements.clear()
        elif session.statements.pop(cmd.name, None) is None:
            raise SqlError(f'prepared statement "{cmd.name}" does not exist', code="UNKNOWN_PREPARED")
        return Answer(None, [], cmd.tag)
    raise NotSupported(f"unknown session command {kind}")

