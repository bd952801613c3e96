"""Grants as globs over store names, the system grant, and limits as ceilings."""

from __future__ import annotations

import pytest

from gateway.access import LIMIT_NAMES, Limits, Principal
from gateway.access.principal import check_pattern

STORES = ["revenue", "revenue_per_min", "Revenue_EU", "last_order", "orders_by_day", "sys_stats", "r"]


@pytest.mark.parametrize("grants, readable", [
    (("revenue",), ["revenue"]),
    (("revenue*",), ["revenue", "revenue_per_min", "Revenue_EU"]),
    (("*_by_*", "last_order"), ["last_order", "orders_by_day"]),
    (("?",), ["r"]),
    (("[lr]*",), ["revenue", "revenue_per_min", "Revenue_EU", "last_order", "r"]),
    (("[!r]*",), ["last_order", "orders_by_day", "sys_stats"]),
    (("*",), STORES),
    ((), []),
])
def test_globs_select_stores_case_insensitively(grants: tuple[str, ...], readable: list[str]) -> None:
    p = Principal("u", tuple(check_pattern(g) for g in grants))
    assert p.readable(STORES) == readable
    assert [s for s in STORES if p.can_read(s.upper())] == readable


def test_a_glob_matches_whole_names_only() -> None:
    p = Principal("u", ("revenue",))
    assert not p.can_read("revenue_per_min") and not p.can_read("xrevenue") and not p.can_read("")


def test_the_system_schema_needs_its_own_grant() -> None:
    assert not Principal("u", ("*",)).can_read_system()
    assert Principal("u", (), system=True).can_read_system() and not Principal("u", (), system=True).can_read("x")
    everything = Principal.all_grants("admin")
    assert everything.can_read_system() and everything.can_read("anything") and everything.name == "admin"


@pytest.mark.parametrize("bad", ["", "a b", "rev'", "x;drop", "a/b", "é", "x" * 201])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="store-name glob"):
        check_pattern(bad)


def test_limits_tighten_and_fall_back_on_defaults() -> None:
    user = Limits(max_rows=10, statement_timeout_ms=5_000)
    merged = user.over(Limits(max_rows=100, concurrent_statements=3))
    assert merged == Limits(concurrent_statements=3, max_rows=10, statement_timeout_ms=5_000)
    server = {"max_rows": 1_000_000, "statement_timeout_ms": 1_000, "max_memory_bytes": 2**30, "other": 1}
    assert merged.tighten(server) == {"max_rows": 10, "statement_timeout_ms": 1_000, "max_memory_bytes": 2**30}
    assert set(LIMIT_NAMES) == {"concurrent_statements", "statement_timeout_ms", "max_memory_bytes", "max_rows",
                                "max_response_bytes"}


@pytest.mark.parametrize("raw, says", [
    ({"max_rows": 0}, "max_rows must be a positive integer"),
    ({"max_rows": True}, "max_rows must be a positive integer"),
    ({"max_rows": "10"}, "max_rows must be a positive integer"),
    ({"max_rowz": 10}, "unknown limit(s) max_rowz"),
])
def test_bad_limits_are_named(raw: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError) as err:
        Limits.from_mapping(raw, "[users.alice] limits")
    assert says in str(err.value) and "[users.alice] limits" in str(err.value)
