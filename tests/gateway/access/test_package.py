"""gateway.access stands alone: it imports nothing else of the gateway (its error is the wire's), and no web framework.

Every face will import it, so anything it imported would be dragged into
every face (and a face importing it back would make a circle).
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from gateway.access import LIMIT_NAMES, Limits
from gateway.engine.config import GatewayConfig

PACKAGE = Path(__file__).resolve().parents[3] / "gateway" / "access"
ALLOWED_GATEWAY: set[str] = set()  # TooManyStatements comes from iqgate_client.errors, the wire contract
FORBIDDEN_TOP = {"flask", "waitress", "werkzeug", "duckdb", "pyspark", "pyarrow", "sqlalchemy"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside gateway.access unless it climbs out
                if node.level > 1:
                    out.append("gateway." + (node.module or ""))
            else:
                out.append(node.module or "")
    return out


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_imports_stay_inside(module: str) -> None:
    for name in _imports(PACKAGE / module):
        top = name.split(".")[0]
        assert top not in FORBIDDEN_TOP, f"gateway/access/{module} imports {name}"
        if top == "gateway":
            assert name in ALLOWED_GATEWAY or name.startswith("gateway.access"), f"gateway/access/{module} imports {name}"


def test_limits_name_the_config_they_tighten() -> None:
    cfg = GatewayConfig()
    ceilings = set(LIMIT_NAMES) - {"concurrent_statements"}  # that one is Admission's, not a config value
    assert ceilings <= {f.name for f in fields(GatewayConfig)}
    tightened = Limits(max_rows=10, statement_timeout_ms=10**9).tighten(
        {n: getattr(cfg, n) for n in LIMIT_NAMES if hasattr(cfg, n)})
    out = GatewayConfig.of(cfg, **tightened)
    assert out.max_rows == 10 and out.statement_timeout_ms == cfg.statement_timeout_ms
    assert out.max_memory_bytes == cfg.max_memory_bytes
