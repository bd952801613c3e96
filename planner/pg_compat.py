"""What PostgreSQL clients write that DuckDB does not run, rewritten on the syntax tree into what it does.

psql, SQLAlchemy's postgresql dialect, psycopg and BI tools introspect with
PostgreSQL's catalog functions (``format_type``, ``pg_table_is_visible``,
``current_setting``…), its ``reg*`` casts (``'revenue'::regclass``,
``oid::regtype::text``), ``OPERATOR(pg_catalog.~)`` and ``COLLATE
pg_catalog.default``, and Superset's Postgres spec filters with
``TO_TIMESTAMP(text, format)``. Each becomes an expression over the system
tables (``planner.systables``: built from the store catalog) or a constant,
before the function allowlist runs, so the rewritten statement can still only
read stores and system tables. Nothing here depends on who asks: answers that
do (the schema name, the user, settings) come from the system tables' rows.
"""

from __future__ import annotations

from sqlglot import exp

from .systables.model import STORE_NAMESPACE_OID, VERSION_STRING
from .systables.pg_types import BY_NAME, PG_TYPES

__all__ = ["rewrite_pg_compat", "REWRITTEN_FUNCTIONS", "array_literal"]

_REG_TYPES = frozenset({"regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole", "regoper",
                        "regoperator", "regconfig", "regdictionary", "oid", "xid", "xid8", "cid", "tid"})
_TEXT_TYPES = frozenset({"text", "varchar", "name", "char", "bpchar", "int2vector", "oidvector", "character varying"})
_PG_TO_DUCK = {"bool": "BOOLEAN", "int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "float4": "REAL",
               "float8": "DOUBLE", "date": "DATE", "time": "TIME", "timestamp": "TIMESTAMP",
               "timestamptz": "TIMESTAMPTZ", "interval": "INTERVAL", "numeric": "DECIMAL(38, 9)", "json": "JSON",
               "jsonb": "JSON", "uuid": "UUID", "bytea": "BLOB"}
_TRUE_FUNCTIONS = frozenset({
    "pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible", "pg_opclass_is_visible",
    "pg_collation_is_visible", "pg_conversion_is_visible", "has_table_privilege", "has_schema_privilege",
    "has_database_privilege", "has_column_privilege", "has_any_column_privilege", "has_function_privilege",
    "has_sequence_privilege", "has_type_privilege", "pg_has_role"})
_FALSE_FUNCTIONS = frozenset({"pg_is_in_recovery", "pg_cancel_backend", "pg_terminate_backend",
                              "pg_is_other_temp_schema", "pg_relation_is_publishable"})
_NULL_TEXT_FUNCTIONS = frozenset({
    "col_description", "shobj_description", "pg_get_expr", "pg_get_indexdef", "pg_get_constraintdef",
    "pg_get_viewdef", "pg_get_serial_sequence", "pg_get_triggerdef", "pg_get_functiondef", "pg_get_partkeydef",
    "pg_get_ruledef", "pg_get_function_arguments", "pg_get_function_result", "pg_get_statisticsobjdef_columns",
    "pg_get_function_identity_arguments", "pg_tablespace_location"})
# Functions of PostgreSQL's that return void and have nothing to do here: no session holds advisory locks
# (asyncpg's pool runs pg_advisory_unlock_all() when a connection is given back). void's text is ''.
_VOID_FUNCTIONS = frozenset({"pg_advisory_unlock_all"})
_ZERO_FUNCTIONS = frozenset({"pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size",
                             "pg_database_size", "txid_current", "pg_current_xact_id"})
_SESSION_WORDS = {"current_user": "user", "session_user": "user", "current_role": "user",
                  "current_catalog": "database", "current_schema": "schema"}
# PostgreSQL to_timestamp/to_date patterns → strptime's
_PG_FORMAT = [("YYYY", "%Y"), ("MM", "%m"), ("DD", "%d"), ("HH24", "%H"), ("HH12", "%I"), ("HH", "%I"),
              ("MI", "%M"), ("SS", "%S"), ("US", "%f"), ("MS", "%g"), ("AM", "%p"), ("PM", "%p"), ("TZ", "%Z")]


