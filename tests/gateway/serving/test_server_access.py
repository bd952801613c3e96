"""A real server (supervisor + serving processes) with a users file, an audit log and HTTPS, watched from outside;
and the state directory's writer lock between real processes.

- every serving process enforces the users file, writes its own audit file, and re-reads the users file when it
  changes (by itself) or on SIGHUP to the supervisor (a bad file: one line, the last good version stays);
- no token is ever on a command line of the server's processes, in its output or in its audit log;
- one writer per state directory: a second ``serve`` of it, an ``upgrade`` and a ``replica`` are refused at once
  with one line naming the holder; read-only ``serve --state-dir`` runs beside it; a dead holder's lock is taken over.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.gateway.access.team import Team, make_team, users
from tests.gateway.http.test_https import make_cert

ROOT = Path(__file__).resolve().parents[3]


class Server:
    """hosted_server.py in a process of its own: its URL, its stderr file, a way to stop it."""

    def __init__(self, state_dir: Path, workers: int, err: Path, options: dict[str, Any] | None = None) -> None:
        self.err_path = err
        self._err = open(err, "w")  # noqa: SIM115 - closed by stop(); serving processes write on
        args = [sys.executable, "-m", "tests.gateway.serving.hosted_server", str(state_dir), str(workers)]
        if options:
            args.append(json.dumps(options))
        self.proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line.split()[1] if line.startswith("READY ") else None

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._err.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _until(cond: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(100_000):  # bounded; the clock ends it
        if cond():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout_s} s")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Team, Path, urllib3.PoolManager]]:
    d = tmp_path_factory.mktemp("secured")
    team = make_team(d)
    cert, key = make_cert(str(d))
    audit = d / "audit.log"
    server = Server(d / "state", 2, d / "server.err", {"users_file": str(team.path), "audit_log": str(audit),
                                                       "tls_cert": cert, "tls_key": key})
    pool = urllib3.PoolManager(ca_certs=cert, timeout=urllib3.Timeout(connect=5, read=30))
    try:
        assert server.url is not None and server.url.startswith("https://"), server.stderr()[-3000:]
        yield server, team, audit, pool
    finally:
        server.stop()
        pool.clear()


def _sql(pool: urllib3.PoolManager, url: str, token: str, sql: str) -> tuple[int, Any]:
    r = pool.request("POST", url + "/v1/sql", body=json.dumps({"sql": sql}),
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    return r.status, json.loads(r.data)


def _each_process(server: Server, token: str, ca: str) -> dict[int, http.client.HTTPSConnection]:
    """One keep-alive HTTPS connection to each serving process (keyed by its pid, as its health names it)."""
    ctx = ssl.create_default_context(cafile=ca)
    host, port = server.url.removeprefix("https://").split(":")  # type: ignore[union-attr]
    out: dict[int, http.client.HTTPSConnection] = {}
    extra = []
    deadline = time.monotonic() + 60
    while len(out) < 2 and time.monotonic() < deadline:
        c = http.client.HTTPSConnection(host, int(port), timeout=30, context=ctx)
        c.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
        pid = json.loads(c.getresponse().read())["process"]["pid"]
        if pid not in out:
            out[pid] = c
        else:
            extra.append(c)  # kept open: the accept board sends the next one to the other process
    for c in extra:
        c.close()
    assert len(out) == 2, f"reached {len(out)} of 2 serving processes"
    return out


def test_every_serving_process_enforces_the_users_file_over_https(secured: Any) -> None:
    server, team, audit, pool = secured
    conns = _each_process(server, team.tokens["alice"], pool.connection_pool_kw["ca_certs"])
    try:
        for pid, c in conns.items():
            for who, status in (("alice", 404), ("bob", 200)):
                c.request("POST", "/v1/sql", json.dumps({"sql": "SELECT count(*) FROM last_order"}),
                          {"Content-Type": "application/json", "Authorization": f"Bearer {team.tokens[who]}"})
                r = c.getresponse()
                body = json.loads(r.read())
                assert r.status == status, (pid, who, body)
    finally:
        for c in conns.values():
            c.close()
    assert [r[0] for r in _sql(pool, server.url, team.tokens["alice"], "SHOW TABLES")[1]["rows"]] == [
        "accounts", "revenue"]
    _until(lambda: all(f"\"user\":\"{u}\"" in Path(f"{audit}.{i}").read_text() for i in (0, 1) for u in ("alice", "bob")),
           "both serving processes audit their own statements in their own file")


def test_no_token_in_the_process_list_the_output_or_the_audit(secured: Any) -> None:
    server, team, audit, pool = secured
    _sql(pool, server.url, team.tokens["alice"], f"SELECT '{team.tokens['bob']}' AS pasted")
    procs = [server.proc.pid, *_children(server.proc.pid)]
    assert len(procs) >= 3  # the supervisor and its two serving processes
    seen = " ".join(_cmdline(p) for p in procs) + server.stderr()
    seen += "".join(Path(f"{audit}.{i}").read_text() for i in (0, 1) if Path(f"{audit}.{i}").exists())
    assert not [name for name, token in team.tokens.items() if token in seen]
    assert "gateway.serving.child" in seen  # the command lines were read


def test_sighup_reloads_and_a_bad_file_is_one_line(secured: Any, tmp_path: Path) -> None:
    server, team, _, pool = secured
    good = team.path.read_text()
    try:
        assert "[roles.finance]" in good
        team.path.write_text(good.replace("[roles.finance]", "[roles.finance"))  # a hand edit with a typo
        os.kill(server.proc.pid, signal.SIGHUP)  # forwarded to both serving processes; the first says it
        _until(lambda: "users file not reloaded" in server.stderr(), "the bad file reported")
        time.sleep(0.5)
        bad = [ln for ln in server.stderr().splitlines() if "users file not reloaded" in ln]
        assert len(bad) == 1 and bad[0].startswith("iqgate: users file not reloaded"), bad
        assert server.proc.poll() is None
        assert _sql(pool, server.url, team.tokens["alice"], "SELECT count(*) FROM revenue")[0] == 200  # in force
        team.path.write_text(good)
        users(team.path, "revoke", "finance", "revenue")  # picked up by every process by itself
        _until(lambda: all(_sql(pool, server.url, team.tokens["alice"], "SELECT count(*) FROM revenue")[0] == 404
                           for _ in range(4)), "the revoke in force")
        os.kill(server.proc.pid, signal.SIGHUP)
        _until(lambda: "reloaded:" in server.stderr(), "the reload said")
    finally:
        team.path.write_text(good)


# -- one writer per state directory -------------------------------------------------------------------------------
def test_one_writer_per_state_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Server(state, 1, tmp_path / "first.err")
    try:
        assert first.url is not None, first.stderr()[-3000:]
        holder = f"pid {first.proc.pid}"
        from stores.log.eventlog import EventLog

        EventLog(tmp_path / "log").create_topic("orders", partitions=1)  # a log a replica could restore from
        second = Server(state, 1, tmp_path / "second.err")
        assert second.url is None and second.proc.wait(30) == 1
        second.stop()
        msg = second.stderr().strip()
        assert msg.count("\n") == 0 and "is in use by `iqgate serve`" in msg and holder in msg, msg
        refused = {
            "serve": ["serve", str(ROOT / "examples" / "shop_pipeline.py"), "--state-dir", str(state), "--data-dir",
                      str(tmp_path / "data"), "--port", "0"],
            "upgrade": ["upgrade", str(ROOT / "examples" / "shop_pipeline.py"), "--state-dir", str(state)],
            "replica": ["replica", "--log", str(tmp_path / "log"), "--application-id", "shop", "--state-dir",
                        str(state), "--port", "0"]}
        t0 = time.monotonic()
        running = {name: subprocess.Popen([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for name, args in refused.items()}  # at once, side by side (a busy machine starts Python slowly)
        for name, p in running.items():
            _, err = p.communicate(timeout=120)
            err = err.strip()
            assert p.returncode == 1 and "Traceback" not in err and err.count("\n") == 0, (name, err)
            assert "is in use by `iqgate serve`" in err and holder in err, (name, err)
        assert time.monotonic() - t0 < 60  # at once: no Spark, no broker was started
        readonly = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state), "--port",
                                     "0", "--workers", "1"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            assert readonly.stderr is not None
            line = ""
            for _ in range(50):
                line = readonly.stderr.readline()
                if "serving" in line or not line:
                    break
            assert "read-only" in line, line  # a reader beside the writer: no lock needed, none refused
        finally:
            readonly.terminate()
            readonly.wait(30)
        first.proc.kill()  # a holder that dies without a word (its serving processes follow it)
        first.proc.wait(30)
        again = Server(state, 1, tmp_path / "again.err")
        try:
            assert again.url is not None, again.stderr()[-2000:]  # the dead holder's lock is taken over
        finally:
            again.stop()
    finally:
        first.stop()
