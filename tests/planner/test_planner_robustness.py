"""Whatever text arrives, the planner answers with a plan or a PlanningError, never another exception.

The gateway maps PlanningError subclasses to client errors and anything else
to an internal error, so a crash on odd input would be a 500 for a typo.
"""

from __future__ import annotations

import logging
import random

import planner
from tests.planner.planner_catalog import CATALOG

TOKENS = [
    "SELECT", "*", "FROM", "mystore", "per_min", "last_order", "sessions", "revenue", "WHERE", "k", "v", "key", "=", "<",
    ">=", "AND", "OR", "NOT", "IN", "(", ")", ",", "1", "'a'", "?", "BETWEEN", "ORDER BY", "LIMIT", "DESC", "JOIN", "ON",
    "AS", "OF", "POSITION", "'{}'", "window_start", "window_end", "valid_from", "_partition", "GROUP BY", "count(*)",
    "WITH", "x", "UNION", "EXPLAIN", "SET", "TIMESTAMP '2024-01-01'", "FOR SYSTEM_TIME AS OF", "NULL", "-", "2.5", ";",
    "99999999999999999999", "'2024-01-01 00:00:00+01'", "read_csv('x')", "\n",
]
PREFIXES = [
    "", "SELECT * FROM mystore WHERE ", "SELECT * FROM per_min WHERE ", "SELECT * FROM last_order WHERE key = 'a' AND ",
    "SELECT k FROM mystore m JOIN revenue r ON ", "SELECT * FROM sessions WHERE user = 'u' AND ",
]


def test_random_token_soup_plans_or_raises_planning_errors() -> None:
    rnd = random.Random(20261122)
    logging.disable(logging.WARNING)  # sqlglot warns when it falls back to a Command
    planned = refused = 0
    try:
        for _ in range(600):
            sql = rnd.choice(PREFIXES) + " ".join(rnd.choice(TOKENS) for _ in range(rnd.randrange(1, 12)))
            params = [rnd.choice([1, "a", None, 2.5])] * sql.count("?") or None
            try:
                planner.plan(sql, CATALOG, params=params)
                planned += 1
            except planner.PlanningError as err:
                assert err.message and err.code
                refused += 1
    finally:
        logging.disable(logging.NOTSET)
    assert planned > 10 and refused > 10  # the soup exercised both outcomes