def rewrite_pg_compat(statement: exp.Expression) -> exp.Expression:
    """The statement with PostgreSQL-only constructs replaced (the tree is changed in place and returned).

    A rewritten projection keeps the column name PostgreSQL gives it
    (``SELECT version()`` answers a column ``version``), which clients read.
    """
    for select in statement.find_all(exp.Select):
        named = []
        for e in select.expressions:
            name = _pg_column_name(e)
            named.append(exp.alias_(e, name, quoted=True) if name is not None else e)
        select.set("expressions", named)
    # sqlglot's transform does not descend into a node it just replaced, so repeat until nothing changes
    # (each pass rewrites at least the outermost remaining construct; rewritten output is stable).
    for _ in range(16):
        changed = [False]

        def fn(node: exp.Expression) -> exp.Expression:
            new = _rewrite(node)
            if new is not node:
                changed[0] = True
            return new

        statement = statement.transform(fn, copy=False)
        if not changed[0]:
            break
    return statement


def _pg_column_name(node: exp.Expression) -> str | None:
    """PostgreSQL's name for an unaliased projection that this module rewrites (None: leave it as it is)."""
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        node = node.expression
    if isinstance(node, exp.CurrentUser):
        return "current_user"
    if isinstance(node, (exp.CurrentCatalog, exp.CurrentSchema)):
        return "current_schema" if isinstance(node, exp.CurrentSchema) else "current_catalog"
    if isinstance(node, exp.Column) and not node.table and not node.this.quoted and node.name.lower() in _SESSION_WORDS:
        return node.name.lower()
    if isinstance(node, exp.Cast):
        kind = _kind(node.to)
        return kind if kind in _REG_TYPES else None
    if isinstance(node, exp.Func):
        name = node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()
        name = _ALIASES.get(name, name)
        return name if _rewrites(name) else None
    return None


_ALIASES = {"current_version": "version"}


def _rewrites(name: str) -> bool:
    return (name in _TRUE_FUNCTIONS or name in _FALSE_FUNCTIONS or name in _NULL_TEXT_FUNCTIONS
            or name in _ZERO_FUNCTIONS or name in _VOID_FUNCTIONS or name in _NAMED_FUNCTIONS
            or name in ("quote_ident", "quote_literal", "quote_nullable"))


_NAMED_FUNCTIONS = frozenset({
    "version", "current_database", "current_catalog", "current_user", "session_user", "current_role",
    "current_schema", "current_schemas", "pg_backend_pid", "current_setting", "format_type", "pg_get_userbyid",
    "obj_description", "pg_encoding_to_char", "pg_postmaster_start_time", "to_regtype", "to_regclass",
    "to_regnamespace"})


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and isinstance(node.expression, exp.Func) \
            and node.this.name.lower() in ("pg_catalog", "information_schema"):
        return _rewrite(node.expression)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func) and not _args(node.this) \
            and node.this.name.lower() == "pg_get_keywords":  # a set-returning function: the system table of its rows
        return exp.Table(this=exp.to_identifier("pg_get_keywords"), db=exp.to_identifier("pg_catalog"),
                         alias=node.args.get("alias"))
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier) and node.args.get("db") is not None \
            and node.args["db"].name.lower() == "pg_catalog":
        bare = node.copy()
        bare.set("db", None)  # pg_catalog.unnest(...), pg_catalog.generate_series(...) as table functions
        return bare
    if isinstance(node, exp.Operator):
        return _operator(node)
    if isinstance(node, exp.Collate) and _is_default_collation(node.expression):
        return node.this
    if isinstance(node, exp.Cast):
        return _cast(node)
    if isinstance(node, exp.DataType):
        return _datatype(node)
    if isinstance(node, exp.CurrentUser):
        return _session_value("user")
    if isinstance(node, exp.CurrentCatalog):
        return _session_value("database")
    if isinstance(node, exp.CurrentSchema):
        return _session_value("schema")
    if isinstance(node, exp.Column) and not node.table and not node.this.quoted \
            and node.name.lower() in _SESSION_WORDS:
        return _session_value(_SESSION_WORDS[node.name.lower()])
    if isinstance(node, exp.UnixToTime) and isinstance(node.args.get("scale"), exp.Literal) \
            and node.args["scale"].is_string:
        return exp.Anonymous(this="strptime", expressions=[node.this, exp.Literal.string(_format(node.args["scale"].name))])
    if isinstance(node, exp.Func):
        return _function(node)
    return node


def _is_default_collation(node: exp.Expression) -> bool:
    name = node.name.lower() if isinstance(node, (exp.Column, exp.Identifier, exp.Literal, exp.Var)) else ""
    return name in ("default", "c", "posix", "ucs_basic")


