"""Shared batch cuts (issue 47): the rule, the ledger from several processes, and both sources' readers. No Spark.

The processes play the Python workers that plan each streaming query's batches (one per query in PySpark 4):
they plan against one real ledger file while a producer keeps appending, some of them catching up under a read
limit. Whatever the interleaving, the recorded cuts never go backwards, a limited planner never reads past its
limit, nobody ends past what the log holds, and the planners end mostly on the same cuts.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from stores import EventLog, KafkaSource
from stores.pipeline.batch_cuts import (
    LEDGER_OPTION,
    LEDGER_REF_OPTION,
    MAX_AGE_CAP_S,
    MAX_AGE_OPTION,
    Cut,
    CutLedger,
    SharedCuts,
    TopicPlan,
    batch_ends,
    bind_ledger_ref,
    choose_end,
    new_ledger_ref,
    prepare_ledger,
    unbind_ledger_ref,
)
from stores.pipeline.iqlog_source import EPOCHS_KEY, IqLogStreamReader
from stores.pipeline.kafka_source import IqKafkaStreamReader
from stores.pipeline.stream_rows import parse_value_schema, stream_schema
from tests.stores.pipeline.cut_planners import PARTS, appender, planner

T0 = 1_000_000.0


def _plan(start: dict[int, int], own: dict[int, int], budget: int | None = None,
          available: dict[int, int] | None = None) -> TopicPlan:
    return TopicPlan("orders", "e1", start, own if available is None else available, own, budget)


def _ge(a: dict[int, int], b: dict[int, int]) -> bool:
    return all(a.get(p, 0) >= b.get(p, 0) for p in set(a) | set(b))


# -- the rule ---------------------------------------------------------------------------------------------------
def test_the_oldest_fresh_cut_ahead_of_start_is_taken_rather_than_what_is_available() -> None:
    cuts = [Cut(3, T0 - 0.1, {0: 30, 1: 30}), Cut(2, T0 - 0.2, {0: 20, 1: 20})]
    # two fresh cuts ahead: the older one, so this query's store also holds the Position a store at it holds
    assert choose_end(_plan({0: 10, 1: 10}, {0: 40, 1: 41}), cuts, cuts[0], T0, T0, 1.0) == ({0: 20, 1: 20}, False)
    # and from there the next one
    assert choose_end(_plan({0: 20, 1: 20}, {0: 40, 1: 41}), cuts, cuts[0], T0, T0, 1.0) == ({0: 30, 1: 30}, False)
    # the older cut stale (past the age limit), the newer fresh: the fresh one
    assert choose_end(_plan({0: 10, 1: 10}, {0: 40, 1: 41}), cuts, cuts[0], T0, T0 + 0.85, 1.0) == \
        ({0: 30, 1: 30}, False)
    # at the newest cut already: nothing ahead, so it ends on what is available and records that
    assert choose_end(_plan({0: 30, 1: 30}, {0: 40, 1: 41}), cuts, cuts[0], T0, T0, 1.0) == ({0: 40, 1: 41}, True)
    # a cut older than the age limit is stale: not taken, and what is available becomes the next cut
    assert choose_end(_plan({0: 10, 1: 10}, {0: 40, 1: 41}), cuts, cuts[0], T0, T0 + 2, 1.0) == ({0: 40, 1: 41}, True)
    # nothing new at all: the end is the start, recorded only if it is not the newest cut already
    assert choose_end(_plan({0: 30, 1: 30}, {0: 30, 1: 30}), cuts, cuts[0], T0, T0, 1.0) == ({0: 30, 1: 30}, False)
    # an empty ledger: the first cut
    assert choose_end(_plan({0: 0}, {0: 5}), [], None, T0, T0, 1.0) == ({0: 5}, True)


def test_a_slow_query_takes_cuts_as_old_as_two_of_its_cycles(tmp_path: Path) -> None:
    """A query whose batches take 3 s takes the cut another query recorded 2.5 s ago (with a fixed 1 s limit it
    took none, ended on its own offsets, and its store shared no Position with the other's)."""
    cuts = SharedCuts(None, None, 1.0, "test")
    assert cuts.age_limit(100.0) == 1.0  # first plan: no cycle known yet
    assert cuts.age_limit(103.0) == 6.0  # a 3 s cycle: two of them
    assert cuts.age_limit(103.2) == 1.0  # keeping up again: the configured limit
    assert cuts.age_limit(1_000.0) == MAX_AGE_CAP_S  # a query that stalled for minutes: capped
    ledger = CutLedger(tmp_path / "ledger.db")
    try:
        assert ledger.plan([_plan({0: 0}, {0: 10})]) == {"orders": {0: 10}}  # the fast query records a cut
        time.sleep(0.3)
        slow = [_plan({0: 0}, {0: 25})]
        assert ledger.plan(slow, max_age_s=0.2) == {"orders": {0: 25}}  # too old for this limit: its own, recorded
        ledger2 = CutLedger(tmp_path / "ledger2.db")
        try:
            ledger2.plan([_plan({0: 0}, {0: 10})])
            time.sleep(0.3)
            assert ledger2.plan(slow, max_age_s=6.0) == {"orders": {0: 10}}  # within two cycles: the shared cut
        finally:
            ledger2.close()
    finally:
        ledger.close()


def test_a_cut_behind_start_in_any_partition_or_over_other_partitions_is_not_taken() -> None:
    cuts = [Cut(2, T0, {0: 30, 1: 30})]
    # start passed the cut in partition 1 (its own ends while catching up): the cut is not ahead
    end, record = choose_end(_plan({0: 10, 1: 35}, {0: 40, 1: 40}), cuts, cuts[0], T0, T0, 1.0)
    assert (end, record) == ({0: 40, 1: 40}, True)
    # a partition added since the cut: the cut does not say where that partition ends
    end, record = choose_end(_plan({0: 10, 1: 10}, {0: 40, 1: 40, 2: 3}), cuts, cuts[0], T0, T0, 1.0)
    assert (end, record) == ({0: 40, 1: 40, 2: 3}, True)


def test_a_read_limit_is_never_exceeded_and_a_catching_up_query_keeps_its_own_ends() -> None:
    cuts = [Cut(5, T0, {0: 500, 1: 500}), Cut(4, T0 - 0.1, {0: 60, 1: 40})]
    # 100 records allowed past start: the newest cut is 1000 away, the older one 100: it is taken
    end, record = choose_end(_plan({0: 0, 1: 0}, {0: 50, 1: 50}, budget=100, available={0: 900, 1: 900}),
                             cuts, cuts[0], T0, T0, 1.0)
    assert (end, record) == ({0: 60, 1: 40}, False)
    # 99 allowed: no cut fits; its own limited ends, not recorded (they are behind the newest cut)
    end, record = choose_end(_plan({0: 0, 1: 0}, {0: 50, 1: 49}, budget=99, available={0: 900, 1: 900}),
                             cuts, cuts[0], T0, T0, 1.0)
    assert (end, record) == ({0: 50, 1: 49}, False)


def test_a_cut_beyond_what_the_reader_saw_is_trusted_only_if_recorded_after_it_looked() -> None:
    cut = Cut(2, T0, {0: 50})
    # recorded after the reader read the log's ends: another planner saw more of the same log
    assert choose_end(_plan({0: 10}, {0: 45}), [cut], cut, T0 - 0.01, T0 + 0.01, 1.0) == ({0: 50}, False)
    # recorded before it looked, yet beyond what it saw: not this log (a recreated topic); its own ends, unrecorded
    assert choose_end(_plan({0: 10}, {0: 45}), [cut], cut, T0 + 0.01, T0 + 0.02, 1.0) == ({0: 45}, False)


def test_the_ledger_keeps_a_sequence_per_topic_incarnation_and_prunes_old_cuts(tmp_path: Path) -> None:
    ledger = CutLedger(tmp_path / "ledger.db", keep=5)
    try:
        for i in range(1, 12):
            assert ledger.plan([TopicPlan("orders", "e1", {0: i - 1}, {0: i}, {0: i})]) == {"orders": {0: i}}
        assert [c.ends[0] for c in ledger.cuts("orders")] == [7, 8, 9, 10, 11]
        # the topic recreated (a new epoch): its offsets start over, and so does its sequence
        assert ledger.plan([TopicPlan("orders", "e2", {0: 0}, {0: 2}, {0: 2})]) == {"orders": {0: 2}}
        assert [(c.seq, c.ends) for c in ledger.cuts("orders")] == [(12, {0: 2})]
    finally:
        ledger.close()


def test_a_ledger_that_cannot_be_used_never_fails_the_query(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "ledger.db"
    bad.write_bytes(b"this is not a SQLite database" * 100)
    cuts = SharedCuts(str(bad), None, 1.0, "iqlog")
    plan = TopicPlan("orders", "e1", {0: 0}, {0: 7}, {0: 7})
    assert cuts.ends([plan], time.time()) == {"orders": {0: 7}}
    assert "cannot be used" in capsys.readouterr().err
    prepare_ledger(bad)  # what the runtime does at start: a damaged ledger starts over (it holds nothing needed)
    assert cuts.ends([plan], time.time()) == {"orders": {0: 7}} and capsys.readouterr().err == ""
    assert [c.ends for c in CutLedger(bad).cuts("orders")] == [{0: 7}]
    # a reference the runtime has not written yet: planned alone, quietly
    ref = new_ledger_ref()
    pending = SharedCuts(None, str(ref), 1.0, "iqlog")
    assert pending.ends([plan], time.time()) == {"orders": {0: 7}} and capsys.readouterr().err == ""
    bind_ledger_ref(ref, tmp_path / "good" / "ledger.db")
    try:
        assert pending.ends([plan], time.time()) == {"orders": {0: 7}}
        assert [c.ends for c in CutLedger(tmp_path / "good" / "ledger.db").cuts("orders")] == [{0: 7}]
    finally:
        pending.close()
        unbind_ledger_ref(ref)
    assert not ref.exists()
    with pytest.raises(ValueError, match="cutMaxAgeMs must be a number"):
        SharedCuts.from_options({LEDGER_OPTION: str(bad), MAX_AGE_OPTION: "soon"}, "iqlog")
    assert SharedCuts.from_options({}, "iqlog") is None


def test_batch_ends_shares_a_limit_over_topics() -> None:
    avail = {("a", 0): (0, 100), ("b", 0): (0, 3)}
    assert batch_ends(["a", "b"], avail, 10, None, {}, time.time()) == {"a": {"0": 7}, "b": {"0": 3}}
    assert batch_ends(["a", "b"], avail, None, None, {}, time.time()) == {"a": {"0": 100}, "b": {"0": 3}}


# -- planners in several processes ------------------------------------------------------------------------------
def test_concurrent_planners_never_record_a_cut_backwards_nor_pass_a_limit(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")  # the test process may hold a JVM's threads: never fork it
    ends = ctx.Array("q", PARTS)
    out = ctx.Queue()
    ledger = str(tmp_path / "ledger.db")
    CutLedger(ledger).plan([])  # the file exists before the processes race to create it (they may, too)
    limits = [(None, False, 1), (None, False, 2), (None, False, 3), (40, True, 4), (None, True, 5)]
    go = ctx.Barrier(len(limits) + 1, timeout=120)
    procs = [ctx.Process(target=appender, args=(ends, go))]
    procs += [ctx.Process(target=planner, args=(ledger, ends, lim, zero, go, seed, out))
              for lim, zero, seed in limits]
    try:
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in limits]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    recorded = CutLedger(ledger).cuts("orders")
    assert len(recorded) > 20
    for a, b in zip(recorded, recorded[1:]):  # the sequence never goes backwards
        assert b.seq == a.seq + 1 and _ge(b.ends, a.ends) and b.ends != a.ends
    cut_ends = [c.ends for c in recorded]
    shared = total = 0
    for limit, batches in results:
        assert batches
        for start, end, _seen, after in batches:
            assert _ge(end, start)  # a query's batches never go backwards
            assert _ge(after, end)  # nobody ends past what the log holds
            if limit is not None:
                assert sum(end[p] - start[p] for p in end) <= limit
            if limit is None and end != start:
                total += 1
                shared += end in cut_ends
    # unlimited planners end on cuts of the one sequence (those from zero after their first, catch-up batch)
    assert shared >= 0.9 * total, (shared, total)


# -- the readers --------------------------------------------------------------------------------------------------
def _iqlog(root: Path, ledger: Path | None, **opts: str) -> IqLogStreamReader:
    schema = stream_schema(parse_value_schema("amount DOUBLE"))
    extra = {LEDGER_OPTION: str(ledger)} if ledger is not None else {}
    return IqLogStreamReader(schema, {"path": str(root), "topics": "orders", **extra, **opts})


def _append(log: Any, n: int) -> None:
    log.append_batch("orders", [(f"k{i}", {"amount": 1.0}, None) for i in range(n)])


def test_two_iqlog_readers_end_on_the_same_cut_and_a_replayed_start_is_left_alone(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=2)
    _append(log, 20)
    ledger = tmp_path / "state" / "ledger.db"
    a, b = _iqlog(log.root, ledger), _iqlog(log.root, ledger)
    alone = _iqlog(log.root, None)
    try:
        start = a.initialOffset()
        end_a = a.latestOffset(start, ReadAllAvailable())
        _append(log, 10)  # more arrives before the other query plans
        assert b.latestOffset(start, ReadAllAvailable()) == end_a  # the same cut
        assert alone.latestOffset(start, ReadAllAvailable())["orders"] != end_a["orders"]  # sharing off: its own
        end_b = b.latestOffset(end_a, ReadAllAvailable())  # at the newest cut: the new records, a new cut
        assert sum(end_b["orders"].values()) == 30 and end_b[EPOCHS_KEY] == end_a[EPOCHS_KEY]
        assert a.latestOffset(end_a, ReadAllAvailable()) == end_b
        # a start Spark replays from its checkpoint (no cut of the ledger): planned from, never pulled back
        odd = {"orders": {"0": 1, "1": 0}, EPOCHS_KEY: end_a[EPOCHS_KEY]}
        assert a.latestOffset(odd, ReadAllAvailable()) == end_a  # the oldest fresh cut ahead of it
        # a catching-up query under a read limit: its own ends, never recorded (behind the newest cut), until it
        # joins the sequence
        limited = _iqlog(log.root, ledger, maxRecordsPerBatch="7")
        s, steps = limited.initialOffset(), 0
        while s["orders"] != end_b["orders"] and steps < 10:
            e = limited.latestOffset(s, limited.getDefaultReadLimit())
            assert sum(e["orders"][p] - s["orders"][p] for p in e["orders"]) <= 7
            s, steps = e, steps + 1
        assert s["orders"] == end_b["orders"] and steps == 5  # 30 records, at most 7 a batch
        assert [c.ends for c in CutLedger(ledger).cuts("orders")] == [
            {int(p): o for p, o in e["orders"].items()} for e in (end_a, end_b)]
        limited.stop()
    finally:
        for r in (a, b, alone):
            r.stop()


def test_two_kafka_readers_end_on_the_same_cut(kafka_broker: Any, tmp_path: Path) -> None:
    src = KafkaSource(kafka_broker.bootstrap_servers)
    topic = f"cuts-{uuid.uuid4().hex[:8]}"
    src.create_topic(topic, 2)
    schema = stream_schema(parse_value_schema("n BIGINT"), "string")
    ref = new_ledger_ref()
    bind_ledger_ref(ref, tmp_path / "ledger.db")
    opts = {"bootstrapServers": kafka_broker.bootstrap_servers, "topics": topic, "valueSchema": "n BIGINT",
            LEDGER_REF_OPTION: str(ref)}
    a, b = IqKafkaStreamReader(schema, opts), IqKafkaStreamReader(schema, opts)
    try:
        src.append_batch(topic, [(f"k{i}", {"n": i}, None) for i in range(6)])
        start = a.initialOffset()
        end_a = a.latestOffset(start, ReadAllAvailable())
        src.append_batch(topic, [(f"k{i}", {"n": i}, None) for i in range(4)])
        assert b.latestOffset(start, ReadAllAvailable()) == end_a
        end_b = b.latestOffset(end_a, ReadMaxRows(100))
        assert sum(end_b[topic].values()) == 10
        assert a.latestOffset(end_a, ReadAllAvailable()) == end_b
    finally:
        a.stop()
        b.stop()
        unbind_ledger_ref(ref)
        src.close()
