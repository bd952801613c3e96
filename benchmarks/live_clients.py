"""Many live-answer clients in one process of their own: ``python -m benchmarks.live_clients URL KEYED FULL KEYS``.

Opens ``KEYED`` subscriptions following one key each (``SUBSCRIBE (SELECT * FROM revenue WHERE k = ?) WITH
(SNAPSHOT = false)``, the key as a parameter) and ``FULL`` following the whole store (snapshot off), all over
``POST /v1/sql`` as NDJSON, and reads every one of them with one thread (``selectors``), as a dashboard server
would. Prints ``READY <n>`` once every subscription sent its first progress line, then drains until stdin
closes and prints ``DONE <bytes read> <lines read>``. A process of its own, so the benchmark's writer does not
share its CPU time or its GIL with 1,000 sockets being read.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

__all__ = ["main"]


def _request(host: str, port: int, sql: str, params: list[str] | None) -> socket.socket:
    body = json.dumps({"sql": sql, **({"params": params} if params else {})}).encode()
    sock = socket.create_connection((host, port), timeout=60)
    sock.sendall(b"POST /v1/sql HTTP/1.0\r\nHost: bench\r\nAccept: application/x-ndjson\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.setblocking(False)
    return sock


def main() -> int:
    url, keyed, full, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", int(parts.port or 80)
    sel = selectors.DefaultSelector()
    started: dict[int, bool] = {}
    for i in range(keyed):
        s = _request(host, port, "SUBSCRIBE (SELECT * FROM revenue WHERE k = ?) WITH (SNAPSHOT = false)",
                     [f"c{i * 97 % keys:07d}"])
        sel.register(s, selectors.EVENT_READ, i)
        started[i] = False
    for j in range(full):
        s = _request(host, port, "SUBSCRIBE revenue WITH (SNAPSHOT = false)", None)
        sel.register(s, selectors.EVENT_READ, keyed + j)
        started[keyed + j] = False
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    total = lines = 0
    waiting = len(started)
    deadline = time.monotonic() + 300
    while not stop.is_set():
        for key, _ in sel.select(0.2):
            try:
                data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fileobj)
                print(f"ENDED {key.data}", flush=True)
                continue
            total += len(data)
            lines += data.count(b"\n")
            if not started[key.data] and b'"op":"progress"' in data:
                started[key.data] = True
                waiting -= 1
                if waiting == 0:
                    print(f"READY {len(started)}", flush=True)
        if waiting and time.monotonic() > deadline:
            print(f"STUCK {waiting}", flush=True)
            return 1
    print(f"DONE {total} {lines}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
