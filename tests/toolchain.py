"""What the BI tests need beyond the Python venv, installed by the project itself (never a quiet skip).

- Debian packages: ``chromium`` (the query page's browser test, driven by
  Playwright) and ``postgresql-client`` (``psql`` against the PG port). When a
  binary is missing and we are root with ``apt-get``, it runs ``apt-get update``
  once and ``apt-get install -y --no-install-recommends <package>``; otherwise
  the test fails with the exact command to run.
- Apache Superset 6.1 in a venv of its own (it pins ``sqlglot<29``, iqgate's
  server needs 30): built once under ``$IQGATE_TOOL_CACHE`` (default
  ``~/.cache/iqgate``) and reused by later runs; building it downloads ~880 MB
  and takes 3-6 minutes on 2 cores, a cached run costs nothing.

Run by hand to prepare a machine: ``python -m tests.toolchain [superset] [chromium] [psql]``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["ToolchainError", "ensure_binary", "ensure_superset", "ensure_client_venv", "ensure_venv", "SUPERSET_PINS",
           "CLIENT_VENV_PINS", "cache_dir"]

ROOT = Path(__file__).resolve().parents[1]
# Superset 6.1.0 needs these beside its own pins (measured; see shared/reference/bi-notes.md):
# cachetools and rich are imported but not declared; flask-caching 2.4+ passes an argument its cache refuses;
# psycopg2 is the driver of its postgresql:// URLs (the PG-port test).
SUPERSET_PINS = ("apache-superset==6.1.0", "cachetools", "rich", "flask-caching<2.4", "psycopg2-binary")
# What a host of the client alone has: the client's own dependencies come with `pip install ./clients/python`.
CLIENT_VENV_PINS = ("pandas>=2.1,<3", "sqlalchemy>=2,<3")
_apt_lock = threading.Lock()
_apt_updated = False


class ToolchainError(RuntimeError):
    """A tool the tests need is missing and could not be installed; the message says how to install it."""


def cache_dir() -> Path:
    return Path(os.environ.get("IQGATE_TOOL_CACHE") or Path.home() / ".cache" / "iqgate")


def _run(cmd: list[str], what: str, timeout_s: float, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{what}: `{' '.join(cmd)}` did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stdout[-1500:] + proc.stderr[-2500:]).strip()
        raise ToolchainError(f"{what}: `{' '.join(cmd)}` exited {proc.returncode}:\n{tail}")


def ensure_binary(binary: str, package: str) -> str:
    """The path of ``binary``, installing Debian's ``package`` with apt-get when it is missing (root only)."""
    global _apt_updated
    found = shutil.which(binary)
    if found:
        return found
    how = f"apt-get update && apt-get install -y --no-install-recommends {package}"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ToolchainError(f"{binary!r} is needed by the tests and is not installed; as root run: {how}")
    with _apt_lock:
        if shutil.which(binary) is None:
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            print(f"[toolchain] installing Debian package {package} (for {binary}) ...", file=sys.stderr, flush=True)
            if not _apt_updated:
                _run(["apt-get", "update", "-q"], f"installing {package}", 600, env)
                _apt_updated = True
            _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", package], f"installing {package}",
                 1200, env)
    found = shutil.which(binary)
    if not found:
        raise ToolchainError(f"apt-get installed {package} but {binary!r} is still not on PATH; run: {how}")
    return found


def _python311() -> str:
    exe = shutil.which("python3.11")
    if exe is None:
        raise ToolchainError("python3.11 is needed to build the Superset venv (Superset 6.1 supports 3.10-3.12)")
    return exe


def ensure_venv(name: str, packages: tuple[str, ...], what: str) -> Path:
    """A venv with ``packages`` under the tool cache, built once (keyed by the package list) and reused.

    It is built in a temporary directory and renamed into place when
    complete, so an interrupted build is never mistaken for a finished one.
    """
    key = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:10]
    venv = cache_dir() / f"{name}-{key}"
    done = venv / ".complete"
    if done.exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    building = venv.with_name(venv.name + f".building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    print(f"[toolchain] building {what} at {venv} (one time) ...", file=sys.stderr, flush=True)
    _run([_python311(), "-m", "venv", str(building)], f"creating {what}", 300)
    pip = [str(building / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + ["--upgrade", "pip", "setuptools", "wheel"], f"upgrading pip in {what}", 600)
    _run(pip + list(packages), f"installing {what}", 2400)
    if venv.exists():
        shutil.rmtree(venv)
    building.rename(venv)
    _run([_python311(), "-m", "venv", "--upgrade", str(venv)], f"relocating {what}", 300)
    _fix_shebangs(venv, building)
    done.write_text("\n".join(packages) + "\n")
    return venv


def ensure_superset() -> Path:
    """A venv with Apache Superset 6.1 and what it needs (~880 MB, several minutes the first time)."""
    return ensure_venv("superset-venv", SUPERSET_PINS, "the Superset venv")


def ensure_client_venv() -> Path:
    """A venv for the client alone: what a notebook or BI host has (SQLAlchemy, pandas), none of the server."""
    return ensure_venv("client-venv", CLIENT_VENV_PINS, "the client-only venv")


def _fix_shebangs(venv: Path, old: Path) -> None:
    """Console scripts name the interpreter by absolute path; point them at the renamed venv."""
    for script in (venv / "bin").iterdir():
        if not script.is_file() or script.is_symlink():
            continue
        try:
            text = script.read_bytes()
        except OSError:
            continue
        if text.startswith(b"#!") and str(old).encode() in text[:400]:
            script.write_bytes(text.replace(str(old).encode(), str(venv).encode(), 1))


def main(argv: list[str]) -> int:
    wanted = argv or ["superset", "chromium", "psql"]
    for name in wanted:
        if name == "superset":
            print(ensure_superset())
        elif name == "chromium":
            print(ensure_binary("chromium", "chromium"))
        elif name == "psql":
            print(ensure_binary("psql", "postgresql-client"))
        else:
            print(f"unknown tool {name!r}; known: superset, chromium, psql", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
