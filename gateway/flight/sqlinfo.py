"""GetSqlInfo: what iqgate is and which SQL it takes, in the dense-union table Flight SQL defines.

Clients ask at connect (ADBC: whether the server has transactions; JDBC:
the DatabaseMetaData answers). The ids and value kinds are those of
``SqlInfo`` in Arrow's FlightSql.proto; ids a client asks for that are not
here are left out, as the protocol allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from .internals import version

__all__ = ["SQL_INFO_SCHEMA", "sql_info_table", "sql_info"]

# the union's members, by type code (FlightSql.proto, CommandGetSqlInfo)
_STRING, _BOOL, _BIGINT, _INT32, _STRINGS, _MAP = range(6)
_VALUE_TYPE = pa.dense_union([
    pa.field("string_value", pa.string()),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", pa.list_(pa.field("item", pa.string()))),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32())))),
], type_codes=list(range(6)))
SQL_INFO_SCHEMA = pa.schema([pa.field("info_name", pa.uint32(), nullable=False),
                             pa.field("value", _VALUE_TYPE, nullable=False)])


class _I32(int):
    """An int32 value (ordinal or bitmask); a plain int is int64 (``bigint_value``)."""


def sql_info(arrow_version: str, statement_timeout_ms: int) -> dict[int, Any]:
    """SqlInfo id -> value; bool, str, list of str, int (int64) or _I32."""
    no_limit = 0
    return {
        0: "iqgate",                      # FLIGHT_SQL_SERVER_NAME
        1: version(),                     # FLIGHT_SQL_SERVER_VERSION
        2: arrow_version,                 # FLIGHT_SQL_SERVER_ARROW_VERSION
        3: True,                          # FLIGHT_SQL_SERVER_READ_ONLY
        4: True,                          # FLIGHT_SQL_SERVER_SQL
        5: False,                         # FLIGHT_SQL_SERVER_SUBSTRAIT
        8: _I32(0),                       # FLIGHT_SQL_SERVER_TRANSACTION: none
        9: True,                          # FLIGHT_SQL_SERVER_CANCEL
        100: _I32(statement_timeout_ms),  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT: idle prepared statements close
        101: _I32(0),                     # FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT
        500: False, 501: False, 502: False,  # SQL_DDL_CATALOG, _SCHEMA, _TABLE
        503: _I32(1),                     # SQL_IDENTIFIER_CASE: case-insensitive
        504: '"',                         # SQL_IDENTIFIER_QUOTE_CHAR
        505: _I32(1),                     # SQL_QUOTED_IDENTIFIER_CASE: case-insensitive (DuckDB's names)
        506: True,                        # SQL_ALL_TABLES_ARE_SELECTABLE
        507: _I32(3),                     # SQL_NULL_ORDERING: nulls sorted at the end (DuckDB's default)
        508: ["POSITION", "SYSTEM_TIME"],  # SQL_KEYWORDS beyond SQL:2003 (AS OF POSITION, FOR SYSTEM_TIME)
        509: [], 510: [], 511: [], 512: [],  # function lists: DuckDB's, not enumerated here
        513: "\\",                        # SQL_SEARCH_STRING_ESCAPE
        514: "",                          # SQL_EXTRA_NAME_CHARACTERS
        515: True,                        # SQL_SUPPORTS_COLUMN_ALIASING
        516: True,                        # SQL_NULL_PLUS_NULL_IS_NULL
        518: True, 519: False,            # table correlation names; different ones
        520: True, 521: True,             # expressions in ORDER BY; ORDER BY unrelated columns
        522: _I32(0b11),                  # SQL_SUPPORTED_GROUP_BY: unrelated, beyond select
        523: True,                        # SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE
        524: False,                       # SQL_SUPPORTS_NON_NULLABLE_COLUMNS (no DDL)
        525: _I32(0b11),                  # SQL_SUPPORTED_GRAMMAR: minimum, core
        526: _I32(0b1),                   # SQL_ANSI92_SUPPORTED_LEVEL: entry
        527: False,                       # SQL_SUPPORTS_INTEGRITY_ENHANCEMENT_FACILITY
        528: _I32(2),                     # SQL_OUTER_JOINS_SUPPORT_LEVEL: full
        529: "schema", 530: "procedure", 531: "catalog",
        532: True,                        # SQL_CATALOG_AT_START
        533: _I32(0), 534: _I32(0), 535: _I32(0),
        536: False, 537: False,           # SELECT FOR UPDATE, stored procedures
        538: _I32(0b1111),                # SQL_SUPPORTED_SUBQUERIES: comparisons, EXISTS, IN, quantified
        539: True,                        # SQL_CORRELATED_SUBQUERIES_SUPPORTED
        540: _I32(0b11),                  # SQL_SUPPORTED_UNIONS
        **{i: no_limit for i in range(541, 562)},  # the SQL_MAX_* lengths: no fixed limit
        562: _I32(0),                     # SQL_DEFAULT_TRANSACTION_ISOLATION: none
        563: False,                       # SQL_TRANSACTIONS_SUPPORTED
        564: _I32(0b1),                   # SQL_SUPPORTED_TRANSACTIONS_ISOLATION_LEVELS: none
        565: False, 566: False,
        567: _I32(0b10),                  # SQL_SUPPORTED_RESULT_SET_TYPES: forward only
        568: _I32(0), 569: _I32(0b10), 570: _I32(0), 571: _I32(0),  # forward only: read-only concurrency
        572: False, 573: False, 574: False, 575: False, 576: False,
    }


def sql_info_table(info: dict[int, Any], wanted: Iterable[int]) -> pa.Table:
    """The rows for ``wanted`` ids (all when empty), in the order asked, as the dense union."""
    ids = list(wanted) or sorted(info)
    ids = [i for i in dict.fromkeys(ids) if i in info]
    codes: list[int] = []
    offsets: list[int] = []
    members: list[list[Any]] = [[] for _ in range(6)]
    for i in ids:
        v = info[i]
        if isinstance(v, bool):
            code = _BOOL
        elif isinstance(v, _I32):
            code, v = _INT32, int(v)
        elif isinstance(v, int):
            code = _BIGINT
        elif isinstance(v, str):
            code = _STRING
        elif isinstance(v, list):
            code = _STRINGS
        else:
            code = _MAP
        codes.append(code)
        offsets.append(len(members[code]))
        members[code].append(v)
    children = [pa.array(values, type=field.type) for values, field in zip(members, _VALUE_TYPE)]
    value = pa.UnionArray.from_dense(pa.array(codes, pa.int8()), pa.array(offsets, pa.int32()), children,
                                     [f.name for f in _VALUE_TYPE], list(range(6)))
    return pa.Table.from_arrays([pa.array(ids, pa.uint32()), value], schema=SQL_INFO_SCHEMA)
