"""What a server's supervisor runs beside its serving processes, and what it says about it.

- ``PipelineHost`` (``serve <pipeline>``, ``demo``): Spark and the StreamsApp
  that writes the stores (hosting.py);
- ``ReplicaHost`` (``replica``): a standby replica restoring the stores from
  their changelogs;
- ``ReadOnlyHost`` (``serve --state-dir``): nothing to run; it reports the
  files' writer and how old each store's Position is.

Each says what the serving processes answer by (``mode``, see follower.py),
where the files are (``state_dir``), and its status (``status()``): the
KIP-696 state, the health, every store's status and what else its health
shows. The supervisor publishes that status on the state board.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from stores.app.health import overall
from stores.app.reader import StateDirReader
from stores.iqv2.state import State
from stores.log.source import SourceLog

__all__ = ["Host", "HostStartError", "AppHost", "PipelineHost", "ReplicaHost", "ReadOnlyHost"]


class HostStartError(Exception):
    """What a server hosts could not start (a changelog that cannot be read); the message says what and where."""


class Host(Protocol):
    mode: str           # hosted | replica | read-only (follower.MODES)
    state_dir: Path

    def describe(self) -> str: ...

    def start(self) -> None:
        """Start what it runs (may take seconds: Spark); status() answers meanwhile."""
        ...

    def status(self) -> dict[str, Any]:
        """``{"state", "health", "stores": {name: StoreStatus}, …extras}`` (StreamsApp.status's shape)."""
        ...

    def on_change(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` when the state or a store's status changes (the supervisor publishes at once)."""
        ...

    def close(self) -> None: ...


class AppHost:
    """A StreamsApp hosted in the supervisor's process, made by ``make_app(listener)`` when the host starts.

    ``make_app`` builds and starts the app, handing it to ``listener`` before it
    starts, so every transition and store status change reaches the board. Until
    it returns (Spark takes seconds to start) the state is REBALANCING and the
    stores on disk answer at their positions.
    """

    mode = "hosted"

    def __init__(self, state_dir: Path, make_app: Callable[[Callable[[Any], None]], Any], what: str) -> None:
        self.state_dir = state_dir
        self.app: Any = None
        self.phase = "starting"
        self._make_app = make_app
        self._what = what
        self._started = time.time()
        self._notify: Callable[[], None] | None = None
        state_dir.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return self._what

    def on_change(self, notify: Callable[[], None]) -> None:
        self._notify = notify

    def start(self) -> None:
        self.app = self._make_app(self._listener)
        if self._notify is not None:
            self._notify()

    def _listener(self, app: Any) -> None:
        notify = self._notify
        if notify is None:
            return
        app.set_state_listener(lambda new, old: notify())
        app.health.add_listener(notify)

    def status(self) -> dict[str, Any]:
        app = self.app
        if app is not None:
            return app.status()
        reason = (f"{self.phase} ({time.time() - self._started:.0f} s); the stores on disk answer at their "
                  "positions meanwhile")
        return {"state": State.REBALANCING.value,
                "health": {**overall(State.REBALANCING, {}, self._started), "status": "starting", "reason": reason},
                "stores": {}}

    def close(self) -> None:
        if self.app is not None:
            self.app.close()


class PipelineHost(AppHost):
    """A pipeline file hosted in the supervisor's process: Spark, the StreamsApp, the stores it writes."""

    def __init__(self, module: ModuleType, log: SourceLog, state_dir: Path, *, master: str | None = None,
                 rebuild_from_available: bool = False) -> None:
        def make_app(listener: Callable[[Any], None]) -> Any:
            from .hosting import start_pipeline

            return start_pipeline(module, log, state_dir, master=master,
                                  rebuild_from_available=rebuild_from_available, listener=listener)

        super().__init__(state_dir, make_app, f"pipeline {module.APPLICATION_ID} (the stores on disk answer, "
                                              "read-only, while Spark starts)")
        self.module = module
        self.log = log
        self.phase = "starting Spark"


class ReplicaHost:
    """A standby replica restoring an application's stores from their changelogs into ``state_dir``."""

    mode = "replica"

    def __init__(self, replica: Any, changelog: Any) -> None:
        from stores.replica import ReplicaSource

        self.replica = replica
        self.changelog = changelog
        self.state_dir = Path(replica.state_dir)
        self._source: Any = ReplicaSource(replica)
        self._started = False

    def describe(self) -> str:
        return f"replica of {self.replica.application_id} from {self.changelog.describe()} into {self.state_dir}"

    def on_change(self, notify: Callable[[], None]) -> None:
        pass  # lags move all the time: the supervisor's heartbeat republishes them

    def start(self) -> None:
        try:
            self.replica.start()
        except Exception as exc:  # noqa: BLE001 - the log unreachable at start: one line, not a traceback
            raise HostStartError(f"cannot start restoring from {self.changelog.describe()}: {exc}") from None
        self._started = True

    def status(self) -> dict[str, Any]:
        """The replica's own client state: CREATED until it restores, then RUNNING (it serves while it restores,
        KIP-535's standby). Not the files' app.json as a reader sees it: before the replica writes one, that
        says NOT_RUNNING, from which KIP-696 has no way back (the server would never become healthy)."""
        out = dict(self._source.status())
        if not self._started:
            out["state"] = State.CREATED.value
            out["health"] = {"status": "starting", "reason": "the replica is starting", "since": None,
                             "retry_s": None}
            return out
        out["state"] = State.RUNNING.value
        health = dict(out.get("health") or {})
        if health.get("status") != "degraded":
            health = {"status": "healthy", "reason": None, "since": health.get("since"), "retry_s": None}
        out["health"] = health
        return out

    def close(self) -> None:
        self._source.close()
        close = getattr(self.changelog, "close", None)
        if close is not None:
            close()


class ReadOnlyHost:
    """Files written by another process (or by none any more): served as they are, read-only.

    The server is up while it can answer, so its own state is RUNNING and its
    health ``healthy`` (issue 45: a load balancer following the health check
    must not take a working read-only server out); what the writer's
    ``app.json`` says is beside it (``writer``), with each store's Position
    and how long ago its files last changed (``positions``).
    """

    mode = "read-only"

    REFRESH_S = 0.5  # how often the Positions and ages are read again (every store partition's file)

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.reader = StateDirReader(state_dir)
        self._cached: tuple[float, dict[str, Any]] = (float("-inf"), {})

    def describe(self) -> str:
        return f"{self.state_dir} read-only"

    def on_change(self, notify: Callable[[], None]) -> None:
        pass

    def start(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        at, cached = self._cached
        if time.monotonic() - at < self.REFRESH_S:
            return cached
        info = self.reader.app_info()
        now = time.time()
        positions = {}
        for name, pos in sorted(self.reader.positions().items()):
            changed = _last_write(self.state_dir / "stores" / name)
            positions[name] = {"position": pos.to_json_map(),
                               "age_s": None if changed is None else round(max(0.0, now - changed), 3)}
        health = {"status": "healthy", "reason": "read-only: serving the files as they are", "since": None,
                  "retry_s": None}
        out = {"state": State.RUNNING.value, "health": health, "stores": {},
               "writer": {"state": info.state.value, "alive": info.alive, "pid": info.pid,
                          "application_id": info.application_id},
               "positions": positions}
        self._cached = (time.monotonic(), out)
        return out

    def close(self) -> None:
        self.reader.close()


def _last_write(store_dir: Path) -> float | None:
    """When any partition file of a store (its database or WAL, in any generation) was last written."""
    latest = None
    dirs = [store_dir]
    try:
        dirs += [Path(e.path) for e in os.scandir(store_dir) if e.is_dir() and e.name.startswith("gen-")]
    except OSError:
        return None
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("partition-") and entry.name.endswith((".db", ".db-wal")):
                try:
                    t = entry.stat().st_mtime
                except OSError:
                    continue
                latest = t if latest is None else max(latest, t)
    return latest
