"""The layer rules of docs/DESIGN.md §2, checked two ways so a break cannot slip through.

1. An AST walk of every module (fast, no configuration): gateway → planner →
   stores only; pyspark only in ``stores/pipeline/``; stores never imports SQL
   engines or HTTP; the planner never imports engines; no two modules import
   each other, directly or in a longer circle (function-level and
   TYPE_CHECKING imports count: a circle is a circle).
2. import-linter's contracts from pyproject.toml (also catches indirect paths).
"""

from __future__ import annotations

import ast
import os
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


# The embedded default hosts Spark in the gateway's process (docs/DESIGN.md §1): this one
# import is allowed, and only inside a function, so importing the module stays Spark-free.
LAZY_SPARK_IMPORTS = {("gateway/serving/hosting.py", "stores.pipeline.session")}


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
    is_spark_module = rel.parts[:2] == ("stores", "pipeline")
    broken = []
    for lineno, name, module_level in _imports(path):
        top = name.split(".")[0]
        if top in FORBIDDEN[pkg]:
            broken.append(f"{rel}:{lineno} imports {name}")
        if top == "pyspark" and not is_spark_module:
            broken.append(f"{rel}:{lineno} imports pyspark outside stores/pipeline/")
        lazy_allowed = (str(rel), name) in LAZY_SPARK_IMPORTS and not module_level
        if not is_spark_module and name.startswith("stores.pipeline") and not lazy_allowed:
            broken.append(f"{rel}:{lineno} imports the Spark pipeline ({name}) on the serving path")
    assert not broken, "layer rules broken:\n" + "\n".join(broken)


def test_serving_path_imports_without_pyspark() -> None:
    """Importing the gateway (and everything it pulls in) must not load pyspark."""
    code = (
        "import sys, gateway, planner, stores\n"
        "import gateway.engine, gateway.http, gateway.dbapi, gateway.cli, stores.app.streams, stores.app.reader\n"
        "bad = [m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')]\n"
        "assert not bad, bad[:5]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


CLIENT = ROOT / "clients" / "python" / "iqgate_client"
# The client distribution must install beside BI hosts' pins: nothing of the server, none of its engines.
CLIENT_FORBIDDEN = {"gateway", "planner", "stores", "sqlglot", "duckdb", "pyspark", "flask", "waitress", "pyarrow"}
# connect(gateway=gw) runs on a server Gateway the caller already holds: the one server import, inside a function.
CLIENT_LAZY_SERVER_IMPORTS = {("dbapi/__init__.py", "gateway.dbapi.inprocess")}


@pytest.mark.parametrize("path", sorted(CLIENT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_client_imports_nothing_of_the_server(path: Path) -> None:
    rel = str(path.relative_to(CLIENT))
    broken = [f"{rel}:{lineno} imports {name}" for lineno, name, module_level in _imports(path)
              if name.split(".")[0] in CLIENT_FORBIDDEN
              and not ((rel, name) in CLIENT_LAZY_SERVER_IMPORTS and not module_level)]
    if rel != "superset.py":  # the engine spec runs inside Superset; nothing else may need it
        broken += [f"{rel}:{lineno} imports {name}" for lineno, name, _ in _imports(path)
                   if name.split(".")[0] == "superset"]
    assert not broken, "the client imports the server:\n" + "\n".join(broken)


def test_import_linter_contracts() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("import-linter is not installed (it is in the dev extra)")
    # the client's source, not a copy pip installed from it (a non-editable install can be stale)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"), str(ROOT)])}
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> our modules it imports (relative imports resolved; ``from pkg import mod`` names the module)."""
    names = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            deps.update(t for t in targets if t in names and t != name)
        graph[name] = deps
    return graph


def test_no_import_circles() -> None:
    """Tarjan's strongly connected components over our import graph: every component must be one module."""
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in circles)
