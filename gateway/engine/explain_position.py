"""EXPLAIN POSITION: the Position each store partition of a query was at, the one it would be read at, and why.

Materialize's EXPLAIN TIMESTAMP answers "which moment would this read, and
what held it back"; here the answer comes from the same reads the query
would do (``moment.align``), so it is what the query would see, not a
guess: one row per store partition read, then one row for the statement
(its common Position, how many rounds and how long it took).
"""

from __future__ import annotations

from typing import Any

from .duck import DuckPool
from .moment import Moment, Reader
from .reads import Reads
from .result import Result

__all__ = ["explain_position_result", "COLUMNS"]

COLUMNS = [("store", "VARCHAR"), ("partition", "INTEGER"), ("latest_position", "VARCHAR"),
           ("read_position", "VARCHAR"), ("note", "VARCHAR")]


def explain_position_result(reads: Reads, pool: DuckPool) -> Result:
    moment = reads.moment or Moment()
    rows: list[tuple[Any, ...]] = []
    seen: set[tuple[str, int]] = set()
    held = {(r.store, r.partition) for r in moment.held_back_by}
    late = {(r.store, r.partition) for r in moment.unaligned}
    for reader in sorted(moment.latest, key=lambda r: (r.store, r.partition, r.scan, r.request)):
        where = (reader.store, reader.partition)
        if where in seen:
            continue
        seen.add(where)
        rows.append((reader.store, reader.partition, moment.latest[reader].to_json(),
                     _at(moment, reader), _note(where, held, late, moment)))
    rows.append((None, None, None, reads.position.to_json(), _summary(moment)))
    return Result.in_hand(list(COLUMNS), rows, reads.position, reads.partitions, pool=pool, route="explain position")


def _at(moment: Moment, reader: Reader) -> str | None:
    at = moment.read_at.get(reader)
    return None if at is None else at.to_json()


def _note(where: tuple[str, int], held: set[tuple[str, int]], late: set[tuple[str, int]], moment: Moment) -> str:
    if where in late:
        return "not at the common Position: no common Position was found in time"
    if where in held:
        return "held the statement back: the other stores were read as of its Position"
    if moment.rounds:
        return "read as of the common Position"
    return "at its latest"


def _summary(moment: Moment) -> str:
    if not moment.targets:
        return "no two reads share a source topic-partition: each store partition is read at its latest"
    common = moment.common.to_json()
    if not moment.rounds:
        return f"every read was at the common Position {common}"
    held = ", ".join(sorted({f"{r.store!r} partition {r.partition}" for r in moment.held_back_by}))
    if not moment.aligned:
        return (f"no common Position within {moment.waited_ms:.0f} ms ({moment.rounds} round(s)); the statement "
                f"would fail with NO_COMMON_POSITION")
    return (f"common Position {common} after {moment.rounds} round(s) in {moment.waited_ms:.1f} ms; "
            f"held back by {held}")
