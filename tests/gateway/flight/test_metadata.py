"""The Flight SQL catalog calls: GetSqlInfo, GetCatalogs, GetDbSchemas, GetTables (with schemas), GetTableTypes,
GetPrimaryKeys, GetXdbcTypeInfo, and the foreign-key calls JDBC makes; through pyarrow's client (the exact
shapes FlightSql.proto gives) and through ADBC's own metadata calls. Expectations come from the store specs."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gateway.engine.types import duck_type
from gateway.flight.metadata import SCHEMAS
from gateway.flight.sqlinfo import SQL_INFO_SCHEMA
from tests.gateway.flight.conftest import Flight, Raw
from tests.gateway.gwfixtures import SPECS

STORES = sorted(s.name for s in SPECS)


def test_sql_info_says_what_the_server_is(raw: Raw) -> None:
    info, table = raw.fetch("CommandGetSqlInfo")
    assert info.schema.equals(SQL_INFO_SCHEMA)
    values = {r["info_name"]: r["value"] for r in table.to_pylist()}
    assert values[0] == "iqgate" and values[2] == pa.__version__
    assert values[3] is True and values[4] is True and values[5] is False  # read-only, SQL, no Substrait
    assert values[8] == 0 and values[504] == '"'  # no transactions; identifiers quoted with "
    _, some = raw.fetch("CommandGetSqlInfo", info=[3, 504, 99_999])  # an unknown id is left out
    assert some.to_pylist() == [{"info_name": 3, "value": True}, {"info_name": 504, "value": '"'}]
    union = table.column("value").combine_chunks()
    assert union.type.mode == "dense" and set(union.type_codes.to_pylist()) <= set(range(6))


def test_catalogs_and_schemas(raw: Raw) -> None:
    _, catalogs = raw.fetch("CommandGetCatalogs")
    assert catalogs.schema.equals(SCHEMAS["CommandGetCatalogs"])
    assert catalogs.to_pylist() == [{"catalog_name": "iqgate"}]
    _, schemas = raw.fetch("CommandGetDbSchemas")
    assert schemas.schema.equals(SCHEMAS["CommandGetDbSchemas"])
    names = [r["db_schema_name"] for r in schemas.to_pylist()]
    assert "main" in names and names == sorted(names)
    _, main = raw.fetch("CommandGetDbSchemas", catalog="iqgate", db_schema_filter_pattern="ma_n")
    assert main.to_pylist() == [{"catalog_name": "iqgate", "db_schema_name": "main"}]
    _, none = raw.fetch("CommandGetDbSchemas", catalog="")  # "" asks for schemas without a catalog
    assert none.num_rows == 0


def test_tables_with_and_without_their_schemas(raw: Raw, flight: Flight) -> None:
    info, tables = raw.fetch("CommandGetTables")
    assert info.schema.equals(SCHEMAS["CommandGetTables"])
    assert [(r["catalog_name"], r["db_schema_name"], r["table_name"], r["table_type"]) for r in tables.to_pylist()] \
        == [("iqgate", "main", name, "TABLE") for name in STORES]
    _, filtered = raw.fetch("CommandGetTables", table_name_filter_pattern="%r%", table_types=["TABLE"])
    assert [r["table_name"] for r in filtered.to_pylist()] == [n for n in STORES if "r" in n]
    _, views = raw.fetch("CommandGetTables", table_types=["VIEW"])
    assert views.num_rows == 0
    info, full = raw.fetch("CommandGetTables", include_schema=True)
    assert info.schema.equals(SCHEMAS["CommandGetTables+schema"])
    by_name = {s.name: s for s in SPECS}
    for row in full.to_pylist():
        schema = pa.ipc.read_schema(pa.py_buffer(row["table_schema"]))
        spec = by_name[row["table_name"]]
        assert schema.names == [c.name for c in spec.columns()]
        assert [f.metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"].decode() for f in schema] == \
            [duck_type(c.type) for c in spec.columns()]
        # the schema a SELECT * answers with, to the type
        _, answer = raw.sql(f"SELECT * FROM {row['table_name']} LIMIT 1")
        assert [f.type for f in schema] == answer.schema.types
        assert all(not f.nullable for f in schema if f.name in {c.name for c in spec.key_columns()})


def test_table_types_and_primary_keys(raw: Raw) -> None:
    _, types = raw.fetch("CommandGetTableTypes")
    assert types.schema.equals(SCHEMAS["CommandGetTableTypes"])
    assert types.to_pylist() == [{"table_type": "TABLE"}]
    for spec in SPECS:
        _, keys = raw.fetch("CommandGetPrimaryKeys", table=spec.name)
        assert keys.schema.equals(SCHEMAS["CommandGetPrimaryKeys"])
        assert [(r["table_name"], r["column_name"], r["key_sequence"]) for r in keys.to_pylist()] == \
            [(spec.name, c.name, i) for i, c in enumerate(spec.key_columns(), start=1)]
    _, nothing = raw.fetch("CommandGetPrimaryKeys", table="no_such_store")
    assert nothing.num_rows == 0


@pytest.mark.parametrize("name, fields", [
    ("CommandGetExportedKeys", {"table": "revenue"}),
    ("CommandGetImportedKeys", {"table": "revenue"}),
    ("CommandGetCrossReference", {"pk_table": "revenue", "fk_table": "accounts"}),
])
def test_foreign_keys_are_none(raw: Raw, name: str, fields: dict[str, str]) -> None:
    info, table = raw.fetch(name, **fields)
    assert info.schema.equals(SCHEMAS[name]) and table.num_rows == 0


def test_xdbc_type_info(raw: Raw) -> None:
    _, types = raw.fetch("CommandGetXdbcTypeInfo")
    assert types.schema.equals(SCHEMAS["CommandGetXdbcTypeInfo"])
    rows = types.to_pylist()
    assert [(r["data_type"], r["type_name"]) for r in rows] == sorted((r["data_type"], r["type_name"]) for r in rows)
    assert {"BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN", "TIMESTAMP WITH TIME ZONE"} <= {r["type_name"] for r in rows}
    _, bigint = raw.fetch("CommandGetXdbcTypeInfo", data_type=-5)
    assert [r["type_name"] for r in bigint.to_pylist()] == ["BIGINT"]


def test_get_schema_describes_without_running(raw: Raw) -> None:
    for name, fields in (("CommandGetTables", {"include_schema": True}), ("CommandGetCatalogs", {}),
                         ("CommandGetSqlInfo", {})):
        described = raw.client.get_schema(raw.command(name, **fields), raw.options()).schema
        assert described.equals(raw.fetch(name, **fields)[0].schema)


def test_adbc_metadata_calls(flight: Flight) -> None:
    with flight.adbc() as con:
        assert con.adbc_get_table_types() == ["TABLE"]
        objects = con.adbc_get_objects(depth="all").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["iqgate"]
        main = next(s for s in objects[0]["catalog_db_schemas"] if s["db_schema_name"] == "main")
        assert sorted(t["table_name"] for t in main["db_schema_tables"]) == STORES
        accounts = next(t for t in main["db_schema_tables"] if t["table_name"] == "accounts")
        spec = next(s for s in SPECS if s.name == "accounts")
        assert [c["column_name"] for c in accounts["table_columns"]] == [c.name for c in spec.columns()]
        schema = con.adbc_get_table_schema("per_min", db_schema_filter="main")
        assert schema.names == [c.name for c in next(s for s in SPECS if s.name == "per_min").columns()]
        info = con.adbc_get_info()
        assert info["vendor_name"] == "iqgate" and info["vendor_arrow_version"] == pa.__version__
