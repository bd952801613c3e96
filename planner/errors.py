"""Planning errors: each names the problem and, where it has one, the line and column."""

from __future__ import annotations

__all__ = [
    "ResourceLimitError",
    "PlanningError",
    "SqlSyntaxError",
    "UnknownStoreError",
    "UnknownSchemaError",
    "UnknownColumnError",
    "TypeMismatchError",
    "UnsupportedSqlError",
    "ReadOnlyError",
    "ForbiddenFunctionError",
    "TableScanDisabledError",
    "InvalidPositionError",
    "InvalidSettingError",
    "ParameterError",
]


class PlanningError(Exception):
    """Base: ``code`` is stable (the HTTP error code), ``line``/``col`` are 1-based when known."""

    code = "PLANNING_ERROR"

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.message} (line {self.line}, column {self.col})"
        return self.message


class SqlSyntaxError(PlanningError):
    code = "SQL_SYNTAX_ERROR"


class UnknownStoreError(PlanningError):
    code = "UNKNOWN_STORE"


class UnknownColumnError(PlanningError):
    code = "UNKNOWN_COLUMN"
    store: str | None = None  # the store the column was looked up in, when it was one
    column: str | None = None


class TypeMismatchError(PlanningError):
    code = "TYPE_MISMATCH"


class UnsupportedSqlError(PlanningError):
    code = "UNSUPPORTED"


class ReadOnlyError(PlanningError):
    code = "READ_ONLY"


class ForbiddenFunctionError(PlanningError):
    code = "FORBIDDEN_FUNCTION"


class ResourceLimitError(PlanningError):
    """A statement that would exceed a resource limit, visible from its text (a literal-sized giant value)."""

    code = "STATEMENT_TOO_LARGE"


class TableScanDisabledError(PlanningError):
    code = "TABLE_SCAN_DISABLED"


class InvalidPositionError(PlanningError):
    code = "INVALID_POSITION"


class InvalidSettingError(PlanningError):
    code = "INVALID_SETTING"


class ParameterError(PlanningError):
    code = "PARAMETER_ERROR"


class UnknownSchemaError(UnknownStoreError):
    """A table qualified with a schema (or database) that does not exist; the message names the ones that do."""

    code = "UNKNOWN_SCHEMA"
