"""A rebuild the source cannot feed is refused, for real (issue 20 item 4), and the explicit override.

The embedded log's ``delete_records`` (Kafka's DeleteRecords: the first held
offset moves up, reads below it fail) removes early records of two
partitions after the shop pipeline built its stores. Then:

- ``iqgate upgrade --dry-run`` prints the plan with REBUILD_REFUSED naming the
  topic-partitions and the offsets gone, and changes nothing;
- the app with the changed pipeline refuses the rebuild of ``revenue``: its
  old version keeps answering, health says why, the other stores (and a new
  one) run and the app reaches RUNNING;
- ``iqgate upgrade --rebuild-from-available`` rebuilds it from what the log
  still holds and exits once it is swapped in; ``store.json`` records the
  partial history and the store equals the oracle over the records held.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from gateway.cli.main import main  # noqa: E402
from gateway.engine.gateway import Gateway  # noqa: E402
from stores import State, StreamsApp  # noqa: E402
from stores.app import layout  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, first_load, wait_for_state, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402
from tests.stores.pipeline.test_upgrade_spark import v2  # noqa: E402

V2 = Path(__file__).parent / "shop_v2_pipeline.py"
STORES = ("revenue", "revenue_per_min", "last_order")
DELETED = {1: 5, 3: 2}


def _revenue(state: Path) -> tuple[dict, dict]:
    gw = Gateway.open(state)
    try:
        res = gw.sql("SELECT * FROM revenue")
        names = [n for n, _ in res.columns]
        return res.position.to_json_map(), {r[0]: dict(zip(names, r)) for r in res.rows()}
    finally:
        gw.close()


def test_a_rebuild_from_a_source_that_lost_records_is_refused_unless_asked_for(spark, tmp_path, capsys):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(800, customers=40, seed=30))
    state = tmp_path / "state"
    first_load(shop.build(spark, log), log, "shop", state, STORES)
    before = _revenue(state)
    log.delete_records("orders", DELETED)
    capsys.readouterr()

    assert main(["upgrade", str(V2), "--data-dir", str(tmp_path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "upgrade plan (2 unchanged, 1 new, 1 changed, 0 removed)" in err
    assert ("revenue: changed (value columns: + avg_amount DOUBLE): rebuilt beside the old version, swapped in "
            "once it has caught up; REFUSED: REBUILD_REFUSED: store 'revenue' cannot be rebuilt from event log at"
            in err)
    assert "orders partition 1: offsets 0..4 are gone (first held 5); orders partition 3: offsets 0..1" in err
    assert not layout.store_dir(state, "orders_per_item").exists()  # a dry run changes nothing
    assert layout.read_store(state, "revenue")[1] == 0

    app = StreamsApp(v2.build(spark, log), application_id="shop", state_dir=state)
    try:
        app.start()
        wait_for_state(app, State.RUNNING, 240)  # the refused store does not hold the others back
        wait_until(lambda: caught_up(app, log, ("revenue_per_min", "last_order", "orders_per_item")),
                   "the other stores", 180)
        st = app.status()
        assert st["stores"]["revenue"].status == "failed"
        assert st["stores"]["revenue"].reason.startswith("REBUILD_REFUSED: store 'revenue'")
        assert st["health"]["status"] == "degraded" and "REBUILD_REFUSED" in st["health"]["reason"]
        assert st["stores"]["revenue_per_min"].status == "running"
    finally:
        assert app.close(60)
    assert _revenue(state) == before  # the old version kept answering, untouched

    assert main(["upgrade", str(V2), "--data-dir", str(tmp_path), "--rebuild-from-available", "--timeout",
                 "240"]) == 0
    err = capsys.readouterr().err
    assert "REFUSED" not in err and "upgraded: every changed store was rebuilt and swapped in" in err
    spec, gen, extras = layout.read_store(state, "revenue")
    assert gen == 1 and "avg_amount" in spec.value_names()
    assert extras["history"]["partial"] is True
    assert extras["history"]["since"] == {"orders": {str(p): o for p, o in DELETED.items()}}
    position, rows = _revenue(state)
    con = duckdb.connect()
    con.execute("CREATE TABLE held (key VARCHAR, amount DOUBLE)")
    low = log.low_offsets("orders")
    con.executemany("INSERT INTO held VALUES (?, ?)", [
        (r.key, r.value["amount"]) for p in range(4)
        for r in log.read("orders", p, low[p], int(position["orders"][str(p)]) + 1)])
    want = {k: (round(s, 6), n, round(a, 6)) for k, s, n, a in con.execute(
        "SELECT key, sum(amount), count(*), avg(amount) FROM held GROUP BY key").fetchall()}
    got = {k: (round(r["revenue"], 6), r["orders"], round(r["avg_amount"], 6)) for k, r in rows.items()}
    assert got == want
    assert sum(n for _, n, _ in got.values()) == 800 - sum(DELETED.values())
