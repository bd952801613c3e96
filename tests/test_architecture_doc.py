"""The documents say what the code is (issue 44): every path ARCHITECTURE.md names exists, every reference to a
section of docs/DESIGN.md is to a section it has, and no module of ours is longer than 600 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCH = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
MAX_LINES = 600
PACKAGES = ("gateway", "planner", "stores", "clients/python/iqgate_client")


def _backticked_paths() -> set[str]:
    """Paths in backticks or links: text with a slash or a file suffix, our folders only."""
    found = set(re.findall(r"`([A-Za-z0-9_./-]+)`", ARCH)) | set(re.findall(r"\]\(([A-Za-z0-9_./-]+)\)", ARCH))
    roots = ("stores/", "planner/", "gateway/", "tests/", "docs/", "clients/", "examples/", "benchmarks/")
    return {p for p in found if p.startswith(roots) or (p.endswith((".md", ".toml")) and "/" not in p)}


def _tree_paths() -> set[str]:
    """The folder tree under "The folders": each entry's path from its indentation (two spaces a level)."""
    block = ARCH.split("## The folders", 1)[1].split("```", 2)[1]
    out: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        name = line.split()[0]
        if not (name.endswith("/") or name.endswith(".py")):
            continue  # a continuation of the previous entry's description
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        for part in line.strip().split("   ")[0].split():  # "http/ pg/ dbapi/ flight/" names several
            if part.endswith("/") or part.endswith(".py"):
                out.add(parent + part)
        if name.endswith("/"):
            stack.append((indent, parent + name))
    return out


@pytest.mark.parametrize("path", sorted(_backticked_paths() | _tree_paths()))
def test_every_path_architecture_names_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"ARCHITECTURE.md names {path}, which does not exist"


def test_the_tree_was_read() -> None:
    tree = _tree_paths()
    assert {"stores/engine/", "gateway/engine/", "gateway/serving/", "gateway/flight/", "planner/"} <= tree


def _design_sections() -> set[str]:
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    return set(re.findall(r"^## (\d+)\.", text, re.M))


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_every_design_reference_resolves() -> None:
    sections = _design_sections()
    bad = []
    for path in _sources() + sorted((ROOT / "tests").rglob("*.py")):
        for n in re.findall(r"docs/DESIGN\.md §(\d+)", path.read_text(encoding="utf-8")):
            if n not in sections:
                bad.append(f"{path.relative_to(ROOT)}: §{n}")
        text = path.read_text(encoding="utf-8").replace("docs/DESIGN.md §", "")
        assert re.search(r"(?<![/\w])DESIGN §", text) is None or path.name == "test_architecture_doc.py", \
            f"{path.relative_to(ROOT)} cites a design section outside the repository"
    assert not bad, bad


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_longer_than_600_lines(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines: split it by what its parts do"
