"""What a store is: its kind, key and value columns with SQL types, partitions, sources.

A ``StoreSpec`` is the catalog entry the planner plans against, the layout the
engine stores, and what ``store.json`` beside the partition files records so
another process (a gateway worker) can open the stores read-only.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import Any

from ..iqv2.timeutil import to_epoch_ms
from .decimals import DecimalType, encode_decimal, parse_decimal
from .nested import NestedType, NestedValueError, encode_nested, is_nested_text, parse_nested

__all__ = ["SqlType", "StoreKind", "Column", "StoreSpec", "coerce_key", "KeyTypeError", "parse_type", "parse_scalar",
           "DecimalType"]


class SqlType(str, enum.Enum):
    """Column types stores know. TIMESTAMP values are epoch ms in stores, DATE values days since epoch."""

    BIGINT = "BIGINT"
    INTEGER = "INTEGER"
    DOUBLE = "DOUBLE"
    VARCHAR = "VARCHAR"
    BOOLEAN = "BOOLEAN"
    TIMESTAMP = "TIMESTAMP"
    DATE = "DATE"
    BLOB = "BLOB"

    @classmethod
    def parse(cls, text: str) -> SqlType:
        t = text.strip().upper()
        aliases = {
            "LONG": "BIGINT", "INT": "INTEGER", "SMALLINT": "INTEGER", "TINYINT": "INTEGER",
            "FLOAT": "DOUBLE", "REAL": "DOUBLE", "STRING": "VARCHAR", "TEXT": "VARCHAR",
            "BOOL": "BOOLEAN", "TIMESTAMP_NTZ": "TIMESTAMP", "TIMESTAMP_LTZ": "TIMESTAMP",
            "TIMESTAMPTZ": "TIMESTAMP", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP",
            "BYTES": "BLOB", "BINARY": "BLOB", "BYTEA": "BLOB", "VARBINARY": "BLOB",
        }
        t = aliases.get(t, t)
        try:
            return cls(t)
        except ValueError:
            raise ValueError(f"unsupported column type {text!r}; supported: {', '.join(m.value for m in cls)}") from None

    def __str__(self) -> str:
        return self.value


def parse_scalar(text: str) -> SqlType | DecimalType:
    """A scalar column type from its text: ``DECIMAL(p,s)`` (``decimals.parse_decimal``) or a ``SqlType``."""
    dec = parse_decimal(text)
    return dec if dec is not None else SqlType.parse(text)


def parse_type(text: str) -> SqlType | DecimalType | NestedType:
    """A column type from its text: a scalar (``parse_scalar``) or ARRAY/STRUCT/MAP (``nested.parse_nested``)."""
    if is_nested_text(text):
        return parse_nested(text, SqlType.parse)
    return parse_scalar(text)


class StoreKind(str, enum.Enum):
    KEY_VALUE = "key_value"
    TIMESTAMPED_KEY_VALUE = "timestamped_key_value"
    WINDOW = "window"
    SESSION = "session"
    VERSIONED = "versioned"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: SqlType | DecimalType | NestedType
    nullable: bool = True

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"column name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.type, (SqlType, DecimalType, NestedType)):
            object.__setattr__(self, "type", parse_type(str(self.type)))

    @property
    def nested(self) -> bool:
        return isinstance(self.type, NestedType)


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """One materialized store.

    ``source_topics`` are the topics whose offsets make up the store's
    Position; ``window_size_ms``/``window_advance_ms`` describe window stores,
    ``gap_ms`` session stores, ``history_retention_ms`` versioned stores.

    A key column may be an ARRAY or a STRUCT (issue 51, ksqlDB's ARRAY/STRUCT
    keys): stored as its canonical JSON text, so equal values are one key and
    the partitioner hashes that text; such a key is looked up whole, never
    ranged (its text order is not the value's). A composite key
    (``key=(Column("region", …), Column("product", …))``) is
    kept as ``key_parts``; ``key`` is then its stored form, one BLOB column
    named ``"region,product"`` holding ``tuple_keys`` bytes. ``key_columns()``
    is what SQL sees either way.
    """

    name: str
    kind: StoreKind
    key: Column
    values: tuple[Column, ...]
    partitions: int = 1
    source_topics: tuple[str, ...] = ()
    partitioner: str = "murmur2"
    window_size_ms: int | None = None
    window_advance_ms: int | None = None
    gap_ms: int | None = None
    history_retention_ms: int | None = None
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    key_parts: tuple[Column, ...] = ()
    # Columns the store keeps after the values for its own upkeep, never read by queries (a table aggregate's
    # min/max multisets and avg sums/counts, so retraction stays exact): stored as v{n}, v{n+1}, …
    internal: tuple[Column, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.key, (tuple, list)):
            parts = tuple(self.key)
            if len(parts) == 1:
                object.__setattr__(self, "key", parts[0])
            else:
                object.__setattr__(self, "key_parts", parts)
        if self.key_parts:
            parts = tuple(self.key_parts)
            object.__setattr__(self, "key_parts", parts)
            if len(parts) < 2:
                raise ValueError(f"store {self.name!r}: a composite key needs at least 2 columns, got {len(parts)}")
            for c in parts:
                if c.nested:
                    raise ValueError(f"store {self.name!r}: key column {c.name!r} is {c.type}; a key column is a scalar")
            object.__setattr__(self, "key", Column(",".join(c.name for c in parts), SqlType.BLOB, False))
        elif self.key.nested and self.key.type.kind == "MAP":
            raise ValueError(f"store {self.name!r}: key column {self.key.name!r} is {self.key.type}; a key is a "
                             "scalar, an ARRAY or a STRUCT (as in ksqlDB), not a MAP")
        elif self.key.nested and StoreKind(self.kind) not in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
            raise ValueError(f"store {self.name!r}: key column {self.key.name!r} is {self.key.type}; an ARRAY or "
                             "STRUCT key is for key-value stores (tables), not window, session or versioned ones")
        if not self.name or not self.name.replace("_", "a").isalnum() or self.name[0].isdigit():
            raise ValueError(f"store name {self.name!r} must be letters, digits and _ and not start with a digit")
        if not isinstance(self.kind, StoreKind):
            object.__setattr__(self, "kind", StoreKind(self.kind))
        if self.partitions < 1:
            raise ValueError(f"store {self.name!r}: partitions must be >= 1, got {self.partitions}")
        object.__setattr__(self, "internal", tuple(self.internal))
        names = [c.name for c in self.key_columns()] + [c.name for c in self.values] + [c.name for c in self.internal]
        reserved = set(self.system_columns()) | {"_partition", "_position", "_failure_reason", "_failure_message"}
        for n in names:
            if n in reserved:
                raise ValueError(f"store {self.name!r}: column name {n!r} is reserved")
        if len(set(names)) != len(names):
            raise ValueError(f"store {self.name!r}: duplicate column names in {names}")

    # -- the SQL face of the store (docs/DESIGN.md §4) -------------------------------
    def system_columns(self) -> tuple[str, ...]:
        """Columns the kind adds: window bounds, the record time, or version validity."""
        return {
            StoreKind.KEY_VALUE: (),
            StoreKind.TIMESTAMPED_KEY_VALUE: ("rowtime",),
            StoreKind.WINDOW: ("window_start", "window_end"),
            StoreKind.SESSION: ("window_start", "window_end"),
            StoreKind.VERSIONED: ("valid_from", "valid_to"),
        }[self.kind]

    def key_columns(self) -> tuple[Column, ...]:
        """The key as SQL sees it: the one key column, or the parts of a composite key."""
        return self.key_parts or (self.key,)

    @property
    def composite(self) -> bool:
        return bool(self.key_parts)

    def columns(self) -> tuple[Column, ...]:
        """Every column ``SELECT *`` shows, in order: key column(s), window/time columns, values."""
        sys_cols = tuple(Column(n, SqlType.TIMESTAMP, n == "valid_to") for n in self.system_columns())
        if self.kind in (StoreKind.WINDOW, StoreKind.SESSION):
            return self.key_columns() + sys_cols + self.values
        return self.key_columns() + self.values + sys_cols

    def value_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.values)

    def stored_values(self) -> tuple[Column, ...]:
        """Every value column the engine stores: the values, then the internal ones (``internal``)."""
        return self.values + self.internal

    # -- persistence ---------------------------------------------------------
    def to_json(self) -> str:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["key"] = {"name": self.key.name, "type": self.key.type.value, "nullable": self.key.nullable}
        d["values"] = [{"name": c.name, "type": c.type.value, "nullable": c.nullable} for c in self.values]
        d["key_parts"] = [{"name": c.name, "type": c.type.value, "nullable": c.nullable} for c in self.key_parts]
        if not self.key_parts:
            del d["key_parts"]  # files stay readable by versions without composite keys
        d["internal"] = [{"name": c.name, "type": c.type.value, "nullable": c.nullable} for c in self.internal]
        if not self.internal:
            del d["internal"]
        d["source_topics"] = list(self.source_topics)
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoreSpec:
        d = json.loads(text)
        d["kind"] = StoreKind(d["kind"])
        d["key"] = Column(d["key"]["name"], parse_type(d["key"]["type"]), d["key"].get("nullable", True))
        d["values"] = tuple(Column(c["name"], parse_type(c["type"]), c.get("nullable", True)) for c in d["values"])
        d["key_parts"] = tuple(Column(c["name"], parse_scalar(c["type"]), c.get("nullable", False))
                               for c in d.get("key_parts", ()))
        d["source_topics"] = tuple(d.get("source_topics", ()))
        d["internal"] = tuple(Column(c["name"], parse_type(c["type"]), c.get("nullable", True))
                              for c in d.get("internal", ()))
        return cls(**d)


class KeyTypeError(TypeError):
    """A key value that cannot be coerced to the key column's SQL type."""


def coerce_key(sql_type: SqlType | DecimalType | NestedType, value: Any) -> Any:
    """The canonical Python form of a key of ``sql_type`` (ints, floats, str, bool, epoch ms, days).

    Stores order keys by this form, so integers compare numerically and
    strings by code point; the planner coerces SQL literals the same way.
    A DECIMAL's form is its 16 order-preserving bytes (``decimals.py``).
    """
    if value is None:
        raise KeyTypeError("the key should not be null")
    if isinstance(sql_type, DecimalType):
        if type(value) is bytes and len(value) == 16:
            return value  # already its stored form: coercing is idempotent (the writer partitions stored keys)
        try:
            return encode_decimal(sql_type, value)
        except ValueError as exc:
            raise KeyTypeError(f"{value!r} cannot be converted to {sql_type.value}: {exc}") from None
    if isinstance(sql_type, NestedType):
        try:
            return encode_nested(sql_type, value, coerce_key)
        except (NestedValueError, KeyTypeError) as exc:
            raise KeyTypeError(f"{str(exc) or repr(value)} (a {sql_type.value} value)") from None
    try:
        if sql_type in (SqlType.BIGINT, SqlType.INTEGER):
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            if isinstance(value, str):
                return int(value.strip(), 10)
            return int(value)
        if sql_type is SqlType.DOUBLE:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if sql_type is SqlType.VARCHAR:
            if not isinstance(value, str):
                raise ValueError
            return value
        if sql_type is SqlType.BOOLEAN:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise ValueError
        if sql_type is SqlType.TIMESTAMP:
            if isinstance(value, str):
                value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return to_epoch_ms(value, "key")
        if sql_type is SqlType.BLOB:
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value)
            raise ValueError
        if sql_type is SqlType.DATE:
            if isinstance(value, str):
                value = date.fromisoformat(value.strip())
            if isinstance(value, datetime):
                value = value.date()
            if isinstance(value, date):
                return (value - date(1970, 1, 1)).days
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise ValueError
    except (ValueError, TypeError, OverflowError):
        raise KeyTypeError(f"{value!r} cannot be converted to {sql_type.value}") from None
    raise KeyTypeError(f"unsupported key type {sql_type}")
