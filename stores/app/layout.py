"""Where an app's files live under its state directory (the on-disk contract with other processes).

``<state_dir>/app.json`` tells readers the writer's state, hosting and store
health; ``<state_dir>/stores/<store>/store.json`` is the StoreSpec of the
store's current *generation* (its ``generation`` key, 0 when absent), and
the generation's partition files are ``partition-<n>.db`` in the store's
directory (generation 0) or in ``gen-<g>/`` under it. Spark's checkpoint of
a generation is ``checkpoints/<store>`` (0) or ``checkpoints/<store>@<g>``.

Why generations: a store rebuilt from its source (a damaged file, a changed
definition) is written beside the current one and swapped in by one atomic
rewrite of ``store.json`` once it has caught up, so readers never see a store
going back in time (issues 13 and 20). Files moved aside as damaged go to
``<state_dir>/damaged/``. Gateway workers find stores by these paths alone,
so every part uses these helpers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..catalog.schema import StoreSpec
from ..catalog.streams import StreamSpec

__all__ = [
    "app_json_path",
    "stores_dir",
    "store_dir",
    "spec_path",
    "generation_dir",
    "checkpoint_dir",
    "cut_ledger_path",
    "damaged_dir",
    "read_store",
    "split_store_json",
    "write_store",
    "partition_path",
    "partition_from_filename",
    "write_json_atomic",
    "coordination_dir",
    "streams_dir",
    "stream_spec_path",
    "publish_streams",
    "read_streams",
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


def generation_dir(state_dir: str | os.PathLike[str], store: str, generation: int = 0) -> Path:
    d = store_dir(state_dir, store)
    return d if generation == 0 else d / f"gen-{generation}"


def remove_generation(state_dir: str | os.PathLike[str], store: str, generation: int,
                      also: Iterable[str] = ()) -> None:
    """Delete a swapped-out or abandoned generation's files.

    Generation 0 lives in the store dir itself, beside the later generations' dirs, so only its partition
    files (and the named ``also`` files, e.g. a replica's metadata) go; a later generation is its own dir.
    """
    d = generation_dir(state_dir, store, generation)
    if generation:
        shutil.rmtree(d, ignore_errors=True)
        return
    if not d.is_dir():
        return
    names = set(also)
    for f in d.iterdir():
        if f.is_file() and (f.name.startswith("partition-") or f.name in names):
            f.unlink(missing_ok=True)


def partition_path(state_dir: str | os.PathLike[str], store: str, partition: int, generation: int = 0) -> Path:
    return generation_dir(state_dir, store, generation) / f"partition-{partition}.db"


def checkpoint_dir(state_dir: str | os.PathLike[str], store: str, generation: int = 0) -> Path:
    base = Path(state_dir) / "checkpoints"
    return base / store if generation == 0 else base / f"{store}@{generation}"


def shared_checkpoints_dir(state_dir: str | os.PathLike[str]) -> Path:
    """Where shared streaming queries keep their checkpoints (``<id>/``, members in ``<id>/members.json``).

    "@" cannot start a store name, so this never collides with a store's checkpoint.
    """
    return Path(state_dir) / "checkpoints" / "@shared"


def cut_ledger_path(state_dir: str | os.PathLike[str]) -> Path:
    """The app's ledger of shared batch cuts (``stores/pipeline/batch_cuts.py``): one SQLite file (WAL).

    Beside the checkpoints because it is the pipeline's bookkeeping of the same kind; "@" keeps it apart from
    every store's checkpoint, as ``@shared``.
    """
    return Path(state_dir) / "checkpoints" / "@cuts" / "ledger.db"


def shared_query_members(state_dir: str | os.PathLike[str]) -> list[list[str]]:
    """The member lists of the shared queries recorded on disk (unreadable records are skipped)."""
    root = shared_checkpoints_dir(state_dir)
    groups: list[list[str]] = []
    for members_file in sorted(root.glob("*/members.json")) if root.is_dir() else ():
        try:
            names = json.loads(members_file.read_text(encoding="utf-8"))["members"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(names, list):
            groups.append([str(n) for n in names])
    return groups


def streams_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "streams"


def stream_spec_path(state_dir: str | os.PathLike[str], stream: str) -> Path:
    return streams_dir(state_dir) / stream / "stream.json"


def publish_streams(state_dir: str | os.PathLike[str], streams: Iterable[StreamSpec]) -> None:
    """Write each queryable stream's ``stream.json`` (atomically) and remove those of streams no longer declared,
    so every process reading the state dir knows the pipeline's streams as it knows its stores."""
    specs = {s.name: s for s in streams}
    for name, spec in specs.items():
        path = stream_spec_path(state_dir, name)
        text = spec.to_json()
        try:
            if path.read_text(encoding="utf-8") == text + "\n":
                continue  # unchanged: keep its mtime, readers need not look again
        except (FileNotFoundError, NotADirectoryError):
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".stream.json.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    root = streams_dir(state_dir)
    for sub in sorted(root.iterdir()) if root.is_dir() else ():
        if sub.is_dir() and sub.name not in specs:
            (sub / "stream.json").unlink(missing_ok=True)
            shutil.rmtree(sub, ignore_errors=True)


def read_streams(state_dir: str | os.PathLike[str]) -> dict[str, StreamSpec]:
    """The streams ``publish_streams`` wrote (a damaged ``stream.json`` is a ValueError naming the file)."""
    root = streams_dir(state_dir)
    out: dict[str, StreamSpec] = {}
    for sub in sorted(root.iterdir()) if root.is_dir() else ():
        f = sub / "stream.json"
        try:
            spec = StreamSpec.from_json(f.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{f}: not a valid stream spec: {exc}") from None
        out[spec.name] = spec
    return out


def damaged_dir(state_dir: str | os.PathLike[str], store: str) -> Path:
    return Path(state_dir) / "damaged" / store


def read_store(state_dir: str | os.PathLike[str], store: str) -> tuple[StoreSpec, int, dict[str, Any]]:
    """(spec, current generation, the other keys such as ``definition``) from ``store.json``."""
    raw = json.loads(spec_path(state_dir, store).read_text(encoding="utf-8"))
    return _split(raw)


def split_store_json(text: str) -> tuple[StoreSpec, int, dict[str, Any]]:
    return _split(json.loads(text))


def _split(raw: dict[str, Any]) -> tuple[StoreSpec, int, dict[str, Any]]:
    extras = {k: raw.pop(k) for k in list(raw) if k in _EXTRA_KEYS}
    generation = int(extras.pop("generation", 0) or 0)
    return StoreSpec.from_json(json.dumps(raw)), generation, extras


def write_store(state_dir: str | os.PathLike[str], store: str, spec: StoreSpec, generation: int = 0,
                **extras: Any) -> None:
    """Atomically (re)write ``store.json``: switching ``generation`` here is what swaps a rebuilt store in."""
    data = json.loads(spec.to_json())
    if generation:
        data["generation"] = generation
    data.update({k: v for k, v in extras.items() if k in _EXTRA_KEYS and v is not None})
    write_json_atomic(spec_path(state_dir, store), data)


_EXTRA_KEYS = frozenset({"generation", "definition", "history", "removed"})


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
