"""Apache Superset's engine spec for ``iqgate://``: time grains, datetime literals and the SQL charts may use.

Superset picks an engine spec by the SQLAlchemy backend name; without one it
falls back on its base spec, which has no time grains ("No grain spec for
PT1M"), so every time-series chart failed. This module is loaded by Superset
through the ``superset.db_engine_specs`` entry point of ``iqgate-client``
(installed with ``pip install 'iqgate-client[superset]'`` into Superset's own
environment) and is never imported anywhere else: it needs Superset.

The SQL it writes is what iqgate runs (DuckDB's functions over the store
columns): ``DATE_TRUNC`` and ``TIME_BUCKET`` on the ``window_start`` /
``window_end`` / ``rowtime`` / ``valid_from`` columns (``TIMESTAMP WITH TIME
ZONE``, in UTC), ``TIMESTAMP '…'`` literals for filters, sub-queries in FROM
(virtual datasets), GROUP BY expressions, ORDER BY metrics and LIMIT/OFFSET.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import types
from superset.constants import TimeGrain
from superset.db_engine_specs.base import BaseEngineSpec
from superset.utils.core import GenericDataType

__all__ = ["IqgateEngineSpec"]


def _bucket(interval: str) -> str:
    """Fixed-width buckets aligned on whole units since the epoch (DuckDB's TIME_BUCKET)."""
    return f"TIME_BUCKET(INTERVAL '{interval}', {{col}})"


class IqgateEngineSpec(BaseEngineSpec):
    """iqgate: SQL over the live state stores of a streaming pipeline (a read-only, DuckDB-flavoured SQL)."""

    engine = "iqgate"
    engine_name = "iqgate"
    default_driver = "rest"
    sqlalchemy_uri_placeholder = "iqgate://host:8080[?token=…&position=…&partial=true&wait_ms=…]"

    allows_joins = True
    allows_subqueries = True
    allows_alias_in_select = True
    allows_alias_in_orderby = True
    allows_sql_comments = True
    time_groupby_inline = False
    supports_file_upload = False
    disable_ssh_tunneling = True

    _time_grain_expressions = {
        None: "{col}",
        TimeGrain.SECOND: "DATE_TRUNC('second', {col})",
        TimeGrain.FIVE_SECONDS: _bucket("5 seconds"),
        TimeGrain.THIRTY_SECONDS: _bucket("30 seconds"),
        TimeGrain.MINUTE: "DATE_TRUNC('minute', {col})",
        TimeGrain.FIVE_MINUTES: _bucket("5 minutes"),
        TimeGrain.TEN_MINUTES: _bucket("10 minutes"),
        TimeGrain.FIFTEEN_MINUTES: _bucket("15 minutes"),
        TimeGrain.THIRTY_MINUTES: _bucket("30 minutes"),
        TimeGrain.HALF_HOUR: _bucket("30 minutes"),
        TimeGrain.HOUR: "DATE_TRUNC('hour', {col})",
        TimeGrain.SIX_HOURS: _bucket("6 hours"),
        TimeGrain.DAY: "DATE_TRUNC('day', {col})",
        TimeGrain.WEEK: "DATE_TRUNC('week', {col})",
        TimeGrain.WEEK_STARTING_MONDAY: "DATE_TRUNC('week', {col})",
        TimeGrain.WEEK_STARTING_SUNDAY: "DATE_TRUNC('week', {col} + INTERVAL '1 day') - INTERVAL '1 day'",
        TimeGrain.WEEK_ENDING_SATURDAY: "DATE_TRUNC('week', {col} + INTERVAL '1 day') + INTERVAL '5 days'",
        TimeGrain.WEEK_ENDING_SUNDAY: "DATE_TRUNC('week', {col}) + INTERVAL '6 days'",
        TimeGrain.MONTH: "DATE_TRUNC('month', {col})",
        TimeGrain.QUARTER: "DATE_TRUNC('quarter', {col})",
        TimeGrain.QUARTER_YEAR: "DATE_TRUNC('quarter', {col})",
        TimeGrain.YEAR: "DATE_TRUNC('year', {col})",
    }

    # The dialect reports DuckDB type names; Superset needs their generic kind to offer time grains and filters.
    column_type_mappings = (
        (re.compile(r"^timestamp", re.IGNORECASE), types.DateTime(), GenericDataType.TEMPORAL),
        (re.compile(r"^datetime", re.IGNORECASE), types.DateTime(), GenericDataType.TEMPORAL),
        (re.compile(r"^date$", re.IGNORECASE), types.Date(), GenericDataType.TEMPORAL),
        (re.compile(r"^(hugeint|ubigint|bigint)", re.IGNORECASE), types.BigInteger(), GenericDataType.NUMERIC),
        (re.compile(r"^(double|float|real)", re.IGNORECASE), types.Float(), GenericDataType.NUMERIC),
        (re.compile(r"^(varchar|text|string)", re.IGNORECASE), types.String(), GenericDataType.STRING),
        (re.compile(r"^boolean", re.IGNORECASE), types.Boolean(), GenericDataType.BOOLEAN),
    )

    @classmethod
    def epoch_to_dttm(cls) -> str:
        return "TO_TIMESTAMP({col})"

    @classmethod
    def epoch_ms_to_dttm(cls) -> str:
        return "EPOCH_MS(CAST({col} AS BIGINT))"

    @classmethod
    def convert_dttm(cls, target_type: str, dttm: datetime, db_extra: dict[str, Any] | None = None) -> str | None:
        """A filter bound as a typed literal; Superset's datetimes are naive UTC, like the stores' times."""
        sqla_type = cls.get_sqla_column_type(target_type)
        if isinstance(sqla_type, types.DateTime):
            return f"TIMESTAMP '{dttm.isoformat(sep=' ', timespec='microseconds')}'"
        if isinstance(sqla_type, types.Date):
            return f"DATE '{dttm.date().isoformat()}'"
        return None
