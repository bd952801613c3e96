"""Session settings: the gateway's own ``SET name = value`` knobs, their defaults and validation.

They live in the planner because ``SET`` is a statement the planner plans,
and because BI tools that cannot send custom syntax set the position bound
this way instead of writing ``AS OF POSITION``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stores.iqv2.position import Position, PositionError

from .errors import InvalidSettingError
from .suggest import closest

__all__ = ["Setting", "SESSION_SETTINGS", "CONSISTENCY_LEVELS", "validate_setting", "resolve_session",
           "position_from_setting"]


@dataclass(frozen=True, slots=True)
class Setting:
    default: Any
    type: type
    doc: str
    #: the value's canonical form, where the type's own converter is not it (a choice, a duration)
    convert: Callable[[str, Any], Any] | None = None


CONSISTENCY_LEVELS = ("snapshot", "monotonic", "bounded_staleness", "eventual")


def _to_consistency(name: str, value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in CONSISTENCY_LEVELS:
        raise InvalidSettingError(f"setting {name} must be one of {', '.join(CONSISTENCY_LEVELS)}, got {value!r}")
    return text


_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000, "min": 60_000, "minute": 60_000,
             "minutes": 60_000, "m": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")
_MAX_DURATION_MS = 7 * 24 * 3_600_000


def _to_duration_ms(name: str, value: Any) -> int:
    """A duration as milliseconds: an integer is milliseconds (PostgreSQL's unit for time settings), text may
    name its unit ('2s', '500ms', '1 min'); '' or 0 is none."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise InvalidSettingError(f"setting {name} must be a duration such as '2s' or '500ms', got {value!r}")
    if isinstance(value, (int, float)):
        ms = float(value)
    else:
        m = _DURATION.fullmatch(str(value).lower())
        unit = _UNITS_MS.get(m.group(2) or "ms") if m else None
        if m is None or unit is None:
            raise InvalidSettingError(f"setting {name} must be a duration such as '2s' or '500ms' (units: ms, s, "
                                      f"min, h), got {value!r}")
        ms = float(m.group(1)) * unit
    if ms < 0 or ms > _MAX_DURATION_MS:
        raise InvalidSettingError(f"setting {name} must be between 0 and 7 days, got {value!r}")
    return int(ms)


SESSION_SETTINGS: Mapping[str, Setting] = {
    "position_bound": Setting(
        "", str, "JSON position {topic: {partition: offset}} every store must have reached; '' for none"
    ),
    "partial_results": Setting(
        False, bool, "return the data of the partitions that answered, with the failures beside it, instead of an error"
    ),
    "table_scans": Setting(True, bool, "allow statements that must scan whole stores (no usable key predicate)"),
    "max_rows": Setting(0, int, "largest number of rows a result may have; 0 means no limit"),
    "wait_for_bound_ms": Setting(0, int, "how long to wait for stores to reach the position bound before failing"),
    "statement_timeout_ms": Setting(0, int, "cancel statements running longer than this; 0 means no timeout"),
    "require_active": Setting(False, bool, "only answer from active store partitions (IQv2 requireActive)"),
    "execution_info": Setting(False, bool, "collect IQv2 execution info for every partition"),
    "consistency": Setting(
        "snapshot", str, "snapshot: a statement over several stores reads them at one input Position; monotonic: "
        "that, and never older than this session's last answer; bounded_staleness: any copy at most max_staleness "
        "behind; eventual: every store at its latest", _to_consistency),
    "max_staleness": Setting(
        0, int, "with consistency bounded_staleness: how far behind (time lag) a copy may be, e.g. '2s'; 0 for any",
        _to_duration_ms),
}

_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def _to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidSettingError(f"setting {name} must be a boolean (true/false), got {value!r}")


def _to_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidSettingError(f"setting {name} must be a non-negative integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip(), 10)
        except ValueError:
            raise InvalidSettingError(f"setting {name} must be a non-negative integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise InvalidSettingError(f"setting {name} must be a non-negative integer, got {value!r}")
    return value


def _to_position_text(name: str, value: Any) -> str:
    """The canonical compact JSON of a position ('' for none), so equal bounds cache alike."""
    if value is None or value == "":
        return ""
    try:
        if isinstance(value, Position):
            pos = value
        elif isinstance(value, Mapping):
            pos = Position.from_map(value)
        elif isinstance(value, str):
            pos = Position.from_json(value)
        else:
            raise PositionError(f"expected a JSON position string, got {type(value).__name__}")
    except PositionError as err:
        raise InvalidSettingError(f"setting {name}: {err}") from None
    return "" if pos.is_empty() else pos.to_json()


_CONVERTERS: Mapping[type, Callable[[str, Any], Any]] = {bool: _to_bool, int: _to_int, str: _to_position_text}


def validate_setting(name: str, value: Any, *, line: int | None = None, col: int | None = None) -> tuple[str, Any]:
    """The setting's canonical name and value, or InvalidSettingError naming the known settings."""
    key = name.strip().lower()
    setting = SESSION_SETTINGS.get(key)
    if setting is None:
        close = closest(key, SESSION_SETTINGS)
        hint = f"; did you mean {close!r}?" if close else ""
        raise InvalidSettingError(
            f"unknown setting {name!r}{hint} (known settings: {', '.join(sorted(SESSION_SETTINGS))})",
            line=line,
            col=col,
        )
    try:
        return key, (setting.convert or _CONVERTERS[setting.type])(key, value)
    except InvalidSettingError as err:
        raise InvalidSettingError(err.message, line=line, col=col) from None


def resolve_session(session: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with the validated session values."""
    out = {name: s.default for name, s in SESSION_SETTINGS.items()}
    if session:
        for name, value in session.items():
            key, val = validate_setting(name, value)
            out[key] = val
    return out


def position_from_setting(text: str) -> Position:
    return Position.from_json(text) if text else Position.empty()
