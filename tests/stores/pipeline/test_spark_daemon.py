"""``spark_daemon.worker`` against a real socket whose other end plays the JVM: quiet on a hang-up, loud otherwise.

Each case runs PySpark's worker in a child process (it resets signal
handlers), connected over TCP to this test, which authenticates as the JVM
does (a length-prefixed secret) and then either resets the connection with
the worker's answer unread — the JVM hanging up first — or sends a secret
that is not UTF-8, an error that is not a hang-up.
"""

from __future__ import annotations

import select
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_CHILD = textwrap.dedent("""
    import os, socket, sys
    os.environ["PYTHON_WORKER_FACTORY_SECRET"] = "s3cret"
    os.environ["PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"] = "1"  # what Spark 4's JVM sets by default
    from pyspark import daemon
    from stores.pipeline import spark_daemon
    run = spark_daemon.worker if sys.argv[2] == "ours" else daemon.worker
    sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    try:
        code = run(sock, False)
    except BaseException as exc:
        print("raised", type(exc).__name__, flush=True)
        raise SystemExit(3)
    print("returned", code, flush=True)
""")


def _worker_against(jvm: str, which: str) -> tuple[str, str]:
    """(stdout, stderr) of a child running ``which`` worker ("ours" or "pyspark") against a JVM that ``jvm``s."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(listener.getsockname()[1]), which], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            listener.settimeout(60)
            conn, _ = listener.accept()
            with conn:
                secret = b"s3cret" if jvm == "hangs up" else b"\xff\xfe"
                conn.sendall(struct.pack(">i", len(secret)) + secret)
                if jvm == "hangs up":
                    assert select.select([conn], [], [], 30)[0], "the worker never answered the secret"
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, unread
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            child.wait()
    return out.strip(), err


def test_a_worker_the_jvm_hung_up_on_ends_quietly() -> None:
    out, err = _worker_against("hangs up", "ours")
    assert out == "returned 1", (out, err)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_pysparks_own_worker_raises_there() -> None:
    """The same hang-up through PySpark's own ``daemon.worker``: the error its daemon prints a traceback for."""
    out, _ = _worker_against("hangs up", "pyspark")
    assert out in ("raised BrokenPipeError", "raised ConnectionResetError"), out


@pytest.mark.parametrize("which", ["ours", "pyspark"])
def test_any_other_worker_error_is_pysparks_as_before(which: str) -> None:
    out, _ = _worker_against("sends a secret that is not UTF-8", which)
    assert out == "raised UnicodeDecodeError", out
