"""One writer per state directory, with real processes: refused at once naming the holder, taken over from the dead."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stores.app.writer_lock import LOCK_NAME, StateDirLocked, WriterLock, WriterLockError, lock_holder

ROOT = Path(__file__).resolve().parents[3]

HOLDER = textwrap.dedent("""
    import sys
    from stores.app.writer_lock import WriterLock, StateDirLocked
    try:
        lock = WriterLock(sys.argv[1], sys.argv[2]).acquire()
    except StateDirLocked as exc:
        print(exc, file=sys.stderr, flush=True)
        sys.exit(3)
    print("locked", flush=True)
    sys.stdin.readline()  # hold until told (or killed)
    if sys.argv[3:] == ["release"]:
        lock.release()
        print("released", flush=True)
        sys.stdin.readline()
""")


class Holder:
    """A separate Python process that takes the lock and holds it until its stdin closes or it is killed."""

    def __init__(self, state_dir: Path, command: str = "serve", *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state_dir), command, *extra], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def wait_locked(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded: the process either locks, fails, or exits
        assert line == "locked\n", (line, self.proc.stderr.read() if self.proc.stderr else "")

    def say(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.fixture()
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[Holder] = []

    def start(*args: str) -> Holder:
        h = Holder(tmp_path / "state", *args)
        started.append(h)
        return h

    yield start
    for h in started:
        h.stop()


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    h = holder("serve")
    h.wait_locked()
    with pytest.raises(StateDirLocked) as err:
        WriterLock(tmp_path / "state", "upgrade").acquire()
    msg = str(err.value)
    assert f"pid {h.proc.pid} on {socket.gethostname()}" in msg and "`iqgate serve`" in msg
    assert str(tmp_path / "state") in msg and "stop that process first" in msg
    assert err.value.holder["pid"] == h.proc.pid and err.value.holder["command"] == "serve"
    assert lock_holder(tmp_path / "state")["pid"] == h.proc.pid  # type: ignore[index]


def test_a_dead_holders_lock_is_taken_over(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    h = holder("serve")
    h.wait_locked()
    dead = h.proc.pid
    h.kill()  # SIGKILL: no chance to clean up; the kernel drops the flock
    before = json.loads((tmp_path / "state" / LOCK_NAME).read_text())
    assert before["pid"] == dead  # the stale record is still in the file
    assert lock_holder(tmp_path / "state") is None
    with WriterLock(tmp_path / "state", "upgrade") as lock:
        assert lock.held
        record = json.loads((tmp_path / "state" / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["command"] == "upgrade" and record["started"]
    assert (tmp_path / "state" / LOCK_NAME).read_text() == "" and lock_holder(tmp_path / "state") is None


def test_the_other_way_round_a_process_is_refused_while_we_hold_it(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    with WriterLock(tmp_path / "state", "upgrade"):
        h = holder("serve")
        assert h.proc.wait(60) == 3
        err = h.proc.stderr.read()  # type: ignore[union-attr]
        assert f"`iqgate upgrade` (pid {os.getpid()} on {socket.gethostname()}, since" in err
        assert "Traceback" not in err
    h2 = holder("serve")
    h2.wait_locked()  # released: the next one gets it


def test_release_hands_it_on_while_the_holder_lives(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    h = holder("replica", "release")
    h.wait_locked()
    with pytest.raises(StateDirLocked, match="`iqgate replica`"):
        WriterLock(tmp_path / "state").acquire()
    assert h.say() == "released\n"
    with WriterLock(tmp_path / "state"):
        pass


def test_one_process_cannot_take_it_twice(tmp_path: Path) -> None:
    with WriterLock(tmp_path, "serve") as first:
        with pytest.raises(StateDirLocked, match=f"pid {os.getpid()}"):
            WriterLock(tmp_path, "serve").acquire()
        with pytest.raises(WriterLockError, match="already held by this WriterLock"):
            first.acquire()
    first.release()  # idempotent


def test_a_holder_that_has_not_written_yet_is_still_refused(tmp_path: Path) -> None:
    import fcntl

    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StateDirLocked, match="has not recorded who it is yet"):
            WriterLock(tmp_path).acquire()
        os.write(fd, b"{not json")
        with pytest.raises(StateDirLocked, match="has not recorded who it is yet"):
            WriterLock(tmp_path).acquire()
    finally:
        os.close(fd)


def test_the_state_dir_is_created_and_nothing_secret_is_recorded(tmp_path: Path) -> None:
    with WriterLock(tmp_path / "a" / "b"):
        record = json.loads((tmp_path / "a" / "b" / LOCK_NAME).read_text())
    assert set(record) == {"pid", "host", "command", "started"}  # no argv: a --token must not land in a file


def test_a_lock_file_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(WriterLockError, match="cannot create the lock file .*file/writer.lock"):
        WriterLock(tmp_path / "file").acquire()


def test_the_lock_is_not_inherited_by_programs_the_holder_starts(tmp_path: Path) -> None:
    with WriterLock(tmp_path, "serve"):
        child = subprocess.Popen(["sleep", "30"], close_fds=False)  # inheriting every inheritable descriptor
    try:
        with WriterLock(tmp_path, "serve"):  # the child (like Spark's JVM) does not keep it locked
            pass
    finally:
        child.kill()
        child.wait(10)
