"""Issue 17 end to end on 127.0.0.1: a pipeline host (Spark reading Kafka via Tansu) and two replicas restored
from its changelogs. Every replica's stores match the oracle at their Positions; the pipeline host is killed
(-9) while 8 clients query the replicas: with require_active=false no query fails and no client sees its
position go back (each passes its last position as the bound); with require_active=true the failures are
NOT_ACTIVE, and answers come back from the active once the pipeline host is restarted."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

from stores import KafkaSource  # noqa: E402
from stores.app.reader import StateDirReader  # noqa: E402
from stores.iqv2.position import Position  # noqa: E402
from stores.log.broker import LocalBroker  # noqa: E402
from tests.gateway.routing.cluster import free_port, get, pipeline, post, replica  # noqa: E402
from tests.stores.pipeline.oracle import check_all  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

SHOP_STORES = ("revenue", "revenue_per_min", "last_order")

CLIENTS = 8
SQL = "SELECT count(*) AS customers, sum(orders) AS orders FROM revenue"


def _reaches(pos: Position, bound: Position) -> bool:
    return all((pos.offset(t, p) or -1) >= o for t in bound.topics() for p, o in bound.partition_positions(t).items())


def _caught_up(url: str, log: KafkaSource) -> bool:
    status, body = get(url, "/v1/health")
    ends = log.last_offsets("orders")
    parts = body.get("partitions", [])
    # every store restored (a replica that has not yet found one store's changelog is not caught up)
    present = all(any(p["store"] == s for p in parts) for s in SHOP_STORES)
    return status == 200 and present and sum(p["store"] == "revenue" for p in parts) == 4 and all(
        p["offset_lag"] == 0 and _reaches(Position.from_map(p["position"]), Position.from_map({"orders": ends}))
        for p in parts)


def _whole_batches(url: str) -> bool:
    status, body = get(url, "/v1/health")
    parts = body.get("partitions", [])
    stores = {p["store"] for p in parts}
    return status == 200 and bool(parts) and all(p["offset_lag"] == 0 for p in parts) and all(
        len({str(p["position"]) for p in parts if p["store"] == s}) == 1 for s in stores)


def _wait(cond, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def test_replicas_match_the_oracle_and_survive_the_pipeline_host(tmp_path) -> None:
    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        log = KafkaSource(broker.bootstrap_servers)
        log.create_topic("orders", partitions=shop.TOPICS["orders"])
        log.append_batch("orders", shop.generate_orders(400, customers=30, seed=21))
        ports = [free_port() for _ in range(3)]
        host = pipeline(tmp_path, broker.bootstrap_servers, ports[0], ports[1:])
        reps = [replica(tmp_path, broker.bootstrap_servers, ports[1], [ports[0], ports[2]]),
                replica(tmp_path, broker.bootstrap_servers, ports[2], [ports[0], ports[1]])]
        procs = [host, *reps]
        try:
            host.wait_healthy(300, "the pipeline host")  # Spark starting: slow on a loaded machine
            for r in reps:
                _wait(lambda r=r: _caught_up(r.url, log), f"replica {r.url} to catch up", 120)
            # 1. every replica's stores against the oracle at their own Positions
            for r in reps:
                with StateDirReader(tmp_path / f"replica-{r.port}") as reader:
                    sizes = check_all(reader, log, profiles=False)
                assert sizes["orders"] == 400

            # 2. kill -9 the pipeline host while 8 clients query the replicas, each bounded by its last position
            stop = threading.Event()
            failures: list[str] = []
            back_in_time: list[str] = []
            answered = [0] * CLIENTS

            def produce() -> None:
                seed = 100
                while not stop.is_set():
                    log.append_batch("orders", shop.generate_orders(5, customers=30, seed=seed,
                                                                    start_ts=1_700_000_000_000 + seed * 60_000))
                    seed += 1
                    time.sleep(0.05)

            def client(i: int) -> None:
                last: Position | None = None
                n = 0
                while not stop.is_set():
                    url = reps[(i + n) % len(reps)].url
                    n += 1
                    body = {"sql": SQL, "wait_ms": 20_000}
                    if last is not None:
                        body["position"] = last.to_json_map()
                    try:
                        status, out = post(url, body)
                    except OSError as exc:
                        failures.append(f"client {i} {url}: {exc}")
                        continue
                    if status != 200:
                        failures.append(f"client {i} {url}: {status} {out}")
                        continue
                    pos = Position.from_map(out["position"])
                    if last is not None and not _reaches(pos, last):
                        back_in_time.append(f"client {i}: {pos} after {last}")
                    last = pos if last is None else last.merge(pos)
                    answered[i] += 1

            threads = [threading.Thread(target=produce, daemon=True)]
            threads += [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            time.sleep(4.0)
            host.kill9()
            time.sleep(5.0)
            stop.set()
            for t in threads:
                t.join(60)
            assert failures == [], failures[:5]
            assert back_in_time == [], back_in_time[:5]
            assert min(answered) > 0, answered

            # 3. require_active: clear NOT_ACTIVE while the pipeline host is down ...
            status, out = post(reps[0].url, {"sql": SQL, "session": {"require_active": True}})
            assert status == 503, out
            assert {p["failure_reason"] for p in out["error"]["partitions"]} == {"NOT_ACTIVE"}, out
            assert "No active host" in out["error"]["message"]
            # ... and each replica holds whole batches: every partition of a store at the same Position
            for r in reps:
                _wait(lambda r=r: _whole_batches(r.url), f"replica {r.url} to apply every committed batch", 60)

            # 4. recovery: the pipeline host comes back; require_active answers come from it, through a replica
            host = pipeline(tmp_path, broker.bootstrap_servers, ports[0], ports[1:])
            procs[0] = host
            host.wait_healthy(300, "the restarted pipeline host")  # Spark again: slow on a loaded machine

            def active_answers() -> bool:
                status, out = post(reps[1].url, {"sql": SQL, "session": {"require_active": True}})
                return status == 200 and {(p["host"], p["active"]) for p in out["partitions"]} == {(host.url, True)}

            _wait(active_answers, "require_active answers from the restarted active", 60)
            for r in reps:
                _wait(lambda r=r: _caught_up(r.url, log), f"replica {r.url} to catch up after the restart", 120)
                with StateDirReader(tmp_path / f"replica-{r.port}") as reader:
                    sizes = check_all(reader, log, profiles=False)
                assert sizes["orders"] == sum(log.end_offsets("orders").values())
        finally:
            for p in procs:
                p.stop()
            log.close()
