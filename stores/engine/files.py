"""A store partition's file, as a file: is it sound, can it be written, and closing it without a checkpoint.

What the partition store (base.py) and the generations (app/generations.py) ask of the file itself before
SQLite touches it: a damaged or truncated file is found on open and rebuilt (issue 13), a file that cannot be
written is refused before a write that would SIGBUS the process.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["integrity_problem", "no_checkpoint_on_close", "rollback", "writable", "CORRUPTION_TEXTS",
           "QUICK_CHECK_MAX_BYTES"]

QUICK_CHECK_MAX_BYTES = 256 << 20  # above this, open checks only the header and the meta row (quick_check is O(size))
#: What SQLite says about a damaged file; a write failing with one of these is a corruption, not a fault.
CORRUPTION_TEXTS = ("database disk image is malformed", "file is not a database", "malformed database schema")
_SQLITE_MAGIC = b"SQLite format 3\x00"


def integrity_problem(path: str | os.PathLike[str], kind: str | None = None) -> str | None:
    """Why the store file at ``path`` cannot be trusted, or None if it looks sound (issue 13: a corrupt or
    truncated file is found on open and rebuilt, instead of failing every start).

    Checks the header, opens it read-only, reads the meta row (and its kind), and runs SQLite's
    ``quick_check`` on files up to QUICK_CHECK_MAX_BYTES. A missing file is the caller's business.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {p}: {exc}"
    if size == 0:
        return None if not Path(f"{p}-wal").exists() else f"{p} is empty but has a write-ahead log"
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        return f"{p} is not a SQLite database (bad header, {size} bytes)"
    page = int.from_bytes(head[16:18], "big") or 65536
    if size % page:
        return f"{p} is truncated ({size} bytes is not a whole number of {page}-byte pages)"
    try:
        c = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        return f"{p} cannot be opened: {exc}"
    try:
        row = c.execute("SELECT kind FROM meta WHERE id = 0").fetchone()
        if row is None:
            return f"{p} has no meta row"
        if kind is not None and row[0] != kind:
            return None  # a kind mismatch is a configuration error the open reports, not damage
        if size <= QUICK_CHECK_MAX_BYTES:
            result = [r[0] for r in c.execute("PRAGMA quick_check(5)").fetchall()]
            if result != ["ok"]:
                return f"{p} failed SQLite's quick_check: {'; '.join(result)}"
    except sqlite3.Error as exc:
        return f"{p} is damaged: {exc}"
    finally:
        c.close()
    return None


_NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE


def rollback(c: sqlite3.Connection) -> None:
    if c.in_transaction:
        try:
            c.execute("ROLLBACK")
        except sqlite3.Error:  # pragma: no cover - the original error is the one to report
            pass


def writable(path: Path) -> bool:
    """Can the store file and its WAL companions be written? (False on a read-only FS or immutable files.)"""
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if f.exists() and not os.access(f, os.W_OK):
            return False
    return os.access(path.parent, os.W_OK)


def no_checkpoint_on_close(conn: sqlite3.Connection, path: Path) -> bool:
    """Tell SQLite not to checkpoint when ``conn`` closes; False if this Python cannot say it.

    ``Connection.setconfig`` exists from Python 3.12; on 3.11 the same
    ``sqlite3_db_config`` call is made through ctypes on the connection's
    handle, used only after ``sqlite3_db_filename`` confirms it is this file.
    """
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:
        setconfig(_NO_CKPT_ON_CLOSE, True)
        return True
    try:
        import _sqlite3
        import ctypes

        lib = ctypes.CDLL(_sqlite3.__file__)
        handle = ctypes.c_void_p.from_address(id(conn) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        name = lib.sqlite3_db_filename(handle, b"main") if handle else None
        if not name or os.path.realpath(name.decode()) != os.path.realpath(path):
            return False
        lib.sqlite3_db_config.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        return lib.sqlite3_db_config(handle, _NO_CKPT_ON_CLOSE, 1, None) == 0
    except Exception:  # noqa: BLE001 - best effort: an unknown layout means no change
        return False
