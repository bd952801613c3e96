"""Stores written through a ChangelogWriter without Spark, and their contents read back for comparisons."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from stores.app.layout import partition_path, read_store
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.changelog import ChangelogWriter
from stores.engine.change import Change

APP = "shop"


def kv_spec(name: str = "revenue", partitions: int = 3) -> StoreSpec:
    return StoreSpec(name, StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR),
                     (Column("total", SqlType.DOUBLE), Column("n", SqlType.BIGINT)), partitions, ("orders",))


def window_spec(name: str = "per_min", partitions: int = 2) -> StoreSpec:
    return StoreSpec(name, StoreKind.WINDOW, Column("customer", SqlType.VARCHAR), (Column("n", SqlType.BIGINT),),
                     partitions, ("orders",), window_size_ms=60_000, window_advance_ms=60_000)


def open_app(state_dir: Path, *specs: StoreSpec) -> StreamsApp:
    app = StreamsApp(StoreTopology(specs or (kv_spec(),)), application_id=APP, state_dir=str(state_dir))
    app.start()
    return app


def batch(i: int, keys: int = 20) -> list[Change]:
    """Batch ``i``: every key's running total and count after it (so a later batch overwrites), one delete."""
    out = [Change(f"c{k}", (float(k * (i + 1)), i + 1)) for k in range(keys) if (k + i) % 7]
    out.append(Change(f"c{i % keys}", None))
    return out


def window_batch(i: int) -> list[Change]:
    return [Change(f"c{k}", (i + k,), timestamp=60_000 * i + 5, window_start=60_000 * i) for k in range(5)]


def position(i: int) -> dict[str, dict[int, int]]:
    return {"orders": {0: 10 * i + 9, 1: 10 * i + 4}}


def logged_writer(app: StreamsApp, log: Any, store: str = "revenue") -> ChangelogWriter:
    return ChangelogWriter(app.writer(store), log, APP)


def contents(state_dir: Path, spec: StoreSpec, p: int, generation: int | None = 0
             ) -> tuple[list[tuple[Any, ...]], str, int | None]:
    """(rows sorted, position JSON, last batch id) of one partition file (of the generation store.json names when
    ``generation`` is None), read directly."""
    if generation is None:
        generation = read_store(state_dir, spec.name)[1]
    c = sqlite3.connect(f"file:{partition_path(state_dir, spec.name, p, generation)}?mode=ro", uri=True)
    try:
        table = {StoreKind.KEY_VALUE: "kv", StoreKind.WINDOW: "win"}.get(spec.kind)
        names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'meta'")]
        rows = []
        for t in sorted(names if table is None or table not in names else [table]):
            rows += sorted(c.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        pos, last = c.execute("SELECT position, last_batch_id FROM meta").fetchone()
        return rows, pos, last
    finally:
        c.close()


def kafka_client_threads() -> list[str]:
    """The names of this process's librdkafka threads ("rdk:main", "rdk:broker…"): every Kafka client that is still
    open has some, so a client left open shows here without looking inside the objects that hold it."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(n for n in names if n.startswith("rdk:"))


def kafka_threads_beyond(before: list[str]) -> list[str]:
    """The librdkafka threads running now that ``before`` (an earlier ``kafka_client_threads()``) did not have.

    A count, not an equality: a client another test left for the garbage collector may end meanwhile."""
    return sorted((Counter(kafka_client_threads()) - Counter(before)).elements())
