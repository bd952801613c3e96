"""``pg_catalog``: PostgreSQL's own catalog tables, as far as clients read them, built from the store catalog.

What psql (``\\dt``, ``\\d store``), SQLAlchemy's postgresql dialect, psycopg's
type lookups, DBeaver and Metabase read: namespaces, relations, attributes,
types, the database, roles and settings. Each store is a table (``relkind
'r'``) in the stores' schema (oid 2200, named as the face reports it);
tables clients join against but that iqgate has nothing for (indexes,
constraints, triggers, policies, inheritance, …) exist with PostgreSQL's
columns and no rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stores.catalog.schema import StoreSpec

from ..settings import SESSION_SETTINGS
from .model import (
    STORE_NAMESPACE_OID,
    SystemContext,
    SystemTable,
    columns,
    describe_relation,
    not_null,
    relation_columns,
    relations,
)
from .pg_types import PG_TYPES, pg_type_for_sql

__all__ = ["TABLES", "store_oids", "FIRST_STORE_OID"]

FIRST_STORE_OID = 16384  # PostgreSQL's first oid for user objects
_CATALOG_NS, _INFO_NS = 11, 13_000
_ROLE_OID = 10
_PG_CLASS_OID = 1259


def store_oids(catalog: Mapping[str, StoreSpec]) -> dict[str, int]:
    """A store's (or stream's) relation oid: stable for a given catalog (by name order)."""
    return {name: FIRST_STORE_OID + 2 * i for i, name in enumerate(sorted(relations(catalog)))}


def _namespaces(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    yield (_CATALOG_NS, "pg_catalog", _ROLE_OID, None)
    yield (STORE_NAMESPACE_OID, ctx.schema, _ROLE_OID, None)
    yield (_INFO_NS, "information_schema", _ROLE_OID, None)


def _classes(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    specs = relations(catalog)
    for name, oid in store_oids(catalog).items():
        spec = specs[name]
        yield (oid, name, STORE_NAMESPACE_OID, oid + 1, 0, _ROLE_OID, 2, oid, 0, 0, -1.0, 0, 0, False, False, "p",
               "r", len(relation_columns(spec)), 0, False, False, False, False, False, True, "d", False, 0, None, None, None)


def _attributes(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    specs = relations(catalog)
    for name, oid in store_oids(catalog).items():
        spec = specs[name]
        for i, c in enumerate(relation_columns(spec), start=1):
            t = pg_type_for_sql(c.type)
            notnull = not_null(spec, c)
            yield (oid, c.name, t.oid, -1, t.length, i, 0, -1, -1, t.length > 0, "d", "p", "", notnull, False, False,
                   "", "", False, True, 0, 100 if t.category == "S" else 0, None, None, None, None)


def _types(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for t in PG_TYPES:
        yield (t.oid, t.name, _CATALOG_NS, _ROLE_OID, t.length, 0 < t.length <= 8, "b", t.category, False, True,
               ",", 0, "-", t.element, t.array_oid, f"{t.name}in", f"{t.name}out", f"{t.name}recv", f"{t.name}send",
               "-", "-", "-", "i", "p", False, 0, -1, 1 if t.element else 0, 100 if t.category == "S" else 0, None,
               None, None)


def _descriptions(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    specs = relations(catalog)
    for name, oid in store_oids(catalog).items():
        yield (oid, _PG_CLASS_OID, 0, describe_relation(specs[name]))


def _database(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    yield (1, ctx.database, _ROLE_OID, 6, "c", False, True, -1, 0, 0, 1663, "C.UTF-8", "C.UTF-8", None, None, None)


def _roles(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    yield (ctx.user, False, True, False, False, True, False, -1, "********", None, False, None, _ROLE_OID)


def _users(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    yield (ctx.user, _ROLE_OID, False, False, False, False, "********", None, None)


def _settings(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for name, value in sorted(ctx.settings.items()):
        doc = SESSION_SETTINGS[name].doc if name in SESSION_SETTINGS else ""
        yield (name, value, None, "Client Connection Defaults", doc, None, "user", "string", "session", None, None,
               None, value, value, None, None, False)


def _tables(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for name in sorted(relations(catalog)):
        yield (ctx.schema, name, ctx.user, None, False, False, False, False)


def _activity(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    yield (1, ctx.database, ctx.backend_pid, _ROLE_OID, ctx.user, ctx.application_name, None, "active", "")


#: PostgreSQL's reserved key words (``pg_get_keywords()`` category R): SQL editors (DBeaver) highlight them
_RESERVED = (
    "all analyse analyze and any array as asc asymmetric both case cast check collate column constraint create "
    "current_catalog current_date current_role current_time current_timestamp current_user default deferrable "
    "desc distinct do else end except false fetch for foreign from grant group having in initially intersect "
    "into lateral leading limit localtime localtimestamp not null offset on only or order placing primary "
    "references returning select session_user some symmetric system_user table then to trailing true union "
    "unique user using variadic when where window with").split()


def _keywords(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for word in _RESERVED:
        yield (word, "R", word not in ("as",), "reserved", "can be bare label" if word != "as" else "requires AS")


TABLES = (
    SystemTable("pg_catalog", "pg_get_keywords", columns(
        "word varchar, catcode varchar, barelabel boolean, catdesc varchar, baredesc varchar"), _keywords),
    SystemTable("pg_catalog", "pg_namespace", columns("oid oid, nspname varchar, nspowner oid, nspacl varchar[]"),
                _namespaces),
    SystemTable("pg_catalog", "pg_class", columns(
        "oid oid, relname varchar, relnamespace oid, reltype oid, reloftype oid, relowner oid, "
        "relam oid, relfilenode oid, reltablespace oid, relpages integer, reltuples double, "
        "relallvisible integer, reltoastrelid oid, relhasindex boolean, relisshared boolean, "
        "relpersistence varchar, relkind varchar, relnatts integer, relchecks integer, relhasrules boolean, "
        "relhastriggers boolean, relhassubclass boolean, relrowsecurity boolean, relforcerowsecurity boolean, "
        "relispopulated boolean, relreplident varchar, relispartition boolean, relrewrite oid, "
        "relacl varchar[], reloptions varchar[], relpartbound varchar"), _classes),
    SystemTable("pg_catalog", "pg_attribute", columns(
        "attrelid oid, attname varchar, atttypid oid, attstattarget integer, attlen integer, attnum integer, "
        "attndims integer, attcacheoff integer, atttypmod integer, attbyval boolean, attalign varchar, "
        "attstorage varchar, attcompression varchar, attnotnull boolean, atthasdef boolean, atthasmissing boolean, "
        "attidentity varchar, attgenerated varchar, attisdropped boolean, attislocal boolean, attinhcount integer, "
        "attcollation oid, attacl varchar[], attoptions varchar[], attfdwoptions varchar[], "
        "attmissingval varchar"), _attributes),
    SystemTable("pg_catalog", "pg_type", columns(
        "oid oid, typname varchar, typnamespace oid, typowner oid, typlen integer, typbyval boolean, "
        "typtype varchar, typcategory varchar, typispreferred boolean, typisdefined boolean, typdelim varchar, "
        "typrelid oid, typsubscript varchar, typelem oid, typarray oid, typinput varchar, "
        "typoutput varchar, typreceive varchar, typsend varchar, typmodin varchar, typmodout varchar, "
        "typanalyze varchar, typalign varchar, typstorage varchar, typnotnull boolean, typbasetype oid, "
        "typtypmod integer, typndims integer, typcollation oid, typdefaultbin varchar, typdefault varchar, "
        "typacl varchar[]"), _types),
    SystemTable("pg_catalog", "pg_description", columns(
        "objoid oid, classoid oid, objsubid integer, description varchar"), _descriptions),
    SystemTable("pg_catalog", "pg_database", columns(
        "oid oid, datname varchar, datdba oid, encoding integer, datlocprovider varchar, "
        "datistemplate boolean, datallowconn boolean, datconnlimit integer, datfrozenxid bigint, "
        "datminmxid bigint, dattablespace oid, datcollate varchar, datctype varchar, daticulocale varchar, "
        "datcollversion varchar, datacl varchar[]"), _database),
    SystemTable("pg_catalog", "pg_roles", columns(
        "rolname varchar, rolsuper boolean, rolinherit boolean, rolcreaterole boolean, rolcreatedb boolean, "
        "rolcanlogin boolean, rolreplication boolean, rolconnlimit integer, rolpassword varchar, "
        "rolvaliduntil timestamptz, rolbypassrls boolean, rolconfig varchar[], oid oid"), _roles),
    SystemTable("pg_catalog", "pg_user", columns(
        "usename varchar, usesysid oid, usecreatedb boolean, usesuper boolean, userepl boolean, "
        "usebypassrls boolean, passwd varchar, valuntil timestamptz, useconfig varchar[]"), _users),
    SystemTable("pg_catalog", "pg_settings", columns(
        "name varchar, setting varchar, unit varchar, category varchar, short_desc varchar, extra_desc varchar, "
        "context varchar, vartype varchar, source varchar, min_val varchar, max_val varchar, enumvals varchar[], "
        "boot_val varchar, reset_val varchar, sourcefile varchar, sourceline integer, pending_restart boolean"),
                _settings),
    SystemTable("pg_catalog", "pg_tables", columns(
        "schemaname varchar, tablename varchar, tableowner varchar, tablespace varchar, hasindexes boolean, "
        "hasrules boolean, hastriggers boolean, rowsecurity boolean"), _tables),
    SystemTable("pg_catalog", "pg_stat_activity", columns(
        "datid oid, datname varchar, pid integer, usesysid oid, usename varchar, application_name varchar, "
        "client_addr varchar, state varchar, query varchar"), _activity),
    SystemTable("pg_catalog", "pg_am", columns("oid oid, amname varchar, amhandler varchar, amtype varchar"),
                lambda c, x: [(2, "heap", "heap_tableam_handler", "t"), (403, "btree", "bthandler", "i")]),
    SystemTable("pg_catalog", "pg_tablespace", columns(
        "oid oid, spcname varchar, spcowner oid, spcacl varchar[], spcoptions varchar[]"),
                lambda c, x: [(1663, "pg_default", _ROLE_OID, None, None)]),
    # Tables clients join against for what stores never have: same columns as PostgreSQL's, no rows.
    SystemTable("pg_catalog", "pg_index", columns(
        "indexrelid oid, indrelid oid, indnatts integer, indnkeyatts integer, indisunique boolean, "
        "indnullsnotdistinct boolean, indisprimary boolean, indisexclusion boolean, indimmediate boolean, "
        "indisclustered boolean, indisvalid boolean, indcheckxmin boolean, indisready boolean, indislive boolean, "
        "indisreplident boolean, indkey integer[], indcollation oid[], indclass oid[], indoption integer[], "
        "indexprs varchar, indpred varchar")),
    SystemTable("pg_catalog", "pg_constraint", columns(
        "oid oid, conname varchar, connamespace oid, contype varchar, condeferrable boolean, "
        "condeferred boolean, convalidated boolean, conrelid oid, contypid oid, conindid oid, "
        "conparentid oid, confrelid oid, confupdtype varchar, confdeltype varchar, confmatchtype varchar, "
        "conislocal boolean, coninhcount integer, connoinherit boolean, conkey integer[], confkey integer[], "
        "conpfeqop oid[], conppeqop oid[], conffeqop oid[], confdelsetcols integer[], "
        "conexclop oid[], conbin varchar")),
    SystemTable("pg_catalog", "pg_attrdef", columns("oid oid, adrelid oid, adnum integer, adbin varchar")),
    SystemTable("pg_catalog", "pg_views", columns(
        "schemaname varchar, viewname varchar, viewowner varchar, definition varchar")),
    SystemTable("pg_catalog", "pg_matviews", columns(
        "schemaname varchar, matviewname varchar, matviewowner varchar, tablespace varchar, hasindexes boolean, "
        "ispopulated boolean, definition varchar")),
    SystemTable("pg_catalog", "pg_indexes", columns(
        "schemaname varchar, tablename varchar, indexname varchar, tablespace varchar, indexdef varchar")),
    SystemTable("pg_catalog", "pg_proc", columns(
        "oid oid, proname varchar, pronamespace oid, proowner oid, prolang oid, prokind varchar, "
        "proretset boolean, provolatile varchar, pronargs integer, prorettype oid, proargtypes varchar, "
        "proargnames varchar[], prosrc varchar")),
    SystemTable("pg_catalog", "pg_enum", columns(
        "oid oid, enumtypid oid, enumsortorder double, enumlabel varchar")),
    SystemTable("pg_catalog", "pg_collation", columns(
        "oid oid, collname varchar, collnamespace oid, collowner oid, collprovider varchar, "
        "collisdeterministic boolean, collencoding integer, collcollate varchar, collctype varchar")),
    SystemTable("pg_catalog", "pg_inherits", columns(
        "inhrelid oid, inhparent oid, inhseqno integer, inhdetachpending boolean")),
    SystemTable("pg_catalog", "pg_depend", columns(
        "classid oid, objid oid, objsubid integer, refclassid oid, refobjid oid, refobjsubid integer, "
        "deptype varchar")),
    SystemTable("pg_catalog", "pg_sequence", columns(
        "seqrelid oid, seqtypid oid, seqstart bigint, seqincrement bigint, seqmax bigint, seqmin bigint, "
        "seqcache bigint, seqcycle boolean")),
    SystemTable("pg_catalog", "pg_trigger", columns(
        "oid oid, tgrelid oid, tgparentid oid, tgname varchar, tgfoid oid, tgtype integer, "
        "tgenabled varchar, tgisinternal boolean, tgconstrrelid oid, tgconstrindid oid, "
        "tgconstraint oid, tgdeferrable boolean, tginitdeferred boolean, tgnargs integer")),
    SystemTable("pg_catalog", "pg_rewrite", columns(
        "oid oid, rulename varchar, ev_class oid, ev_type varchar, ev_enabled varchar, is_instead boolean")),
    SystemTable("pg_catalog", "pg_policy", columns(
        "oid oid, polname varchar, polrelid oid, polcmd varchar, polpermissive boolean, polroles oid[], "
        "polqual varchar, polwithcheck varchar")),
    SystemTable("pg_catalog", "pg_statistic_ext", columns(
        "oid oid, stxrelid oid, stxname varchar, stxnamespace oid, stxowner oid, "
        "stxstattarget integer, stxkeys integer[], stxkind varchar[], stxexprs varchar")),
    SystemTable("pg_catalog", "pg_publication", columns(
        "oid oid, pubname varchar, pubowner oid, puballtables boolean, pubinsert boolean, pubupdate boolean, "
        "pubdelete boolean, pubtruncate boolean, pubviaroot boolean")),
    SystemTable("pg_catalog", "pg_publication_rel", columns(
        "oid oid, prpubid oid, prrelid oid, prqual varchar, prattrs integer[]")),
    SystemTable("pg_catalog", "pg_publication_namespace", columns("oid oid, pnpubid oid, pnnspid oid")),
    SystemTable("pg_catalog", "pg_partitioned_table", columns(
        "partrelid oid, partstrat varchar, partnatts integer, partdefid oid, partattrs integer[]")),
    SystemTable("pg_catalog", "pg_foreign_table", columns("ftrelid oid, ftserver oid, ftoptions varchar[]")),
    SystemTable("pg_catalog", "pg_foreign_server", columns(
        "oid oid, srvname varchar, srvowner oid, srvfdw oid, srvtype varchar, srvversion varchar")),
    SystemTable("pg_catalog", "pg_extension", columns(
        "oid oid, extname varchar, extowner oid, extnamespace oid, extrelocatable boolean, "
        "extversion varchar, extconfig oid[], extcondition varchar[]")),
    SystemTable("pg_catalog", "pg_range", columns(
        "rngtypid oid, rngsubtype oid, rngmultitypid oid, rngcollation oid, rngsubopclass oid")),
    SystemTable("pg_catalog", "pg_event_trigger", columns(
        "oid oid, evtname varchar, evtevent varchar, evtowner oid, evtfoid oid, evtenabled varchar")),
    SystemTable("pg_catalog", "pg_auth_members", columns(
        "oid oid, roleid oid, member oid, grantor oid, admin_option boolean")),
    SystemTable("pg_catalog", "pg_opclass", columns(
        "oid oid, opcmethod oid, opcname varchar, opcnamespace oid, opcowner oid, opcfamily oid, "
        "opcintype oid, opcdefault boolean, opckeytype oid")),
)
