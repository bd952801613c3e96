"""The floor of the HTTP figures: a bare WSGI app on waitress that answers every request with fixed bytes.

``python -m benchmarks.bare_http PORT SPEC_FILE``: SPEC_FILE is JSON with the
``status``, ``headers`` and ``body`` (latin-1 text) of an answer captured
from ``iqgate serve``, so the two servers send the same bytes and only what
happens between reading a request and writing its answer differs. Waitress as
a user starts it (``waitress.serve``, 4 threads like a serving process): the
floor issue 50 measures iqgate against. The app reads the body, as a real one
must, and does nothing else.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["bare_app", "main"]


def bare_app(status: str, headers: list[tuple[str, str]], body: bytes) -> Callable[..., Iterable[bytes]]:
    """A WSGI app answering ``status``, ``headers``, ``body`` to everything."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH")
        if length:
            environ["wsgi.input"].read(int(length))
        start_response(status, list(headers))
        return [body]
    return app


def main(argv: list[str]) -> None:
    from waitress import serve

    spec = json.loads(Path(argv[2]).read_text())
    app = bare_app(spec["status"], [(k, v) for k, v in spec["headers"]], spec["body"].encode("latin-1"))
    serve(app, host="127.0.0.1", port=int(argv[1]), threads=4, _quiet=True)


if __name__ == "__main__":
    main(sys.argv)
