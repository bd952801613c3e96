"""The SQLAlchemy dialect ``iqgate://host:port``: pandas, notebooks and BI tools (Superset) over the DB-API.

Works on SQLAlchemy 1.4 (Superset pins it) and 2.x: ``import_dbapi()`` is
what 2.x calls, ``dbapi()`` what 1.4 calls (defined only there, because 2.x
warns about it). Importing this module touches no network; the DB-API module
is imported when an engine is created.

Reflection runs ``SHOW TABLES`` and ``DESCRIBE <store>`` through the DB-API,
so it works the same over HTTP and in-process. Stores are the tables of the
one schema ``main``: their SQL columns with types, the key column as the
primary key (with the window bounds or the version start for window,
session and versioned stores), the store kind as the table comment; pseudo-columns
(``_partition``, ``_position``, ``_failure_*``) are left out, as from
``SELECT *``. There are no views, foreign keys, indexes or constraints.

The compiler is SQLAlchemy's ANSI compiler (double-quoted identifiers, qmark
parameters) with LIMIT/OFFSET written as integer literals, because the
planner pushes a literal LIMIT down into the IQv2 request and a ``LIMIT ?``
cannot be.

In-process use: ``create_engine("iqgate://", connect_args={"gateway": gw})``.
URL query options: ``token``, ``position`` (JSON bound), ``monotonic``,
``partial``, ``wait_ms``, ``timeout``, ``protocol`` (http or https), ``ca_certs`` (a PEM
file to trust for https).
"""

from __future__ import annotations

import json
import re
from typing import Any

import sqlalchemy
from sqlalchemy import exc as sa_exc
from sqlalchemy import types as sqltypes
from sqlalchemy.engine import default, reflection
from sqlalchemy.sql import compiler

__all__ = ["IqgateDialect", "IqgateCompiler", "sa_type_for"]

