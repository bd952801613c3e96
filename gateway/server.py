"""Serving the Flask app with waitress (a production WSGI server; Flask's own is ~6x slower here).

``ServerThread`` runs one in a background thread on 127.0.0.1 and an
ephemeral port: what the tests, the benchmark and ``iqgate demo`` use.
"""

from __future__ import annotations

import threading
from typing import Any

from waitress.server import create_server

__all__ = ["ServerThread"]


class ServerThread:
    """A waitress server in a daemon thread; ``url`` is known once constructed (the socket is bound)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, threads: int = 8) -> None:
        self._server = create_server(app, host=host, port=port, threads=threads, ident="iqgate",
                                     channel_timeout=60, connection_limit=1000, clear_untrusted_proxy_headers=True)
        self.host = host
        self.port = int(self._server.effective_port)  # type: ignore[union-attr]
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="iqgate-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            self._server.run()
        except (OSError, ValueError):
            if not self._closing:  # closing the sockets under the loop ends it this way; anything else is real
                raise

    def start(self) -> ServerThread:
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._closing = True
        self._server.close()
        self._thread.join(timeout_s)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
