"""SHUTDOWN_APPLICATION across every instance of an application on this machine (KIP-671).

Kafka spreads the request through the group rebalance; here instances share
a machine-wide directory instead: the requester writes a marker file with
the time, and every running instance polls it. In-process instances are
reached at once through a registry. An instance started after the marker
was written ignores it, so an application can be started again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import layout

__all__ = ["ShutdownCoordinator"]

log = logging.getLogger(__name__)

_REGISTRY: dict[str, weakref.WeakSet[Any]] = {}
_REGISTRY_LOCK = threading.Lock()
MARKER = "shutdown-requested"


class ShutdownCoordinator:
    """One instance's side: request an application shutdown, and watch for one."""

    def __init__(self, application_id: str, owner: Any, base: str | os.PathLike[str] | None, poll_s: float) -> None:
        self.application_id = application_id
        self.dir: Path = layout.coordination_dir(application_id, base)
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._started_at: float | None = None
        with _REGISTRY_LOCK:
            _REGISTRY.setdefault(application_id, weakref.WeakSet()).add(owner)

    def peers(self) -> list[Any]:
        """Every live instance with this application id in this process (the owner included)."""
        with _REGISTRY_LOCK:
            return list(_REGISTRY.get(self.application_id, ()))

    def request(self) -> None:
        """Write the marker other processes' instances poll for."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            layout.write_json_atomic(self.dir / MARKER, {"requested_at": time.time(), "pid": os.getpid()})
        except OSError:
            log.exception("application %s: could not write the shutdown marker", self.application_id)

    def watch(self, is_live: Callable[[], bool], on_request: Callable[[], None]) -> None:
        """Poll from a daemon thread; call ``on_request`` once for a marker newer than this start."""
        self._started_at = time.time()
        threading.Thread(target=self._poll, args=(is_live, on_request), daemon=True,
                         name=f"iqgate-{self.application_id}-marker").start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self, is_live: Callable[[], bool], on_request: Callable[[], None]) -> None:
        marker = self.dir / MARKER
        started = self._started_at or time.time()
        while not self._stop.wait(self.poll_s):
            try:
                requested = json.loads(marker.read_text(encoding="utf-8"))["requested_at"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if isinstance(requested, (int, float)) and requested >= started and is_live():
                log.error("application %s: shutdown requested by another instance", self.application_id)
                on_request()
                return
