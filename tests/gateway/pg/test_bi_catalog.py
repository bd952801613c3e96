"""The catalog queries BI tools send on connect and sync, answered from the store catalog and nothing else.

DBeaver, Metabase and Grafana could not be run here (JVM/Go applications, no internet), so these are queries
written after what their PostgreSQL support sends (pgjdbc's DatabaseMetaData for Metabase and DBeaver,
DBeaver's own namespace/class/attribute/keyword reads, Grafana's column list): joins over pg_catalog with
``'pg_class'::regclass`` casts, ``pg_get_expr``, ``has_table_privilege``, ``~`` regex filters. Each must
succeed and describe exactly the stores.
"""

from __future__ import annotations

import pytest

from tests.gateway.gwfixtures import SPECS
from tests.gateway.pg.conftest import Pg

CATALOG_QUERIES = {
"jdbc_pk": """SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,
 (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME, information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM
 FROM pg_catalog.pg_class ct JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid) JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)
 JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid) JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid)
 WHERE true AND n.nspname = 'public' AND ct.relname = 'revenue' AND i.indisprimary""",
"dbeaver_keywords": "SELECT string_agg(word, ',') FROM pg_catalog.pg_get_keywords() WHERE word <> ALL ('{a,abs,absolute}'::text[])",
"jdbc_tables": """SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, c.relname AS TABLE_NAME,
 CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema' WHEN true THEN 'SYSTEM TABLE'
   WHEN false THEN CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' ELSE NULL END
   ELSE NULL END AS TABLE_TYPE, d.description AS REMARKS, '' as TYPE_CAT, '' AS REF_GENERATION
 FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c
 LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND d.objsubid = 0 AND d.classoid = 'pg_class'::regclass)
 WHERE c.relnamespace = n.oid AND n.nspname LIKE 'public' AND c.relname LIKE '%' AND (false OR (c.relkind IN ('r','p') AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'))
 ORDER BY TABLE_TYPE, TABLE_SCHEM, TABLE_NAME""",
"jdbc_columns": """SELECT * FROM (SELECT n.nspname, c.relname, a.attname, a.atttypid, a.attnotnull OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,
 a.atttypmod, a.attlen, t.typtypmod, row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum,
 nullif(a.attidentity, '') as attidentity, nullif(a.attgenerated, '') as attgenerated,
 pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc, dsc.description, t.typbasetype, t.typtype
 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)
 JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid) JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)
 LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)
 LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
 LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')
 LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')
 WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped AND n.nspname LIKE 'public' AND c.relname LIKE 'revenue') c WHERE true AND attname LIKE '%' ORDER BY nspname,c.relname,attnum""",
"metabase_tables": """SELECT n.nspname AS schema, c.relname AS name,
 CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS type,
 d.description AS description
 FROM pg_catalog.pg_class AS c INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
 LEFT JOIN pg_catalog.pg_description AS d ON c.oid = d.objoid AND d.objsubid = 0 AND d.classoid = 'pg_class'::regclass
 WHERE c.relnamespace = n.oid AND n.nspname !~ '^information_schema|catalog_history|pg_' AND c.relkind IN ('r', 'p', 'v', 'f', 'm')
   AND n.nspname NOT IN ('information_schema') AND (has_table_privilege(quote_ident(n.nspname) || '.' || quote_ident(c.relname), 'SELECT') OR has_any_column_privilege(quote_ident(n.nspname) || '.' || quote_ident(c.relname), 'SELECT'))
 ORDER BY type, schema, name""",
"dbeaver_ns": """SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n
 LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass ORDER BY nspname""",
"dbeaver_class": """SELECT c.oid,c.*,d.description FROM pg_catalog.pg_class c
 LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass
 WHERE c.relnamespace=2200 AND c.relkind not in ('i','I','c')""",
"dbeaver_attr": """SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description
 FROM pg_catalog.pg_attribute a INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
 LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
 LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
 WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid = 'revenue'::regclass ORDER BY a.attnum""",
"dbeaver_db": "SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname = 'iqgate'",
"dbeaver_misc": "SELECT current_schema(),session_user",
"dbeaver_settings": "select * from pg_catalog.pg_settings where name='standard_conforming_strings'",
"grafana_cols": """SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'revenue' ORDER BY column_name""",
"pg_type_all": "SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name FROM pg_catalog.pg_type t LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid WHERE t.typname IS NOT NULL AND (c.relkind IS NULL OR c.relkind = 'c')",
"roles": "SELECT a.oid,a.* FROM pg_catalog.pg_roles a ORDER BY a.rolname",
}

STORES = sorted(s.name for s in SPECS)


@pytest.mark.parametrize("name", sorted(CATALOG_QUERIES))
def test_bi_catalog_query_succeeds(pg: Pg, name: str) -> None:
    with pg.connect(autocommit=True) as con:
        rows = con.execute(CATALOG_QUERIES[name]).fetchall()
    if name == "jdbc_pk":
        assert rows == []  # stores have keys, but no primary-key constraint to report (pgjdbc's getPrimaryKeys)
    else:
        assert rows, name
    if name == "dbeaver_keywords":
        assert {"select", "from", "where"} <= set(rows[0][0].split(","))


def test_table_lists_are_the_stores(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con:
        jdbc = con.execute(CATALOG_QUERIES["jdbc_tables"]).fetchall()
        metabase = con.execute(CATALOG_QUERIES["metabase_tables"]).fetchall()
        dbeaver = con.execute(CATALOG_QUERIES["dbeaver_class"]).fetchall()
    assert [(r[1], r[2], r[3]) for r in jdbc] == [("public", s, "TABLE") for s in STORES]
    assert [(r[0], r[1], r[2]) for r in metabase] == [("public", s, "TABLE") for s in STORES]
    assert sorted(r[2] for r in dbeaver) == STORES


def test_column_lists_are_the_store_columns(pg: Pg) -> None:
    revenue = next(s for s in SPECS if s.name == "revenue")
    with pg.connect(autocommit=True) as con:
        jdbc = con.execute(CATALOG_QUERIES["jdbc_columns"]).fetchall()
        dbeaver = con.execute(CATALOG_QUERIES["dbeaver_attr"]).fetchall()
        grafana = con.execute(CATALOG_QUERIES["grafana_cols"]).fetchall()
    names = [c.name for c in revenue.columns()]
    assert [r[2] for r in jdbc] == names and [r[8] for r in jdbc] == [1, 2, 3]
    assert [r[4] for r in jdbc] == [True, False, False]  # the key is NOT NULL
    assert [r[2] for r in dbeaver] == names
    assert sorted(r[0] for r in grafana) == sorted(names)


def test_only_the_store_catalog_is_reachable(pg: Pg) -> None:
    """No DuckDB catalog, file or setting leaks through the emulated catalog."""
    import psycopg

    with pg.connect(autocommit=True) as con:
        names = {r[0] for r in con.execute("SELECT relname FROM pg_catalog.pg_class").fetchall()}
        assert names == set(STORES)
        schemas = {r[0] for r in con.execute("SELECT nspname FROM pg_namespace").fetchall()}
        assert schemas == {"public", "pg_catalog", "information_schema"}
        for sql in ("SELECT * FROM duckdb_settings()", "SELECT * FROM information_schema.tables, read_text('/etc/hosts')",
                    "SELECT * FROM main.duckdb_tables"):
            with pytest.raises(psycopg.Error):
                con.execute(sql).fetchall()
        # current_setting() reads the client's settings, never DuckDB's
        assert con.execute("SELECT current_setting('memory_limit')").fetchone() == (None,)
        assert con.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
