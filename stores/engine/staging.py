"""How a partition's rows get from Arrow into a table the write transaction reads them from.

Measured on 2 cores (notes/ingest.md): ``executemany`` costs ~1 µs a row,
mostly Python binding each parameter; the ADBC SQLite driver inserts from the
Arrow buffers in C (~0.4 µs a row) and releases the GIL, so partitions stage
in parallel. The rows arrive sorted by key (Arrow's sort, also GIL-free), so
one ``INSERT … SELECT … ORDER BY rowid`` per kind merges them into the store
in key order without a sort in SQLite.

So big batches are written by ADBC into a staging file beside the partition
(``partition-<n>.db.stage``), ATTACHed for the merge, then deleted; small
ones (under ``ADBC_MIN_ROWS``, where opening that file costs more than
binding a few rows) go through ``executemany`` into a TEMP table. The merge
SQL is the same for both.

The ADBC driver links its own copy of SQLite. Two copies of SQLite must never
open the same file at once in one process (POSIX locks are per process: one
copy closing a file drops the other's locks), so ADBC only ever touches the
staging file, and closes it before this connection ATTACHes it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

__all__ = ["Stager", "ADBC_MIN_ROWS", "STAGE_TABLE"]

ADBC_MIN_ROWS = 4096
STAGE_TABLE = "batch_rows"
_SCHEMA = "stage"


class Stager:
    """Stages one partition's rows for its writer connection; the caller holds the partition's write lock."""

    def __init__(self, db_path: Path, columns: Sequence[str], adbc_min_rows: int = ADBC_MIN_ROWS) -> None:
        self.file = Path(f"{db_path}.stage")
        self.columns = list(columns)
        self.adbc_min_rows = adbc_min_rows
        self._temp_ready: sqlite3.Connection | None = None

    def clear_leftover(self) -> None:
        """Remove a staging file a crash left behind (it holds nothing that was committed)."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.file}{suffix}")

    @contextlib.contextmanager
    def staged(self, conn: sqlite3.Connection, rows: pa.Table) -> Iterator[str]:
        """The qualified name of a table holding ``rows`` in their order (rowid order), while in the block."""
        rows = _sql_ready(rows.select(self.columns))
        if len(rows) >= self.adbc_min_rows:
            with self._file(conn, rows) as name:
                yield name
        else:
            yield self._temp(conn, rows)

    def _temp(self, conn: sqlite3.Connection, rows: pa.Table) -> str:
        name = f"temp.{STAGE_TABLE}"
        if self._temp_ready is not conn:
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ({', '.join(self.columns)})")
            self._temp_ready = conn
        conn.execute("BEGIN")
        try:
            conn.execute(f"DELETE FROM {name}")
            if len(rows):
                conn.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(self.columns))})",
                                 zip(*(c.to_pylist() for c in rows.columns)))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return name

    @contextlib.contextmanager
    def _file(self, conn: sqlite3.Connection, rows: pa.Table) -> Iterator[str]:
        import adbc_driver_sqlite.dbapi as adbc  # only writers load it; readers never stage

        self.clear_leftover()
        try:
            with adbc.connect(str(self.file), autocommit=True) as staging:
                with contextlib.closing(staging.cursor()) as cur:
                    # 16 KiB pages: ~10% less staging time than 4 KiB at 250k rows (fewer pages to fill and link)
                    cur.execute("PRAGMA page_size=16384")
                    cur.execute("PRAGMA journal_mode=OFF")  # a scratch file: nothing to recover after a crash
                    cur.execute("PRAGMA synchronous=OFF")
                    cur.adbc_ingest(STAGE_TABLE, rows, mode="create")
            conn.execute(f"ATTACH DATABASE ? AS {_SCHEMA}", (str(self.file),))
            try:
                yield f"{_SCHEMA}.{STAGE_TABLE}"
            finally:
                conn.execute(f"DETACH DATABASE {_SCHEMA}")
        finally:
            self.clear_leftover()


def _sql_ready(rows: pa.Table) -> pa.Table:
    """Booleans as 0/1 integers, as SQLite keeps them (both loaders then store the same values)."""
    for i, field in enumerate(rows.schema):
        if pa.types.is_boolean(field.type):
            rows = rows.set_column(i, field.name, rows.column(i).cast(pa.int64()))
    return rows
