"""Live answers from a real server's serving processes (they follow the state dir the supervisor's app writes,
and its changelog, from where ``app.json`` says it is), through a restart of the whole server: the subscriber
resumes ``AS OF POSITION`` its last progress with exactly the changes after it; ``iqgate sql`` prints the changes
as they come."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.gateway.live.livefixtures import Held, Ndjson, batch_at, http_pull

ROOT = Path(__file__).resolve().parents[3]
SQL = "SUBSCRIBE (SELECT k, total, n FROM kv WHERE n > 2)"
PULL = "SELECT k, total, n FROM kv WHERE n > 2"
TOPIC = "shop-kv-changelog"


class Server:
    def __init__(self, root: Path, workers: int) -> None:
        self.err = open(root / f"server-{time.monotonic_ns()}.err", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.live.live_server", str(root),
                                      str(workers)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("READY "), (line, Path(self.err.name).read_text()[-3000:])
        self.url = line.split()[1]

    def do(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            assert line, "the server ended"
            if line.startswith(f"DONE {command}"):
                return line.strip()
        raise AssertionError(f"{command} did not finish")

    def stop(self) -> None:
        try:
            self.do("stop")
            self.proc.wait(30)
        except (AssertionError, subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            self.proc.wait(10)
        finally:
            self.err.close()


def _read_to(sub: Ndjson, held: Held, batch: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, f"no progress at batch {batch}"
        msg = sub.next()
        assert "error" not in msg, msg
        held.apply(msg["op"], msg["position"], msg.get("row"))
        if msg["op"] == "progress" and batch_at(msg["position"], TOPIC) >= batch:
            return


def test_a_subscriber_resumes_exactly_across_a_restart_of_the_server(tmp_path: Path) -> None:
    server = Server(tmp_path, 1)
    try:
        sub = Ndjson(server.url, SQL)
        assert sub.status == 200, sub.resp.read()
        held = sub.held()
        last = int(server.do("batch").split()[-1])
        last = int(server.do("batch").split()[-1])
        _read_to(sub, held, last)
        assert held.answer() == http_pull(server.url, PULL)
        token = held.position
        # the CLI prints the changes as they come (it reads the same NDJSON; Ctrl-C ends it: here, a timeout)
        lines = [json.loads(x) for x in _cli(server.url).splitlines()]
        assert lines[0]["columns"][0]["name"] == "k" and any(m.get("op") == "progress" for m in lines[1:])
        server.do("batch")
    finally:
        server.stop()
    end = sub.resp.read().decode().strip().splitlines()  # the stream ends saying so, with where to resume
    sub.close()
    if end:
        last_line = json.loads(end[-1])
        assert last_line["error"]["code"] == "SUBSCRIPTION_CLOSED", last_line
    server = Server(tmp_path, 1)  # the whole server again, on the same files and log
    try:
        for _ in range(3):
            last = int(server.do("batch").split()[-1])
        again = Ndjson(server.url, SQL + " WITH (SNAPSHOT = false) AS OF POSITION '" + json.dumps(token) + "'")
        assert again.status == 200, again.resp.read()
        _read_to(again, held, last)
        assert held.answer() == http_pull(server.url, PULL)  # nothing skipped, nothing twice
        health = json.loads(_get(server.url, "/v1/health"))
        assert health["subscriptions"]["open"] == 1
        again.close()
    finally:
        server.stop()


def _cli(url: str) -> str:
    """``iqgate sql`` on a subscription until it printed a progress line, then interrupted as Ctrl-C would."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "sql", "--url", url, "--format", "json",
                             "SUBSCRIBE (SELECT k, n FROM kv WHERE k = 'c05')"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # printed as they come: each line is flushed
            assert line, proc.stderr.read() if proc.stderr else "the command ended"
            lines.append(line)
            if '"progress"' in line:
                break
        proc.send_signal(2)  # SIGINT
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return "".join(lines) + rest


def _get(url: str, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url + path, timeout=10) as resp:
        return resp.read().decode()
