"""The README is tested (issue 45 item 3), as datasette and sqlglot test their docs.

Every fenced ``bash``, ``python`` and ``sql`` block of README.md is run against a live demo (``iqgate demo``,
started here as the README says, in a scratch directory, on a free port): bash blocks in a shell, python blocks
in a fresh interpreter, sql blocks through ``iqgate sql``; each must end well and print no traceback. A block
whose info string says ``kafka`` runs against the test run's Kafka broker (``broker:9092`` is it). A block that
starts a server of its own, needs a cluster or other machines, or takes an hour, says ``syntax-only`` in its
info string and is only parsed (``bash -n``, ``compile``, the planner's parser). When the README drifts from
the code, this fails.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LANGUAGES = ("bash", "python", "sql")


def _blocks() -> list[tuple[int, str, frozenset[str], str]]:
    """(line, language, flags, text) of every fenced block in a language we run."""
    out = []
    lines = README.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        lang, flags = m.group(1), frozenset(m.group(2).split())
        if lang in LANGUAGES:
            out.append((start + 1, lang, flags, "\n".join(lines[i + 1:j])))
        i = j + 1
    return out


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if "syntax-only" not in b[2]]


def test_the_readme_has_blocks_of_every_kind_to_run() -> None:
    assert {lang for _, lang, _, _ in RUN} == set(LANGUAGES)
    assert all(flags <= {"syntax-only", "kafka"} for _, _, flags, _ in BLOCKS), [b[:3] for b in BLOCKS]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line-{b[0]}-{b[1]}" for b in BLOCKS])
def test_every_block_parses(block: tuple[int, str, frozenset[str], str]) -> None:
    line, lang, _, text = block
    if lang == "bash":
        out = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"README line {line}: {out.stderr}"
    elif lang == "python":
        compile(text, f"README.md:{line}", "exec")
    else:
        from planner.dialect import parse_statement

        for statement in _statements(text):
            parse_statement(statement)


def _statements(text: str) -> list[str]:
    return [s.strip() for s in text.split(";") if s.strip() and not s.strip().startswith("--")]


class Demo:
    def __init__(self, cwd: Path, port: int, env: dict[str, str]) -> None:
        self.cwd, self.port, self.env = cwd, port, env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """``iqgate demo`` as the README's first command runs it, in a scratch directory, on a free port."""
    cwd = tmp_path_factory.mktemp("readme")
    port = _free_port()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])}
    err = open(cwd / "demo.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "demo", "--port", str(port)], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 600
        while "Press Ctrl-C to stop." not in (cwd / "demo.err").read_text():
            assert proc.poll() is None, (cwd / "demo.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the demo did not come up"
            time.sleep(0.5)
        yield Demo(cwd, port, env)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        err.close()


def _localized(text: str, demo: Demo, broker: str | None) -> str:
    """The block as it runs here: the demo's port for 8080, the test broker for broker:9092."""
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{demo.port}")
    text = text.replace("iqgate sql ", f"iqgate sql --url http://127.0.0.1:{demo.port} ")  # its default is 8080
    if broker is not None:
        text = text.replace("broker:9092", broker)
    return text


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[f"line-{b[0]}-{b[1]}" for b in RUN])
def test_every_block_runs_against_the_demo(block: tuple[int, str, frozenset[str], str], demo: Demo,
                                           request: pytest.FixtureRequest) -> None:
    line, lang, flags, text = block
    broker = request.getfixturevalue("kafka_broker").bootstrap_servers if "kafka" in flags else None
    text = _localized(text, demo, broker)
    if lang == "bash":
        out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=demo.cwd, env=demo.env,
                             capture_output=True, text=True, timeout=300)
    elif lang == "python":
        out = subprocess.run([sys.executable, "-c", text], cwd=demo.cwd, env=demo.env, capture_output=True,
                             text=True, timeout=300)
    else:
        out = _run_sql(text, demo)
    assert out.returncode == 0, f"README line {line} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stdout + out.stderr, f"README line {line}:\n{out.stderr[-3000:]}"


def _run_sql(text: str, demo: Demo) -> Any:
    last: Any = None
    for statement in _statements(text):
        last = subprocess.run([sys.executable, "-m", "gateway.cli", "sql", statement, "--url",
                               f"http://127.0.0.1:{demo.port}"], cwd=demo.cwd, env=demo.env, capture_output=True,
                              text=True, timeout=120)
        if last.returncode != 0:
            return last
    return last