def _operator(node: exp.Operator) -> exp.Expression:
    op = str(node.args.get("operator") or "").lower().removeprefix("pg_catalog.").strip()
    left, right = node.this, node.expression
    if isinstance(right, exp.Collate) and _is_default_collation(right.expression):
        right = right.this
    regex = {"~": (exp.RegexpLike, False), "~*": (exp.RegexpILike, False), "!~": (exp.RegexpLike, True),
             "!~*": (exp.RegexpILike, True)}
    if op in regex:
        cls, negate = regex[op]
        out: exp.Expression = cls(this=left, expression=right)
        return exp.Not(this=out) if negate else out
    plain = {"=": exp.EQ, "<>": exp.NEQ, "!=": exp.NEQ, "<": exp.LT, ">": exp.GT, "<=": exp.LTE, ">=": exp.GTE,
             "~~": exp.Like, "~~*": exp.ILike}
    if op in plain:
        return plain[op](this=left, expression=right)
    return node


def _kind(datatype: exp.DataType) -> str | None:
    if datatype.this is not exp.DataType.Type.USERDEFINED:
        return None
    return str(datatype.args.get("kind") or "").strip('"').lower().removeprefix("pg_catalog.")


def _cast(node: exp.Cast) -> exp.Expression:
    kind = _kind(node.to)
    inner = node.this
    if node.to.is_type(exp.DataType.Type.ARRAY) and isinstance(inner, exp.Literal) and inner.is_string:
        items = array_literal(inner.name)
        if items is not None:  # '{a,b}'::text[]: PostgreSQL's array literal, as a list of its elements
            element = node.to.expressions[0] if node.to.expressions else exp.DataType.build("VARCHAR")
            return exp.Array(expressions=[exp.null() if v is None else exp.cast(exp.Literal.string(v), element.copy())
                                          for v in items])
    inner_kind = _kind(inner.to) if isinstance(inner, exp.Cast) else None
    wants_text = kind in _TEXT_TYPES or (kind is None and node.to.is_type(*exp.DataType.TEXT_TYPES))
    if wants_text and inner_kind in ("regclass", "regtype", "regnamespace", "regproc", "regrole"):
        return _reg_to_text(inner_kind, _reg_value(inner_kind, inner.this))
    if kind is None:
        return node
    if kind in _REG_TYPES:
        return _reg_value(kind, inner)
    if kind in _TEXT_TYPES:
        return exp.cast(inner, "VARCHAR")
    pg = BY_NAME.get(kind)
    if pg is not None and pg.name in _PG_TO_DUCK:
        return exp.cast(inner, _PG_TO_DUCK[pg.name])
    return node


def _datatype(node: exp.DataType) -> exp.Expression:
    """A PostgreSQL type name DuckDB lacks (``pg_catalog.int2``, ``oid``, ``name``…) as the DuckDB type it means."""
    kind = _kind(node)
    if kind is None:
        return node
    if kind in _REG_TYPES:
        return exp.DataType.build("BIGINT")
    if kind in _TEXT_TYPES:
        return exp.DataType.build("VARCHAR")
    pg = BY_NAME.get(kind)
    if pg is not None and pg.name in _PG_TO_DUCK:
        return exp.DataType.build(_PG_TO_DUCK[pg.name])
    return node


def _subquery(column: str, table: str, where: exp.Expression | None = None) -> exp.Expression:
    select = exp.select(column).from_(table).limit(1)
    if where is not None:
        select = select.where(where)
    return exp.Subquery(this=select)


def _reg_value(kind: str, value: exp.Expression) -> exp.Expression:
    """The oid a reg* cast means: a name looked up in the catalog, or the number itself."""
    if isinstance(value, exp.Literal) and value.is_string and not value.name.strip().isdigit():
        name = value.name.strip()
        if kind == "regclass":
            relname = name.rsplit(".", 1)[-1].strip('"')
            return _subquery("oid", "pg_catalog.pg_class", exp.column("relname").eq(exp.Literal.string(relname)))
        if kind == "regtype":
            return _type_oid(exp.Literal.string(name))
        if kind == "regnamespace":
            return _subquery("oid", "pg_catalog.pg_namespace", exp.column("nspname").eq(exp.Literal.string(name)))
        return exp.cast(exp.null(), "BIGINT")
    if kind in ("regclass", "regtype", "regnamespace") and not isinstance(value, exp.Literal):
        # a column or a parameter: a number is the oid itself, a name is looked up (what the literal case does)
        number = exp.TryCast(this=value.copy(), to=exp.DataType.build("BIGINT"))
        bare = exp.Anonymous(this="regexp_replace", expressions=[
            exp.cast(value.copy(), "VARCHAR"), exp.Literal.string(r'^.*\.|"'), exp.Literal.string(""),
            exp.Literal.string("g")])
        lookup = (_type_oid(bare) if kind == "regtype" else
                  _subquery("oid", "pg_catalog.pg_class" if kind == "regclass" else "pg_catalog.pg_namespace",
                            exp.column("relname" if kind == "regclass" else "nspname").eq(bare)))
        return exp.Coalesce(this=number, expressions=[lookup])
    return exp.cast(value, "BIGINT")


