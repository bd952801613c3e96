"""One closed-loop load generator for every wire face the benchmarks drive (HTTP, PostgreSQL).

Why one: the loop — N keep-alive connections in one selector, each sending
its next request as soon as its answer is complete, bounded in count and
time — is what makes the figures comparable between faces; only how an
answer ends differs, and that is the caller's ``take`` function.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable, Sequence

__all__ = ["closed_loop", "Take"]

# take(buffer) -> None while the answer is incomplete, else (bytes it used, whether it succeeded)
Take = Callable[[bytes], "tuple[int, bool] | None"]


def closed_loop(socks: Sequence[socket.socket], requests: Sequence[bytes], per_client: int, max_s: float,
                take: Take, goodbye: bytes = b"") -> tuple[float, list[float], int]:
    """Drive ``socks`` (connected) with ``requests`` round robin: ``per_client`` each, at most ``max_s`` seconds.

    Returns (elapsed seconds, latencies, failed answers). A non-blocking loop
    costs the client far less CPU than a thread per connection (the machine
    has two cores and the server needs them), so the figures describe the
    server. ``goodbye`` is sent before a connection is closed.
    """
    sel = selectors.DefaultSelector()
    state = []
    for i, sock in enumerate(socks):
        sock.setblocking(False)
        st = {"sock": sock, "buf": b"", "t0": 0.0, "n": i * per_client, "left": per_client}
        state.append(st)
        sel.register(sock, selectors.EVENT_READ, st)
    lat: list[float] = []
    bad = 0
    clock = time.perf_counter
    t0 = clock()
    deadline = t0 + max_s

    def send(st: dict) -> None:
        st["t0"] = clock()
        st["sock"].sendall(requests[st["n"] % len(requests)])
        st["n"] += 1
        st["left"] -= 1

    for st in state:
        send(st)
    active = len(state)
    while active:
        events = sel.select(timeout=30)
        if not events:
            raise TimeoutError("no answer for 30 s")
        for key, _ in events:
            st = key.data
            chunk = st["sock"].recv(65536)
            if not chunk:
                raise ConnectionError("the server closed a keep-alive connection")
            st["buf"] += chunk
            answer = take(st["buf"])
            if answer is None:
                continue
            used, ok = answer
            lat.append(clock() - st["t0"])
            bad += not ok
            st["buf"] = st["buf"][used:]
            if st["left"] > 0 and clock() < deadline:
                send(st)
            else:
                sel.unregister(st["sock"])
                if goodbye:
                    st["sock"].setblocking(True)
                    st["sock"].sendall(goodbye)
                st["sock"].close()
                active -= 1
    return clock() - t0, lat, bad
