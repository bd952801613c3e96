"""Every fixture case: the SQL plans to exactly the EXPLAIN text (or the error) written beside it."""

from __future__ import annotations

import pytest

import planner
from tests.planner.fixture_format import actual, load_cases
from tests.planner.planner_catalog import CATALOG

CASES = load_cases()


def test_fixtures_were_found() -> None:
    files = {c.file for c in CASES}
    assert {"kv_pushdown", "key_types", "windows", "versioned", "residual", "statements", "params", "errors"} <= files
    assert all(c.expected for c in CASES), [c.id for c in CASES if not c.expected]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fixture(case) -> None:
    assert actual(case, CATALOG) == case.expected


@pytest.mark.parametrize("case", [c for c in CASES if not c.expected.startswith("error:")], ids=lambda c: c.id)
def test_fixture_is_stable_through_the_cache(case) -> None:
    """A cached template binds to the same plan as a fresh analysis."""
    cached = planner.Planner()
    first = actual(case, CATALOG, cached.plan)
    second = actual(case, CATALOG, cached.plan)
    assert first == second == case.expected