def _reg_to_text(kind: str, oid: exp.Expression) -> exp.Expression:
    if kind == "regclass":
        return _subquery("relname", "pg_catalog.pg_class", exp.column("oid").eq(oid))
    if kind == "regtype":
        return _format_type(oid)
    if kind == "regnamespace":
        return _subquery("nspname", "pg_catalog.pg_namespace", exp.column("oid").eq(oid))
    if kind == "regrole":
        return _subquery("rolname", "pg_catalog.pg_roles", exp.column("oid").eq(oid))
    return exp.cast(exp.null(), "VARCHAR")


def _format_type(oid: exp.Expression) -> exp.Expression:
    case = exp.Case(this=oid)
    for t in PG_TYPES:
        case = case.when(exp.Literal.number(t.oid), exp.Literal.string(t.formatted))
    return case.else_(exp.cast(exp.null(), "VARCHAR"))


def _type_oid(name: exp.Expression) -> exp.Expression:
    case = exp.Case(this=exp.Lower(this=exp.Trim(this=name)))
    for written, t in sorted(BY_NAME.items()):
        case = case.when(exp.Literal.string(written), exp.Literal.number(t.oid))
    return case.else_(exp.cast(exp.null(), "BIGINT"))


def _session_value(what: str) -> exp.Expression:
    if what == "user":
        return _subquery("rolname", "pg_catalog.pg_roles")
    if what == "database":
        return _subquery("datname", "pg_catalog.pg_database")
    return _subquery("nspname", "pg_catalog.pg_namespace", exp.column("oid").eq(exp.Literal.number(STORE_NAMESPACE_OID)))


def _format(pg_format: str) -> str:
    out, i = [], 0
    while i < len(pg_format):
        for pat, rep in _PG_FORMAT:
            if pg_format.startswith(pat, i):
                out.append(rep)
                i += len(pat)
                break
        else:
            ch = pg_format[i]
            out.append("%%" if ch == "%" else ch)
            i += 1
    return "".join(out)


def _args(node: exp.Func) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    return [v for k, v in node.args.items() if isinstance(v, exp.Expression)] + [
        e for k, v in node.args.items() if isinstance(v, list) for e in v if isinstance(e, exp.Expression)]


def _function(node: exp.Func) -> exp.Expression:
    name = node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()
    name = _ALIASES.get(name, name)
    args = _args(node)
    if name == "version" and not args:
        return exp.Literal.string(VERSION_STRING)
    if name in ("current_database", "current_catalog"):
        return _session_value("database")
    if name in ("current_user", "session_user", "current_role"):
        return _session_value("user")
    if name == "current_schema" and not args:
        return _session_value("schema")
    if name == "current_schemas":
        implicit = args and isinstance(args[0], exp.Boolean) and args[0].this
        schema = _session_value("schema")
        items = [exp.Literal.string("pg_catalog"), schema] if implicit else [schema]
        return exp.Array(expressions=items)
    if name == "pg_backend_pid":
        return _subquery("pid", "pg_catalog.pg_stat_activity")
    if name == "current_setting" and args:
        return _subquery("setting", "pg_catalog.pg_settings", exp.column("name").eq(exp.Lower(this=args[0])))
    if name == "format_type" and args:
        return _format_type(args[0])
    if name == "pg_get_userbyid":
        return _session_value("user")
    if name == "obj_description" and args:
        return _subquery("description", "pg_catalog.pg_description",
                         exp.and_(exp.column("objoid").eq(args[0]), exp.column("objsubid").eq(exp.Literal.number(0))))
    if name in _TRUE_FUNCTIONS:
        return exp.true()
    if name in _FALSE_FUNCTIONS:
        return exp.false()
    if name in _NULL_TEXT_FUNCTIONS:
        return exp.cast(exp.null(), "VARCHAR")
    if name in _VOID_FUNCTIONS and not args:
        return exp.Literal.string("")
    if name in _ZERO_FUNCTIONS:
        return exp.Literal.number(0)
    if name == "_pg_expandarray" and len(args) == 1:
        return _expand_array(args[0])
    if name == "pg_encoding_to_char":
        return exp.Literal.string("UTF8")
    if name == "pg_postmaster_start_time":
        return exp.CurrentTimestamp()
    if name == "to_regtype" and args:
        return _type_oid(args[0])
    if name in ("to_regclass", "to_regnamespace") and args:
        table, column = (("pg_catalog.pg_class", "relname") if name == "to_regclass"
                         else ("pg_catalog.pg_namespace", "nspname"))
        bare = exp.Anonymous(this="regexp_replace", expressions=[args[0], exp.Literal.string(r'^.*\.|"'),
                                                                  exp.Literal.string(""), exp.Literal.string("g")])
        return _subquery("oid", table, exp.column(column).eq(bare))
    if name == "quote_ident" and args:
        return args[0]
    if name in ("quote_literal", "quote_nullable") and len(args) == 1:
        return _quote_literal(args[0], nullable=name == "quote_nullable")
    if name == "json_build_object":
        return exp.Anonymous(this="json_object", expressions=args)
    if name == "to_date" and len(args) == 2 and isinstance(args[1], exp.Literal):
        return exp.cast(exp.Anonymous(this="strptime", expressions=[args[0], exp.Literal.string(_format(args[1].name))]),
                        "DATE")
    if name in ("array_upper", "array_length") and len(args) == 2:
        return exp.Anonymous(this="len", expressions=[args[0]])
    if name == "array_lower" and len(args) == 2:
        return exp.Literal.number(1)
    return node



