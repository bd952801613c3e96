"""The layer rules of DESIGN §2, checked two ways so a break cannot slip through.

1. An AST walk of every module (fast, no configuration): gateway → planner →
   stores only; pyspark only in ``stores/spark_*``; stores never imports SQL
   engines or HTTP; the planner never imports engines.
2. import-linter's contracts from pyproject.toml (also catches indirect paths).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "planner", "stores")

# package -> top-level modules it must never import
FORBIDDEN = {
    "stores": {"planner", "gateway", "sqlglot", "duckdb", "flask", "waitress", "sqlalchemy"},
    "planner": {"gateway", "duckdb", "flask", "waitress", "pyspark", "sqlalchemy", "pyarrow"},
    "gateway": {"pyspark"},
}


# The embedded default hosts Spark in the gateway's process (DESIGN §1): this one
# import is allowed, and only inside a function, so importing the module stays Spark-free.
LAZY_SPARK_IMPORTS = {("gateway/hosting.py", "stores.spark_session")}


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) for every absolute import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top = {id(n) for n in tree.body}
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, id(node) in top))
    return found


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_every_package_has_modules() -> None:
    for pkg in PACKAGES:
        assert (ROOT / pkg / "__init__.py").exists(), f"{pkg}/__init__.py is missing"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_layers(path: Path) -> None:
    rel = path.relative_to(ROOT)
    pkg = rel.parts[0]
    is_spark_module = pkg == "stores" and rel.name.startswith("spark")
    broken = []
    for lineno, name, module_level in _imports(path):
        top = name.split(".")[0]
        if top in FORBIDDEN[pkg]:
            broken.append(f"{rel}:{lineno} imports {name}")
        if top == "pyspark" and not is_spark_module:
            broken.append(f"{rel}:{lineno} imports pyspark outside stores/spark_*")
        lazy_allowed = (str(rel), name) in LAZY_SPARK_IMPORTS and not module_level
        if not is_spark_module and name.startswith("stores.spark") and not lazy_allowed:
            broken.append(f"{rel}:{lineno} imports the Spark pipeline ({name}) on the serving path")
    assert not broken, "layer rules broken:\n" + "\n".join(broken)


def test_serving_path_imports_without_pyspark() -> None:
    """Importing the gateway (and everything it pulls in) must not load pyspark."""
    code = (
        "import sys, gateway, planner, stores\n"
        "import gateway.engine, gateway.http, gateway.dbapi, gateway.cli, stores.app, stores.reader\n"
        "bad = [m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')]\n"
        "assert not bad, bad[:5]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_import_linter_contracts() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("import-linter is not installed (it is in the dev extra)")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
