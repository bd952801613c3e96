"""The gateway's own statements: SHOW TABLES, DESCRIBE <store>, SET <setting> = <value>.

They never touch a store, so they plan to a Plan kind the gateway answers
from the catalog or the session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from stores.catalog.schema import StoreSpec

from .catalog import resolve_relation
from .errors import InvalidSettingError, UnsupportedSqlError
from .literals import value_ref
from .plan import StatementKind
from .positions import node_position
from .settings import SESSION_SETTINGS, Setting, validate_setting
from .template import Template

__all__ = ["plan_show", "plan_describe", "plan_set", "plan_reset", "show_setting_sql"]

_UNKNOWN = Setting(None, object, "")


def _template(**kw: Any) -> Template:
    return Template(**kw)


def plan_show(sql: str, node: exp.Show, explain: bool) -> Template:
    what = str(node.this or "").upper()
    if what not in ("TABLES", "ALL TABLES"):
        raise UnsupportedSqlError(f"only SHOW TABLES is supported; got SHOW {what}", line=1, col=1)
    return _template(kind=StatementKind.SHOW_TABLES, explain=explain)


def _command_argument(node: exp.Command) -> str:
    """What follows the keyword of a statement sqlglot keeps as a Command (``RESET x``, ``SHOW x``)."""
    return str(node.expression.this if isinstance(node.expression, exp.Literal) else node.expression or "").strip()


def show_setting_sql(node: exp.Command) -> str:
    """``SHOW <setting>`` / ``SHOW ALL`` as PostgreSQL answers them (one column named after the setting; name,
    setting, description), as the SELECT over ``pg_settings`` that says the same: the session's values."""
    name = _command_argument(node)
    if not name:
        raise UnsupportedSqlError("expected SHOW <setting>, SHOW ALL or SHOW TABLES", line=1, col=1)
    if name.upper() == "ALL":
        return "SELECT name, setting, short_desc AS description FROM pg_catalog.pg_settings ORDER BY name"
    try:
        key, _ = validate_setting(name, SESSION_SETTINGS.get(name.lower(), _UNKNOWN).default, line=1, col=6)
    except InvalidSettingError as exc:  # SHOW DATABASES, SHOW COLUMNS …: other databases' SHOW statements
        raise InvalidSettingError(f"{exc.message}; SHOW takes a setting, ALL or TABLES", line=1, col=6) from None
    return f"SELECT setting AS {key} FROM pg_catalog.pg_settings WHERE name = '{key}'"


def plan_describe(sql: str, node: exp.Describe, catalog: Mapping[str, StoreSpec], explain: bool) -> Template:
    table = node.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise UnsupportedSqlError("DESCRIBE takes a store name: DESCRIBE <store>", line=1, col=1)
    line, col = node_position(sql, table)
    name, spec = resolve_relation(catalog, table, line=line, col=col)
    if isinstance(spec, StoreSpec):
        return _template(kind=StatementKind.DESCRIBE, explain=explain, describe=name, deps={name: spec})
    template = _template(kind=StatementKind.DESCRIBE, explain=explain, describe=name)
    template.stream_deps[name] = spec
    return template


def plan_set(sql: str, node: exp.Set, explain: bool) -> Template:
    if node.args.get("unset"):
        raise UnsupportedSqlError("UNSET is not supported; SET the setting to its default instead", line=1, col=1)
    settings: dict[str, Any] = {}
    for item in node.expressions:
        assignment = item.this if isinstance(item, exp.SetItem) else None
        line, col = node_position(sql, item)
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise InvalidSettingError("expected SET <setting> = <value>", line=line or 1, col=col or 1)
        name = assignment.this.name
        value_node = assignment.expression
        if isinstance(value_node, exp.Placeholder):
            raise InvalidSettingError(f"setting {name}: placeholders are not allowed in SET", line=line, col=col)
        ref = value_ref(value_node, {})
        if isinstance(value_node, (exp.Column, exp.Var)) and value_node.name.lower() == "default":
            key, _ = validate_setting(name, SESSION_SETTINGS.get(name.lower(), _UNKNOWN).default, line=line, col=col)
            settings[key] = SESSION_SETTINGS[key].default
            continue
        if isinstance(value_node, (exp.Column, exp.Var)) and value_node.name.lower() in ("true", "false", "on", "off"):
            value: Any = value_node.name
        elif ref is None:
            raise InvalidSettingError(
                f"setting {name}: the value must be a literal (string, number or boolean)", line=line, col=col
            )
        else:
            value = ref.value
        key, val = validate_setting(name, value, line=line, col=col)
        settings[key] = val
    return _template(kind=StatementKind.SET, explain=explain, settings=settings)


def plan_reset(sql: str, node: exp.Command, explain: bool) -> Template:
    """``RESET <setting>`` / ``RESET ALL``: the defaults, as a SET plan (what the session applies)."""
    name = _command_argument(node)
    if not name:
        raise InvalidSettingError("expected RESET <setting> or RESET ALL", line=1, col=1)
    if name.upper() == "ALL":
        return _template(kind=StatementKind.SET, explain=explain, settings={k: s.default for k, s in SESSION_SETTINGS.items()})
    key, _ = validate_setting(name, SESSION_SETTINGS.get(name.lower(), _UNKNOWN).default, line=1, col=7)
    return _template(kind=StatementKind.SET, explain=explain, settings={key: SESSION_SETTINGS[key].default})
