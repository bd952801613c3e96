"""DECIMAL(p, s) columns: the type, and its values stored exactly as order-preserving bytes.

A Spark ``DecimalType(p, s)`` (a value schema's ``DECIMAL(10,2)``, or ``sum`` of one:
``decimal(p+10, s)``) must come back as the same exact number: no float on the
way, so sums of 0.1 stay 0.1, 0.2, 0.3. A value is kept as its unscaled integer
(value × 10^s, exact) in 16 bytes big-endian with the sign bit flipped (the
two's complement + 2^127): SQLite compares BLOBs with memcmp, so byte order is
numeric order and a DECIMAL key range-scans in numeric order (``-1.5 < -0.01 <
0 < 2``). The partitioner hashes these same 16 bytes, so writer, planner and
IQv2 callers agree on where a key lives.

Precision is 1..38: what Arrow's decimal128, DuckDB's DECIMAL and Spark hold.
Readers get ``decimal.Decimal`` with the column's scale (``Decimal('12.50')``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

__all__ = ["DecimalType", "EXACT", "MAX_PRECISION", "parse_decimal", "to_decimal", "encode_decimal", "decode_decimal",
           "WIDTH"]

MAX_PRECISION = 38
WIDTH = 16
_BIAS = 1 << 127
_TEXT = re.compile(r"^\s*(?:DECIMAL|NUMERIC|DEC)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$", re.IGNORECASE)
EXACT = Context(prec=100)  # Python's default context keeps 28 digits: 38-digit values would round
_CTX = EXACT


@dataclass(frozen=True, slots=True)
class DecimalType:
    """``DECIMAL(precision, scale)``; ``value`` is the DuckDB type text, like ``SqlType.value``."""

    precision: int
    scale: int

    def __post_init__(self) -> None:
        p, s = self.precision, self.scale
        if not isinstance(p, int) or not isinstance(s, int) or isinstance(p, bool) or isinstance(s, bool):
            raise ValueError(f"DECIMAL precision and scale are integers, got ({p!r}, {s!r})")
        if not 1 <= p <= MAX_PRECISION:
            raise ValueError(f"DECIMAL({p},{s}): precision {p} is not supported: a store holds DECIMAL of "
                             f"precision 1 to {MAX_PRECISION} (Arrow decimal128, DuckDB and Spark hold no more); "
                             "cast the column to a smaller DECIMAL or to DOUBLE")
        if not 0 <= s <= p:
            raise ValueError(f"DECIMAL({p},{s}): scale {s} must be between 0 and the precision {p}")

    @property
    def value(self) -> str:
        return f"DECIMAL({self.precision},{self.scale})"

    def __str__(self) -> str:
        return self.value


def parse_decimal(text: str) -> DecimalType | None:
    """``DECIMAL(10,2)``, ``decimal(10,2)``, ``NUMERIC(5)``, ``DECIMAL`` (Spark's default: (10,0)); else None.

    Raises ValueError for a DECIMAL whose precision or scale is out of range.
    """
    m = _TEXT.match(text)
    if m is None:
        return None
    p = int(m.group(1)) if m.group(1) else 10
    s = int(m.group(2)) if m.group(2) else 0
    return DecimalType(p, s)


def to_decimal(t: DecimalType, value: Any) -> Decimal:
    """A number (Decimal, int, text, or a float by its shortest repr) → an exact Decimal of scale ``t.scale``.

    Refuses a value with more decimal places than the scale (rounding would
    change it) or more digits than the precision: raises ValueError saying which.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, float):
        value = repr(value)
    try:
        d = value if isinstance(value, Decimal) else Decimal(value.strip() if isinstance(value, str) else value)
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None
    if not d.is_finite():
        raise ValueError(f"{value!r} is not a finite number")
    try:
        q = d.quantize(Decimal(1).scaleb(-t.scale, _CTX), context=_CTX)
    except InvalidOperation:
        raise ValueError(f"{value!r} has more than {t.precision} digits") from None
    if q != d:
        raise ValueError(f"{value!r} has more than {t.scale} decimal places (rounding would change it)")
    if abs(int(q.scaleb(t.scale, _CTX))) >= 10 ** t.precision:
        raise ValueError(f"{value!r} has more than {t.precision - t.scale} digits before the point")
    return q


def encode_decimal(t: DecimalType, value: Any) -> bytes:
    """A value → its stored 16 bytes (see the module doc); ``to_decimal``'s checks first."""
    unscaled = int(to_decimal(t, value).scaleb(t.scale, _CTX))
    return (unscaled + _BIAS).to_bytes(WIDTH, "big")


def decode_decimal(t: DecimalType, raw: bytes) -> Decimal:
    """Stored 16 bytes → the Decimal with the column's scale."""
    if len(raw) != WIDTH:
        raise ValueError(f"a stored {t.value} is {WIDTH} bytes, got {len(raw)}")
    return Decimal(int.from_bytes(raw, "big") - _BIAS).scaleb(-t.scale, _CTX)