_SA_MAJOR = int(sqlalchemy.__version__.split(".")[0])
_PSEUDO = frozenset({"_partition", "_position", "_failure_reason", "_failure_message"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

_SIMPLE_TYPES: dict[str, Any] = {
    "BIGINT": sqltypes.BigInteger,
    "HUGEINT": sqltypes.BigInteger,
    "UBIGINT": sqltypes.BigInteger,
    "INTEGER": sqltypes.Integer,
    "INT": sqltypes.Integer,
    "UINTEGER": sqltypes.BigInteger,
    "SMALLINT": sqltypes.SmallInteger,
    "TINYINT": sqltypes.SmallInteger,
    "USMALLINT": sqltypes.Integer,
    "UTINYINT": sqltypes.SmallInteger,
    "DOUBLE": sqltypes.Float,
    "FLOAT": sqltypes.Float,
    "REAL": sqltypes.Float,
    "VARCHAR": sqltypes.String,
    "TEXT": sqltypes.String,
    "STRING": sqltypes.String,
    "UUID": sqltypes.String,
    "BOOLEAN": sqltypes.Boolean,
    "DATE": sqltypes.Date,
    "TIME": sqltypes.Time,
    "TIMESTAMP": sqltypes.DateTime,
    "TIMESTAMP_MS": sqltypes.DateTime,
    "TIMESTAMP_NS": sqltypes.DateTime,
    "TIMESTAMP_S": sqltypes.DateTime,
    "BLOB": sqltypes.LargeBinary,
    "INTERVAL": sqltypes.Interval,
}

# Columns that, with the key, identify a row of a store of this kind (StoreKind values; docs/DESIGN.md §4).
_ROW_IDENTITY: dict[str, tuple[str, ...]] = {
    "window": ("window_start", "window_end"),
    "session": ("window_start", "window_end"),
    "versioned": ("valid_from",),
}

_DECIMAL = re.compile(r"^(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def sa_type_for(type_name: str) -> sqltypes.TypeEngine[Any]:
    """The SQLAlchemy type of a gateway column type name (NullType for types with no SQL equivalent)."""
    t = type_name.strip().upper()
    if t in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return sqltypes.DateTime(timezone=True)
    m = _DECIMAL.match(t)
    if m:
        return sqltypes.Numeric(int(m.group(1)), int(m.group(2)))
    if t in ("DECIMAL", "NUMERIC"):
        return sqltypes.Numeric()
    cls = _SIMPLE_TYPES.get(t.split("(", 1)[0].strip())
    return cls() if cls is not None else sqltypes.NullType()


def _flag(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise sa_exc.ArgumentError(f"URL option {name}={value!r} must be true or false")


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise sa_exc.ArgumentError(f"URL option {name}={value!r} must be an integer") from None


class IqgateCompiler(compiler.SQLCompiler):
    """ANSI SQL with literal LIMIT/OFFSET, which the planner can push down into IQv2 requests."""

    def limit_clause(self, select: Any, **kw: Any) -> str:
        text = ""
        limit, offset = select._limit_clause, select._offset_clause
        if limit is not None:
            text += "\n LIMIT " + self._int_or_process(select, "_limit", limit, **kw)
        if offset is not None:
            text += "\n OFFSET " + self._int_or_process(select, "_offset", offset, **kw)
        return text

    def _int_or_process(self, select: Any, attr: str, clause: Any, **kw: Any) -> str:
        try:
            value = getattr(select, attr)
        except Exception:  # noqa: BLE001 - SQLAlchemy raises when the clause is not a simple integer
            value = None
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return self.process(clause, **kw)


class IqgateDialect(default.DefaultDialect):
    """Dialect for ``iqgate://host:port``; the DB-API module is ``iqgate_client.dbapi``."""

    name = "iqgate"
    driver = "rest"
    paramstyle = "qmark"
    positional = True
    default_paramstyle = "qmark"
    statement_compiler = IqgateCompiler

    supports_statement_cache = True
    supports_alter = False
    supports_sequences = False
    supports_native_boolean = True
    supports_native_decimal = True
    supports_native_enum = False
    supports_default_values = False
    supports_empty_insert = False
    supports_multivalues_insert = False
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    supports_comments = True
    inline_comments = False
    postfetch_lastrowid = False
    requires_name_normalize = False
    supports_is_distinct_from = True
    max_identifier_length = 255
    default_schema_name = "main"

    @classmethod
    def import_dbapi(cls) -> Any:
        from iqgate_client import dbapi

        return dbapi

    if _SA_MAJOR < 2:  # SQLAlchemy 1.4 looks the module up here; 2.x warns when it is defined.

        @classmethod
        def dbapi(cls) -> Any:  # type: ignore[override]
            return cls.import_dbapi()

    # -- connecting ----------------------------------------------------------------------
    def create_connect_args(self, url: Any) -> tuple[list[Any], dict[str, Any]]:
        """``iqgate://[:token@]host:port[/main][?token=&position=&monotonic=&partial=&wait_ms=&timeout=&protocol=
        &ca_certs=]``."""
        opts = dict(url.query)
        kwargs: dict[str, Any] = {}
        if url.database not in (None, "", "main"):
            raise sa_exc.ArgumentError(f"the gateway has one schema, 'main'; the URL names {url.database!r}")
        protocol = str(opts.pop("protocol", "http")).lower()
        if protocol not in ("http", "https"):
            raise sa_exc.ArgumentError(f"URL option protocol={protocol!r} must be http or https")
        token = opts.pop("token", None) or url.password
        if token:
            kwargs["token"] = str(token)
        if "position" in opts:
            text = str(opts.pop("position"))
            try:
                kwargs["position"] = json.loads(text)
            except ValueError as exc:
                raise sa_exc.ArgumentError(f"URL option position={text!r} is not JSON: {exc}") from None
        for name in ("monotonic", "partial"):
            if name in opts:
                kwargs[name] = _flag(str(opts.pop(name)), name)
        if "wait_ms" in opts:
            kwargs["wait_ms"] = _int(str(opts.pop("wait_ms")), "wait_ms")
        if "timeout" in opts:
            try:
                kwargs["timeout"] = float(opts.pop("timeout"))
            except ValueError:
                raise sa_exc.ArgumentError("URL option timeout must be a number of seconds") from None
        if "ca_certs" in opts:
            kwargs["ca_certs"] = str(opts.pop("ca_certs"))
        if opts:
            raise sa_exc.ArgumentError(
                f"unknown URL option(s) {', '.join(sorted(opts))}; known: token, position, monotonic, partial,"
                " wait_ms, timeout, protocol, ca_certs"
            )
        if url.host:
            port = f":{url.port}" if url.port else ""
            return [f"{protocol}://{url.host}{port}"], kwargs
        return [], kwargs  # in-process: connect_args={"gateway": gw} supplies the Gateway

    def do_ping(self, dbapi_connection: Any) -> bool:
        cur = dbapi_connection.cursor()
        try:
            cur.execute("SELECT 1")
            cur.fetchall()
        finally:
            cur.close()
        return True

    def is_disconnect(self, e: Exception, connection: Any, cursor: Any) -> bool:
        """Unreachable server or closed connection: the pool then drops the connection (pre-ping, retries)."""
        from iqgate_client import dbapi

        if isinstance(e, dbapi.OperationalError) and str(e).startswith("cannot reach the gateway"):
            return True
        return isinstance(e, dbapi.InterfaceError) and "is closed" in str(e)

    def do_commit(self, dbapi_connection: Any) -> None:
        """The gateway only reads: nothing to commit."""

    def do_rollback(self, dbapi_connection: Any) -> None:
        """Called by the pool on every checkin; nothing to roll back."""

    def do_begin(self, dbapi_connection: Any) -> None:
        """No transactions: each statement reads at its own position."""

    def _get_server_version_info(self, connection: Any) -> tuple[int, ...]:
        # connection.connection is our DB-API connection (1.4 at first connect) or a pool proxy that
        # forwards attribute access to it (2.x): either way server_version reaches ours.
        version = str(getattr(connection.connection, "server_version", "") or "0")
        return tuple(int(p) for p in re.findall(r"\d+", version)[:3]) or (0,)

    def _get_default_schema_name(self, connection: Any) -> str:
        return "main"

    def get_isolation_level(self, dbapi_connection: Any) -> str:
        raise NotImplementedError("the gateway has no transactions")

    # -- reflection ------------------------------------------------------------------------------
    def _rows(self, connection: Any, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        result = connection.exec_driver_sql(sql)
        names = [str(k).lower() for k in result.keys()]
        return names, [tuple(r) for r in result.fetchall()]

    def _check_schema(self, schema: str | None) -> None:
        if schema not in (None, "main"):
            raise sa_exc.NoSuchTableError(f"schema {schema!r} (the gateway has one schema, 'main')")

    # No annotations on the cached methods: SQLAlchemy 1.4's reflection.cache re-creates the signature from
    # the annotation strings and breaks on subscripted ones.
    @reflection.cache
    def _stores(self, connection, **kw):  # type: ignore[no-untyped-def]
        """Store name -> kind, from SHOW TABLES."""
        names, rows = self._rows(connection, "SHOW TABLES")
        name_i = _pick(names, ("name", "store", "table_name", "table"), 0)
        kind_i = _pick(names, ("kind", "store_kind", "type"), None)
        return {str(r[name_i]): (str(r[kind_i]) if kind_i is not None and r[kind_i] is not None else None)
                for r in rows}

    @reflection.cache
    def _describe(self, connection, table_name, **kw):  # type: ignore[no-untyped-def]
        """One dict per column of ``DESCRIBE <store>``: name, type, key flag, nullable."""
        if table_name not in self._stores(connection, **kw):
            raise sa_exc.NoSuchTableError(table_name)
        quoted = self.identifier_preparer.quote_identifier(table_name)
        names, rows = self._rows(connection, f"DESCRIBE {quoted}")
        name_i = _pick(names, ("column_name", "name", "column"), 0)
        type_i = _pick(names, ("column_type", "type", "data_type"), 1)
        key_i = _pick(names, ("key", "is_key", "primary_key", "role"), None)
        null_i = _pick(names, ("null", "nullable", "is_nullable"), None)
        out = []
        for r in rows:
            name = str(r[name_i])
            if name in _PSEUDO:
                continue
            key = r[key_i] if key_i is not None else None
            is_key = key is True or (isinstance(key, str) and key.strip().upper() in ("PRI", "KEY", "YES", "TRUE"))
            nullable = r[null_i] if null_i is not None else True
            if isinstance(nullable, str):
                nullable = nullable.strip().upper() not in ("NO", "FALSE", "NOT NULL")
            out.append({"name": name, "type": str(r[type_i]), "key": is_key, "nullable": bool(nullable)})
        return out

    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        return ["main"]

    def get_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        self._check_schema(schema)
        return sorted(self._stores(connection, **kw))

    def get_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        self._check_schema(schema)
        return []

    def has_table(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> bool:
        if schema not in (None, "main"):
            return False
        return table_name in self._stores(connection, **kw)

    def get_columns(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list[dict]:
        self._check_schema(schema)
        return [
            {
                "name": c["name"],
                "type": sa_type_for(c["type"]),
                "nullable": c["nullable"] and not c["key"],
                "default": None,
                "autoincrement": False,
            }
            for c in self._describe(connection, table_name, **kw)
        ]

    def get_pk_constraint(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> dict:
        """The store key, plus what makes a row unique in the store's kind (window bounds, version start).

        An ORM or BI tool that took the key alone as the identity of a window
        or versioned store's rows would fold different windows/versions of one
        key into one object.
        """
        self._check_schema(schema)
        described = self._describe(connection, table_name, **kw)
        names = {c["name"] for c in described}
        cols = [c["name"] for c in described if c["key"]]
        extra = _ROW_IDENTITY.get(self._stores(connection, **kw).get(table_name) or "", ())
        cols += [n for n in extra if n in names and n not in cols]
        return {"constrained_columns": cols, "name": None}

    def get_foreign_keys(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list:
        self._check_schema(schema)
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list:
        self._check_schema(schema)
        return []

    def get_unique_constraints(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list:
        self._check_schema(schema)
        return []

    def get_check_constraints(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list:
        self._check_schema(schema)
        return []

    def get_table_comment(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> dict:
        """The store kind (key_value, window, versioned, ...) tells a BI user what the table holds."""
        self._check_schema(schema)
        stores = self._stores(connection, **kw)
        if table_name not in stores:
            raise sa_exc.NoSuchTableError(table_name)
        return {"text": stores[table_name]}

    def get_sequence_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []

    def get_temp_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []

    def get_temp_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []


def _pick(names: list[str], wanted: tuple[str, ...], fallback: int | None) -> int | None:
    for w in wanted:
        if w in names:
            return names.index(w)
    return fallback
