"""Reading the SQL-in / EXPLAIN-out fixtures (tests/planner/fixtures/*.sql).

A case is ``# title:``, optional ``# params:`` / ``# session:`` (JSON) lines,
the SQL, a ``----`` line, then the expected EXPLAIN text, or ``error:
<ErrorClass>: <message>`` for a statement that must be refused. Cases are
separated by ``====`` lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import planner
from planner.plan import StatementKind

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class Case:
    file: str
    title: str
    sql: str
    expected: str
    params: Any = None
    session: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.title}"


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(FIXTURES.glob("*.sql")):
        for block in path.read_text(encoding="utf-8").split("\n====\n"):
            if not block.strip():
                continue
            head, _, expected = block.partition("\n----\n")
            meta: dict[str, Any] = {}
            sql_lines = []
            for line in head.strip("\n").splitlines():
                if line.startswith("# ") and ":" in line and not sql_lines:
                    key, _, value = line[2:].partition(":")
                    meta[key.strip()] = value.strip()
                else:
                    sql_lines.append(line)
            cases.append(Case(
                file=path.stem, title=meta.get("title", "?"), sql="\n".join(sql_lines), expected=expected.strip("\n"),
                params=json.loads(meta["params"]) if "params" in meta else None,
                session=json.loads(meta["session"]) if "session" in meta else {},
            ))
    return cases


def actual(case: Case, catalog: Any, plan_with: Any = None) -> str:
    """What the planner says for a case, in the fixture's expected format (``plan_with``: a Planner's ``plan``)."""
    try:
        plan = (plan_with or planner.plan)(case.sql, catalog, params=case.params, session=case.session)
    except planner.PlanningError as err:
        return f"error: {type(err).__name__}: {err}"
    if plan.kind is StatementKind.EXPLAIN:
        return plan.explain or ""
    return planner.explain_text(plan)
