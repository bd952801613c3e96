"""A real Apache Superset 6.1 for the tests: its own venv, SQLite metadata, a free 127.0.0.1 port, its REST API.

The venv comes from ``tests.toolchain.ensure_superset`` (built once, cached).
``iqgate-client[superset]`` is installed into it from this checkout the way a
user would (``pip install``, no ``--no-deps``), so a client that cannot sit
beside Superset's pins fails here. ``superset db upgrade`` and ``superset
init`` take a minute or two on 2 cores; their SQLite result is cached beside
the venv and copied for each run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.toolchain import ROOT, ToolchainError, ensure_superset

__all__ = ["Superset", "free_port"]

ADMIN = ("admin", "admin-password")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], env: dict[str, str], what: str, timeout_s: float) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ToolchainError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


class Superset:
    """One Superset server; ``api(method, path, body)`` calls its REST API as the admin user."""

    def __init__(self, workdir: Path) -> None:
        self.venv = ensure_superset()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token: str | None = None
        self.log = workdir / "superset.log"

    # -- setting up ------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        config = self.workdir / "superset_config.py"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(SUPERSET_CONFIG_PATH=str(config), FLASK_APP="superset", SUPERSET_HOME=str(self.workdir),
                   PATH=f"{self.venv / 'bin'}:{env.get('PATH', '')}")
        return env

    def install_client(self) -> None:
        """Install ``iqgate-client[superset]`` from this checkout into Superset's venv (replacing an older copy)."""
        pip = [str(self.venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run(pip + ["uninstall", "-y", "iqgate-client"], capture_output=True, timeout=120)
        _run(pip + ["install", f"{ROOT / 'clients' / 'python'}[superset]"], self._env(),
             "installing iqgate-client[superset] into Superset's venv", 600)
        # pip resolved the client's dependencies against Superset's own pins; check they still hold
        _run(pip + ["check"], self._env(), "pip check in Superset's venv after installing the client", 120)

    def _metadata(self, db: Path) -> None:
        cached = self.venv.parent / (self.venv.name + "-metadata.db")
        if not cached.exists():
            env = self._env()
            superset = str(self.venv / "bin" / "superset")
            _run([superset, "db", "upgrade"], env, "superset db upgrade", 900)
            _run([superset, "fab", "create-admin", "--username", ADMIN[0], "--firstname", "Ada", "--lastname",
                  "Admin", "--email", "admin@example.invalid", "--password", ADMIN[1]], env, "create-admin", 300)
            _run([superset, "init"], env, "superset init", 900)
            shutil.copyfile(db, cached.with_suffix(".tmp"))
            os.replace(cached.with_suffix(".tmp"), cached)
        else:
            shutil.copyfile(cached, db)

    def start(self, timeout_s: float = 300) -> Superset:
        self.workdir.mkdir(parents=True, exist_ok=True)
        db = self.workdir / "superset.db"
        (self.workdir / "superset_config.py").write_text(
            f"SECRET_KEY = {secrets.token_hex(24)!r}\n"
            f"SQLALCHEMY_DATABASE_URI = 'sqlite:///{db}'\n"
            "WTF_CSRF_ENABLED = False\n"
            "TALISMAN_ENABLED = False\n"
            "SQLLAB_CTAS_NO_LIMIT = True\n"
            "CACHE_CONFIG = {'CACHE_TYPE': 'NullCache'}\n"
            "DATA_CACHE_CONFIG = {'CACHE_TYPE': 'NullCache'}\n"
            "FEATURE_FLAGS = {'ENABLE_TEMPLATE_PROCESSING': False}\n")
        self.install_client()
        self._metadata(db)
        out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "superset"), "run", "-h", "127.0.0.1", "-p", str(self.port), "--with-threads"],
            env=self._env(), stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ToolchainError(f"Superset exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            raise ToolchainError(f"Superset did not answer /health within {timeout_s:.0f} s:\n"
                                 f"{self.log.read_text()[-3000:]}")
        status, body = self.api("POST", "/api/v1/security/login",
                                {"username": ADMIN[0], "password": ADMIN[1], "provider": "db", "refresh": True},
                                auth=False)
        assert status == 200, body
        self.token = body["access_token"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc = None

    # -- the REST API -------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, *, auth: bool = True,
            timeout_s: float = 120) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")
