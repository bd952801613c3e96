"""Where an app's files live under its state directory (the on-disk contract with other processes).

``<state_dir>/app.json`` tells readers the writer's state and hosting;
``<state_dir>/stores/<store>/store.json`` is the StoreSpec, and
``partition-<n>.db`` the SQLite file of one store partition. Gateway
workers find stores by these paths alone, so every part uses these helpers.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "app_json_path",
    "stores_dir",
    "store_dir",
    "spec_path",
    "partition_path",
    "partition_from_filename",
    "write_json_atomic",
    "coordination_dir",
]

_PARTITION_RE = re.compile(r"^partition-(\d+)\.db$")


def app_json_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "app.json"


def stores_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "stores"


def store_dir(state_dir: str | os.PathLike[str], store: str) -> Path:
    return stores_dir(state_dir) / store


def spec_path(state_dir: str | os.PathLike[str], store: str) -> Path:
    return store_dir(state_dir, store) / "store.json"


def partition_path(state_dir: str | os.PathLike[str], store: str, partition: int) -> Path:
    return store_dir(state_dir, store) / f"partition-{partition}.db"


def partition_from_filename(name: str) -> int | None:
    """The partition number of a ``partition-<n>.db`` file name, else None (ignores -wal/-shm)."""
    m = _PARTITION_RE.match(name)
    return int(m.group(1)) if m else None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a concurrent reader sees the old or the new file, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def coordination_dir(application_id: str, base: str | os.PathLike[str] | None = None) -> Path:
    """Machine-wide directory shared by every app instance with this id (SHUTDOWN_APPLICATION markers)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", application_id)
    root = Path(base) if base is not None else Path(tempfile.gettempdir()) / "iqgate-apps"
    return root / safe


def source_location(source: Any) -> dict[str, str] | None:
    """Where the app's source log is, for app.json: readers in other processes find the source's end there.

    A Kafka source with client options (credentials) is not written down: a reader would need them.
    """
    if source is None:
        return None
    root = getattr(source, "root", None)
    if root is not None:
        return {"eventlog": str(Path(root).resolve())}
    servers = getattr(source, "bootstrap_servers", None)
    if servers and not getattr(source, "options", None):
        return {"kafka": str(servers)}
    return None


def source_end_offsets(source: Any, topics: Iterable[str]) -> Any:
    """``Position`` of the last offset per partition of ``topics`` in ``source`` (topics it lacks are left out)."""
    from ..iqv2.position import Position

    have = source.list_topics()
    return Position.from_map({t: source.last_offsets(t) for t in topics if t in have})
