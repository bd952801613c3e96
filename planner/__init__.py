"""iqgate planner: SQL text + store catalog to a Plan of IQv2 requests and residual DuckDB SQL.

Pure: no I/O, no DuckDB, no Flask. ``plan()`` is the entry point (``Planner`` the same with a template cache,
one per Gateway);
``Dialect`` is the sqlglot dialect with iqgate's extensions;
``SESSION_SETTINGS`` documents every ``SET`` knob; ``explain_text`` renders a
plan the way ``EXPLAIN`` shows it.
"""

from __future__ import annotations

from .deep import PlanningInterrupted
from .dialect import Dialect
from .errors import (
    ForbiddenFunctionError,
    InvalidPositionError,
    InvalidSettingError,
    ParameterError,
    PlanningError,
    ReadOnlyError,
    ResourceLimitError,
    SqlSyntaxError,
    TableScanDisabledError,
    TypeMismatchError,
    UnknownColumnError,
    UnknownStoreError,
    UnsupportedSqlError,
)
from .explain import explain_text
from .param_types import parameter_types
from .plan import FAILURE_COLUMNS, PSEUDO_COLUMNS, Plan, StatementKind, StoreScan
from .planning import Planner, plan, plan_shape
from .point_lanes import PointLane
from .settings import SESSION_SETTINGS, Setting

__all__ = [
    "Planner", "plan", "plan_shape", "parameter_types", "PointLane", "explain_text", "Dialect", "SESSION_SETTINGS", "Setting",
    "Plan", "StoreScan", "StatementKind", "PSEUDO_COLUMNS", "FAILURE_COLUMNS",
    "PlanningError", "SqlSyntaxError", "UnknownStoreError", "UnknownColumnError", "TypeMismatchError",
    "UnsupportedSqlError", "ReadOnlyError", "ResourceLimitError", "ForbiddenFunctionError", "TableScanDisabledError",
    "InvalidPositionError", "InvalidSettingError", "ParameterError", "PlanningInterrupted",
]