#: every function name this module replaces (the rewritten statement never calls DuckDB's function of that name)
REWRITTEN_FUNCTIONS = frozenset(
    _TRUE_FUNCTIONS | _FALSE_FUNCTIONS | _NULL_TEXT_FUNCTIONS | _ZERO_FUNCTIONS | _VOID_FUNCTIONS | _NAMED_FUNCTIONS
    | {"json_build_object", "to_date", "array_upper", "array_lower", "array_length", "quote_ident", "quote_literal",
       "quote_nullable", "current_version"})


def _quote_literal(value: exp.Expression, *, nullable: bool) -> exp.Expression:
    """PostgreSQL's ``quote_literal(x)``: x's text as a string literal (quotes doubled; with a backslash, an E''
    string with backslashes doubled); NULL stays NULL, or is the word NULL for ``quote_nullable``. asyncpg's
    ``copy_from_query`` inlines its arguments with it."""
    text = exp.cast(value.copy(), "VARCHAR")
    escaped = exp.Anonymous(this="replace", expressions=[
        exp.Anonymous(this="replace", expressions=[text, exp.Literal.string("\\"), exp.Literal.string("\\\\")]),
        exp.Literal.string("'"), exp.Literal.string("''")])
    prefix = exp.If(this=exp.Anonymous(this="contains", expressions=[text.copy(), exp.Literal.string("\\")]),
                    true=exp.Literal.string("E"), false=exp.Literal.string(""))
    quoted = exp.DPipe(this=exp.DPipe(this=exp.DPipe(this=prefix, expression=exp.Literal.string("'")),
                                      expression=escaped), expression=exp.Literal.string("'"))
    if nullable:
        return exp.Coalesce(this=exp.Paren(this=quoted), expressions=[exp.Literal.string("NULL")])
    return exp.Paren(this=quoted)


def _expand_array(array: exp.Expression) -> exp.Expression:
    """``information_schema._pg_expandarray(a)``: a row (x, n) per element (pgjdbc's getPrimaryKeys reads it)."""
    v, i = exp.to_identifier("__iq_v"), exp.to_identifier("__iq_i")
    struct = exp.Anonymous(this="struct_pack", expressions=[
        exp.PropertyEQ(this=exp.to_identifier("x"), expression=exp.column(v)),
        exp.PropertyEQ(this=exp.to_identifier("n"), expression=exp.column(i))])
    lam = exp.Lambda(this=struct, expressions=[v, i])
    return exp.Unnest(expressions=[exp.Anonymous(this="list_transform", expressions=[array, lam])])


def array_literal(text: str) -> list[str | None] | None:
    """The elements of a one-dimensional array literal ``{a,"b c",NULL}`` (None: not one)."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")) or "{" in t[1:-1]:
        return None
    body, out, i = t[1:-1], [], 0
    while i < len(body):
        if body[i] == '"':
            j, buf = i + 1, []
            while j < len(body) and body[j] != '"':
                j += body[j] == "\\"
                buf.append(body[j] if j < len(body) else "")
                j += 1
            out.append("".join(buf))
            i = j + 1
        else:
            j = body.find(",", i)
            j = len(body) if j == -1 else j
            item = body[i:j].strip()
            out.append(None if item.upper() == "NULL" else item)
            i = j
        while i < len(body) and body[i] in ", ":
            i += 1
    return out
