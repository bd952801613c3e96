"""Fair-share admission: shares, the newcomers' reserve, per-user limits that queue, and behaviour under load."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from iqgate_client.errors import OperationalError, error_class_for_code

from gateway.access import Admission, Limits, Principal, TooManyStatements
from gateway.access.admission import WouldWait


def test_one_user_leaves_the_reserve_free() -> None:
    adm = Admission(4)  # reserve 1
    held = [adm.admit("a") for _ in range(3)]
    with pytest.raises(TooManyStatements) as err:
        adm.admit("a")
    assert err.value.retryable and err.value.http_status == 429 and err.value.code == "TOO_MANY_STATEMENTS"
    assert "fair share" in str(err.value)
    b = adm.admit("b")  # a newcomer gets the reserved slot at once
    assert adm.usage() == {"a": (3, 0), "b": (1, 0)}
    with pytest.raises(TooManyStatements, match="all 4 statement slots are in use"):
        adm.admit("c")
    for t in (*held, b):
        t.release()
    assert adm.usage() == {}


def test_shares_shrink_as_users_arrive_and_drain_as_statements_end() -> None:
    adm = Admission(7, reserve=1)  # 6 shareable slots
    a = [adm.admit("a") for _ in range(6)]
    b = [adm.admit("b")]  # the reserve
    with pytest.raises(TooManyStatements):
        adm.admit("b")  # 7 held, only 6 shareable
    a.pop().release()
    a.pop().release()
    a.pop().release()  # a: 3 = the share of 2 users
    with pytest.raises(TooManyStatements):
        adm.admit("a")
    b.append(adm.admit("b"))
    b.append(adm.admit("b"))  # b: 3
    with pytest.raises(TooManyStatements):
        adm.admit("b")
    assert adm.usage() == {"a": (3, 0), "b": (3, 0)}
    assert adm.share(1) == 6 and adm.share(2) == 3 and adm.share(4) == 2 and adm.share(100) == 1


def test_without_a_reserve_one_user_may_use_every_slot() -> None:
    adm = Admission(3, reserve=0)
    tickets = [adm.admit("solo") for _ in range(3)]
    with pytest.raises(TooManyStatements):
        adm.admit("solo")
    for t in tickets:
        t.release()
        t.release()  # idempotent
    assert adm.usage() == {}


def test_a_users_limit_queues_in_order_then_times_out() -> None:
    adm = Admission(8)
    alice = Principal("alice", ("*",), limits=Limits(concurrent_statements=1))
    order: list[int] = []
    first = adm.admit("alice", 1)

    def queued(n: int) -> None:
        with adm.statement(alice, wait_s=30):
            order.append(n)

    threads = []
    for n in range(3):
        threads.append(threading.Thread(target=queued, args=(n,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while adm.usage()["alice"][1] < n + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert adm.usage() == {"alice": (1, 3)}
    first.release()
    for t in threads:
        t.join(30)
    assert order == [0, 1, 2] and adm.usage() == {}
    blocker = adm.admit("alice", 1)
    with pytest.raises(TooManyStatements, match="may run 1 statement"):
        adm.admit("alice", 1, wait_s=0.05)
    assert adm.usage() == {"alice": (1, 0)}  # the one that gave up holds nothing
    blocker.release()


def test_a_caller_that_may_not_wait_is_told_so_and_holds_nothing() -> None:
    """``may_wait=False`` (a serving loop): where the user's own limit would queue the statement, WouldWait at
    once and nothing held; where it would be admitted or refused, exactly as with waiting."""
    adm = Admission(4)
    first = adm.admit("alice", 1, may_wait=False)
    with pytest.raises(WouldWait):
        adm.admit("alice", 1, may_wait=False)
    assert adm.usage() == {"alice": (1, 0)}
    other = adm.admit("bob", 1, may_wait=False)  # another user is not held up
    first.release()
    adm.admit("alice", 1, may_wait=False).release()
    other.release()
    assert adm.usage() == {}
    held = [adm.admit(f"u{i}", may_wait=False) for i in range(4)]
    with pytest.raises(TooManyStatements, match="all 4 statement slots"):
        adm.admit("carol", may_wait=False)  # over the server's slots: refused, as it always was
    for t in held:
        t.release()


def test_queued_statements_count_against_the_share() -> None:
    adm = Admission(5, reserve=1)  # 4 shareable
    first = adm.admit("a", 1)
    waiting = [threading.Thread(target=lambda: adm.admit("a", 1, wait_s=30).release()) for _ in range(3)]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 10
    while adm.usage().get("a", (0, 0))[1] < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    with pytest.raises(TooManyStatements):
        adm.admit("a", 1)  # 1 running + 3 queued = the whole share
    first.release()
    for t in waiting:
        t.join(30)
    assert adm.usage() == {}


@pytest.mark.parametrize("kwargs, says", [
    ({"slots": 0}, "positive integer"), ({"slots": True}, "positive integer"),
    ({"slots": 2, "reserve": 2}, "reserve must be 0..1"), ({"slots": 2, "wait_s": -1}, "wait_s"),
])
def test_bad_settings(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Admission(**kwargs)  # type: ignore[arg-type]


def test_the_wire_rebuilds_the_class() -> None:
    assert error_class_for_code("TOO_MANY_STATEMENTS", 429) is TooManyStatements
    assert issubclass(TooManyStatements, OperationalError)


class Flood:
    """``threads`` workers of one user, each running up to ``rounds`` short statements, counting outcomes."""

    def __init__(self, adm: Admission, user: str, threads: int, rounds: int, limit: int | None = None) -> None:
        self.adm, self.user, self.limit = adm, user, limit
        self.admitted, self.refused = Counter[int](), Counter[int]()
        self.max_running = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i, rounds)) for i in range(threads)]
        self.violations: list[str] = []

    def run(self, i: int, rounds: int) -> None:
        for _ in range(rounds):
            if self.stop.is_set():
                return
            try:
                ticket = self.adm.admit(self.user, self.limit, wait_s=5)
            except TooManyStatements:
                self.refused[i] += 1
                time.sleep(0.001)
                continue
            with ticket:
                usage = self.adm.usage()
                held = sum(r + q for r, q in usage.values())
                running = usage[self.user][0]
                self.max_running = max(self.max_running, running)
                if held > self.adm.slots:
                    self.violations.append(f"{held} slots held of {self.adm.slots}")
                if self.limit is not None and running > self.limit:
                    self.violations.append(f"{self.user} ran {running} at once over its limit {self.limit}")
                time.sleep(0.002)
            self.admitted[i] += 1

    def start(self) -> Flood:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self.threads:
            t.join(120)


def test_a_flooding_user_never_delays_another_users_first_statement() -> None:
    adm = Admission(8)
    flood = Flood(adm, "heavy", threads=12, rounds=150).start()
    light_refused = 0
    try:
        for _ in range(40):
            try:
                with adm.admit("light"):
                    assert adm.usage().get("heavy", (0, 0))[0] <= 7  # never more than slots - reserve
                    time.sleep(0.001)
            except TooManyStatements:
                light_refused += 1
            time.sleep(0.002)
    finally:
        flood.stop.set()
        flood.join()
    assert light_refused == 0  # one statement at a time always fits in the reserve
    assert sum(flood.refused.values()) > 0 and sum(flood.admitted.values()) > 0 and not flood.violations
    assert flood.max_running <= 7


def test_two_flooding_users_share_evenly_and_limits_hold() -> None:
    adm = Admission(8)
    a = Flood(adm, "a", threads=10, rounds=120)
    b = Flood(adm, "b", threads=10, rounds=120)
    c = Flood(adm, "c", threads=4, rounds=60, limit=2)
    for f in (a, b, c):
        f.start()
    for f in (a, b, c):
        f.join()
    got_a, got_b = sum(a.admitted.values()), sum(b.admitted.values())
    assert not a.violations and not b.violations and not c.violations
    assert c.max_running <= 2 and sum(c.admitted.values()) > 0  # never starved: it always fits in the reserve
    assert min(got_a, got_b) / max(got_a, got_b) > 0.5, (got_a, got_b)  # equal loads, comparable service
    assert adm.usage() == {}


def test_a_users_own_limit_holds_under_load() -> None:
    adm = Admission(8)
    c = Flood(adm, "c", threads=6, rounds=40, limit=2).start()
    c.join()
    assert not c.violations and c.max_running == 2 and sum(c.refused.values()) == 0  # queued, not refused
    assert sum(c.admitted.values()) == 6 * 40
