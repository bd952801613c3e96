"""JSON in and out of the HTTP face: orjson where it gives the standard library's answer, the stdlib elsewhere.

orjson reads request bodies and writes answers (issue 14: the stdlib's
Python-level encoder and decoder were a share of a point lookup). What the
two libraries would answer differently must take the stdlib's way, so a
client sees what it always saw: the same values in, the same JSON values out.
"""

from __future__ import annotations

import json
import math
import random
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

import pytest

from gateway.engine.errors import BadRequest
from gateway.engine.json_values import _ENCODER, _clean, dumps, dumps_bytes
from gateway.http.limits import parse_json, parse_sql_request


def _stdlib(raw: bytes) -> object:
    return json.loads(raw.decode("utf-8"))


@pytest.mark.parametrize("raw", [
    b'{"sql": "SELECT 1", "params": [1, -2, 3.5, "x", null, true, [1, [2]], {"a": 1}]}',
    b'{"a": 18446744073709551616}',  # past 64 bits: orjson would read a float
    b'{"a": -9223372036854775809}',
    b'{"a": 9223372036854775807, "b": -9223372036854775808}',
    b'[12345678901234567890123456789]',
    b'{"a": NaN, "b": Infinity}',  # the stdlib reads these; orjson refuses them
    b'[1e400]',
    b'{"a": "\\ud800"}',  # a lone surrogate escape (the planner refuses it later, with its name)
    b'{"a": 1, "a": 2}',
    b'{"t": "caf\\u00e9 \xc3\xa9 \\u2028"}',
    b'  [0.1, 1e-07, -0.0, 1E5, 5e-324]  ',
])
def test_a_body_reads_as_the_stdlib_reads_it(raw: bytes) -> None:
    got, expected = parse_json(raw, "the body"), _stdlib(raw)
    assert repr(got) == repr(expected)  # repr: nan == nan is False, and 1 == 1.0 would hide a float


@pytest.mark.parametrize("raw", [b'{"a": ', b'[1,]', b"\xff\xfe", b'{"a" 1}', b"[" * 100_000,
                                 b'\xef\xbb\xbf{"a": 1}'])  # the last: a byte order mark
def test_bad_json_is_the_stdlib_s_error(raw: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        parse_json(raw, "the body")
    assert "the body" in str(info.value)
    try:
        _stdlib(raw)
    except json.JSONDecodeError as exc:
        assert exc.msg in str(info.value) and (info.value.line, info.value.col) == (exc.lineno, exc.colno)
    except (UnicodeDecodeError, RecursionError):
        pass
    else:  # pragma: no cover - every raw here is bad JSON
        raise AssertionError(raw)


def test_random_bodies_read_as_the_stdlib_reads_them() -> None:
    rng = random.Random(22)
    atoms = ["0", "-1", "7919", "1.5", "-0.0", "1e300", '"x"', '"\\u00e9"', "true", "false", "null",
             str(2**63), str(-(2**63)), str(2**64), "12345678901234567891234"]
    for _ in range(3000):
        parts = [rng.choice(atoms) for _ in range(rng.randrange(0, 6))]
        raw = ("{" + ", ".join(f'"k{i}": {p}' for i, p in enumerate(parts)) + "}").encode()
        assert repr(parse_json(raw, "b")) == repr(_stdlib(raw)), raw


def test_the_common_body_is_checked_as_every_body_is() -> None:
    req = parse_sql_request(b'{"sql": "SELECT 1", "params": [1]}', 1000)
    assert (req.sql, req.params, req.position, req.session) == ("SELECT 1", [1], None, None)
    assert parse_sql_request(b'{"sql": "SELECT 1"}', 1000).params is None
    for raw, message in ((b'{"sql": "SELECT 1", "param": [1]}', "unknown field"),
                         (b'{"sql": 5}', 'field "sql"'), (b'{"sql": "  "}', 'field "sql"'),
                         (b'{"sql": "SELECT 1", "params": 5}', 'field "params"'),
                         (b" \t\r\n", "empty"), (b"", "empty")):
        with pytest.raises(BadRequest, match=message):
            parse_sql_request(raw, 1000)
    full = parse_sql_request(b'{"sql": "SELECT 1", "params": [], "partial": true, "wait_ms": 5, "max_rows": 2,'
                             b' "position": {"t": {"0": 3}}, "session": {"max_rows": 1}}', 1000)
    assert (full.partial, full.wait_ms, full.max_rows, full.session) == (True, 5, 2, {"max_rows": 1})
    assert full.position is not None and full.position.to_json() == '{"t":{"0":3}}'


def _stdlib_dumps(obj: object) -> str:
    try:
        return _ENCODER.encode(obj)
    except (ValueError, TypeError):
        return _ENCODER.encode(_clean(obj))


VALUES: list[object] = [
    [("n7919", 1979.75, 3, None, True)],
    [[1, -0.0, 1e-07, 1e16, 5e-324, 1.7976931348623157e308, float("nan"), float("inf"), -math.inf]],
    ["café", "\u2028", "emoji \U0001f600", "quote \" backslash \\ tab \t nul \x00"],
    [datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), datetime(2024, 1, 2, 3, 4, 5, 6),
     datetime(2024, 1, 2, tzinfo=timezone(timedelta(hours=5, minutes=30))), date(2024, 1, 2), time(1, 2, 3, 4)],
    [time(1, 2, 3, tzinfo=timezone.utc)],  # orjson refuses an offset on a time: the stdlib's way
    [Decimal("1.50"), Decimal("-1E+30"), b"\x00\xff", bytearray(b"ab"), timedelta(days=1, seconds=5)],
    [2**63 - 1, -(2**63), 2**64, -(2**100)],  # past 64 bits: the stdlib's way
    [{"a": 1, "b": [1, {"c": None}]}, {1: "int key", 2.5: "float key"}],  # MAP keys that are not text
    [frozenset({1}), (1, 2), {3}],
    ["lone \ud800 surrogate"],
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_answers_are_the_json_values_the_stdlib_wrote(value: object) -> None:
    """The same JSON values as before (text may differ only in escapes and a float's exponent: 1e-7 for 1e-07)."""
    text = dumps(value)
    assert dumps_bytes(value) == text.encode("utf-8", "surrogatepass")
    ours, before = json.loads(text), json.loads(_stdlib_dumps(value))
    assert repr(ours) == repr(before)
