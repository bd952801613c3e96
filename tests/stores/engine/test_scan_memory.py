"""Scan connections keep a small SQLite page cache (issue 14 item 2: a worker ≤ 200 MB over 1M keys).

A scan reads each leaf page once; the OS page cache holds the file outside
the process, so the 2 MiB default per connection (partitions × threads of
them) was resident memory bought for nothing.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from stores.engine import arrow_reads


def test_scan_connections_keep_a_small_page_cache(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE meta (position TEXT)")
    conn = arrow_reads._Conn(f"file:{path}?mode=ro", os.stat(path).st_ino)
    try:
        stmt = conn.statement("PRAGMA cache_size")
        try:
            [size] = conn.reader(stmt).read_all().column(0).to_pylist()
        finally:
            stmt.close()
    finally:
        conn.close()
    assert size == -arrow_reads.SCAN_CACHE_KIB  # KiB, as SQLite counts a negative cache size
    assert sqlite3.connect(":memory:").execute("PRAGMA cache_size").fetchone()[0] == -2000  # what it replaced
