"""Processes of a replica set on 127.0.0.1 for the failover tests: the pipeline host and replicas as real
``iqgate`` commands, over a real Kafka broker (Tansu); a tiny HTTP client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SHOP = ROOT / "examples" / "shop_pipeline.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict[str, Any], timeout_s: float = 30.0) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url + "/v1/sql", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def get(url: str, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url + path, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class Proc:
    """One ``iqgate`` command in its own process group, its output in a file; killed for sure at the end."""

    def __init__(self, args: list[str], log_path: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._out = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, stdout=self._out,
                                  stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill9(self) -> None:
        os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait(30)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(10)
        self._out.close()

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_healthy(self, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(f"{what} exited ({self.p.returncode}):\n{self.tail()}")
            try:
                status, _ = get(self.url, "/v1/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"{what} not healthy within {timeout_s:.0f} s:\n{self.tail()}")


def pipeline(tmp: Path, servers: str, port: int, peers: list[int]) -> Proc:
    return Proc(["serve", str(SHOP), "--bootstrap-servers", servers, "--data-dir", str(tmp / "pipeline"),
                 "--port", str(port), "--peers", ",".join(f"http://127.0.0.1:{p}" for p in peers),
                 "--heartbeat-ms", "200"], tmp / f"pipeline-{port}.log", port)


def replica(tmp: Path, servers: str, port: int, peers: list[int]) -> Proc:
    return Proc(["replica", "--bootstrap-servers", servers, "--application-id", "shop",
                 "--state-dir", str(tmp / f"replica-{port}"), "--port", str(port),
                 "--peers", ",".join(f"http://127.0.0.1:{p}" for p in peers), "--heartbeat-ms", "200"],
                tmp / f"replica-{port}.log", port)
