"""One statement, one moment: the reads of a statement brought to one input Position (issue 47).

Each store partition answers at its own latest Position, so two stores fed
by different streaming queries can be a micro-batch apart, and a join of
them mixes two moments of the input. Wherever two reads of a statement
cover the same source topic-partition (a join of two stores over
``orders``, a self-join, two lookups of one partition), ``align`` makes
them agree on it:

1. Read everything at its latest (what ``read_scans`` did already): most of
   the time the reads agree and this costs nothing more.
2. Per disagreeing topic-partition, the target is the lowest offset read
   (the store that is behind holds the statement back). Every read past it
   is asked again *as of* the target: a store partition keeps its recent
   past (``stores/engine/history.py``) and answers from it, so nobody waits.
   The pipeline's sources cut every query's micro-batches at the same
   offsets (``stores/pipeline/batch_cuts.py``), so the lagging store's Position is
   one the leading store passed through.
3. A store that does not keep that Position (it was not on the shared
   cuts, or its history was pruned) answers ``POSITION_NOT_KEPT``; then the
   target moves up to it and the stores behind are waited for: read again at
   their latest until they move, when the target comes down to where they got
   (their next batch usually ends on a cut the stores ahead went through, so
   the stores ahead are read as of it), within the statement's wait.

When no common Position is found in time the statement fails with
``NoCommonPositionError`` (retryable), or with partial results the reads
that are not at it become failure rows. The ``Moment`` says what happened:
EXPLAIN POSITION shows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stores.iqv2.position import Position
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import FailureReason, QueryResult, StateQueryResult

from .errors import NoCommonPositionError
from .guards import StatementWatch
from .scans import Answers, query_store
from .sources import Source

__all__ = ["Reader", "Moment", "align", "unaligned_error", "mark_unaligned"]

_MIN_PAUSE_S = 0.002
_MAX_PAUSE_S = 0.05
_MAX_ROUNDS = 1_000  # bounded; the statement's clock ends it long before

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True, order=True)
class Reader:
    """One store partition's answer within a statement: scan ``scan``'s request ``request``, partition ``partition``."""

    scan: int
    request: int
    partition: int
    store: str


@dataclass
class Moment:
    """How a statement's reads came to one Position (what EXPLAIN POSITION shows, what the error names)."""

    latest: dict[Reader, Position] = field(default_factory=dict)   # each read's Position as first read
    read_at: dict[Reader, Position] = field(default_factory=dict)  # and the Position it was answered at
    targets: dict[TopicPartition, int] = field(default_factory=dict)  # the chosen offset per shared topic-partition
    held_back_by: list[Reader] = field(default_factory=list)  # the reads at the target when it was chosen
    rounds: int = 0
    waited_ms: float = 0.0
    aligned: bool = True
    slept: bool = False  # a store behind the target was waited for (not only read as of an earlier Position)
    unaligned: list[Reader] = field(default_factory=list)  # reads not at the target when the time ran out

    @property
    def common(self) -> Position:
        """The chosen offsets as a Position (empty when no two reads shared a topic-partition)."""
        out: dict[str, dict[int, int]] = {}
        for (topic, p), off in sorted(self.targets.items()):
            out.setdefault(topic, {})[p] = off
        return Position.from_map(out)


def _readers(answers: Sequence[Answers], stores: Sequence[str]) -> dict[Reader, QueryResult]:
    out: dict[Reader, QueryResult] = {}
    for i, scan_answers in enumerate(answers):
        for j, (_, result) in enumerate(scan_answers):
            for p, qr in result.partition_results.items():
                out[Reader(i, j, p, stores[i])] = qr
    return out


def _components(position: Position | None) -> list[tuple[TopicPartition, int]]:
    if position is None:
        return []
    return [((topic, p), off) for topic in position.topics() for p, off in position.partition_positions(topic).items()]


def _shared(readers: dict[Reader, QueryResult]) -> dict[TopicPartition, dict[Reader, int]]:
    """Topic-partitions that two or more answered reads cover, with each read's offset on it."""
    groups: dict[TopicPartition, dict[Reader, int]] = {}
    for reader, qr in readers.items():
        if qr.is_failure:
            continue
        for tp, off in _components(qr.position):
            groups.setdefault(tp, {})[reader] = off
    return {tp: offs for tp, offs in groups.items() if len(offs) > 1}


def align(source: Source, answers: list[Answers], stores: Sequence[str], watch: StatementWatch,
          wait_until: float, close: Callable[[QueryResult], None]) -> Moment:
    """Bring ``answers`` (per scan, its requests' answers; replaced in place) to one Position where reads share a
    topic-partition, waiting at most until ``wait_until`` (monotonic seconds). ``close`` ends a replaced answer's
    snapshot (an Arrow stream holds a read transaction)."""
    moment = Moment()
    readers = _readers(answers, stores)
    groups = _shared(readers)
    for reader, qr in readers.items():
        if qr.position is not None:
            moment.latest[reader] = moment.read_at[reader] = qr.position
    if not groups or all(len(set(offs.values())) == 1 for offs in groups.values()):
        moment.targets = {tp: next(iter(offs.values())) for tp, offs in groups.items()}
        return moment
    members = {tp: set(offs) for tp, offs in groups.items()}  # every read that takes part, whatever it answers
    targets = {tp: min(offs.values()) for tp, offs in groups.items()}
    moment.held_back_by = sorted({r for tp, offs in groups.items() for r, off in offs.items() if off == targets[tp]})
    pause = _MIN_PAUSE_S
    started = time.monotonic()
    for _ in range(_MAX_ROUNDS):
        moment.rounds += 1
        readers = _readers(answers, stores)
        raised = _raise_past_unkept(readers, members, targets)
        stale = _not_at_target(readers, members, targets)
        if not stale:
            break
        now = time.monotonic()
        if now >= wait_until or not watch.alive():
            moment.aligned = False
            break
        if not raised and all(readers[r].is_failure for r in stale):  # nobody can go back: wait for those behind
            moment.slept = True
            time.sleep(min(pause, max(0.0, wait_until - now)))
            pause = min(pause * 2, _MAX_PAUSE_S)
            # Those behind are read at their latest, and the target comes down to where they got: a store behind
            # usually ends its next batch on a cut the stores ahead went through (batch_cuts.py), so that is where
            # they meet. Waiting for it to land exactly on the raised target could take batch after batch.
            _read_again(source, answers, stale, None, close)
            _lower_to_reached(_readers(answers, stores), members, targets)
            continue
        _read_again(source, answers, stale, _position(targets), close)
    moment.targets = dict(targets)
    moment.waited_ms = (time.monotonic() - started) * 1000
    readers = _readers(answers, stores)
    moment.unaligned = sorted(_not_at_target(readers, members, targets)) if not moment.aligned else []
    for reader, qr in readers.items():
        if qr.position is not None:
            moment.read_at[reader] = qr.position
    return moment


def _raise_past_unkept(readers: dict[Reader, QueryResult], members: dict[TopicPartition, set[Reader]],
                       targets: dict[TopicPartition, int]) -> bool:
    """A read that cannot go back to the target (its store does not keep it) moves the target up to where it is;
    True when a target moved."""
    raised = False
    for tp, group in members.items():
        for reader in group:
            qr = readers[reader]
            if qr.is_failure and qr.failure_reason is FailureReason.POSITION_NOT_KEPT:
                off = dict(_components(qr.position)).get(tp)
                if off is not None and off > targets[tp]:
                    targets[tp] = off
                    raised = True
    return raised


def _lower_to_reached(readers: dict[Reader, QueryResult], members: dict[TopicPartition, set[Reader]],
                      targets: dict[TopicPartition, int]) -> None:
    """A target down to the lowest offset a read answered at, where a read behind it moved on but not to it."""
    for tp, group in members.items():
        offs = [off for r in group if not readers[r].is_failure
                for off in [dict(_components(readers[r].position)).get(tp)] if off is not None]
        if offs and min(offs) < targets[tp]:
            targets[tp] = min(offs)


def _not_at_target(readers: dict[Reader, QueryResult], members: dict[TopicPartition, set[Reader]],
                   targets: dict[TopicPartition, int]) -> set[Reader]:
    """The reads that must be asked again: answered elsewhere than the target, or behind it, or not keeping it
    (a failure of another kind is the statement's, as without alignment)."""
    out: set[Reader] = set()
    for tp, group in members.items():
        for reader in group:
            qr = readers[reader]
            if qr.is_failure and qr.failure_reason not in (FailureReason.NOT_UP_TO_BOUND,
                                                           FailureReason.POSITION_NOT_KEPT):
                continue
            if qr.is_failure or dict(_components(qr.position)).get(tp) != targets[tp]:
                out.add(reader)
    return out


def _position(targets: dict[TopicPartition, int]) -> Position:
    out: dict[str, dict[int, int]] = {}
    for (topic, p), off in targets.items():
        out.setdefault(topic, {})[p] = off
    return Position.from_map(out)


def _read_again(source: Source, answers: list[Answers], stale: set[Reader], at: Position | None,
                close: Callable[[QueryResult], None]) -> None:
    """Ask the stale reads again as of ``at`` (None: at their latest), one request per (scan, request) for just
    their partitions."""
    by_request: dict[tuple[int, int], set[int]] = {}
    for r in stale:
        by_request.setdefault((r.scan, r.request), set()).add(r.partition)
    for (i, j), parts in sorted(by_request.items()):
        request, result = answers[i][j]
        again: StateQueryRequest = request.with_partitions(parts).with_snapshot(at)
        _, fresh = query_store(source, again)
        merged = dict(result.partition_results)
        for p, qr in fresh.partition_results.items():
            old = merged.get(p)
            if old is not None:
                close(old)
            merged[p] = qr
        answers[i][j] = (request, StateQueryResult.of(merged, result.global_result))


def unaligned_error(moment: Moment) -> NoCommonPositionError:
    """NO_COMMON_POSITION naming each store partition that was not at the chosen Position, and where it was."""
    common = moment.common.to_json()
    parts = []
    for r in moment.unaligned:
        at = moment.read_at.get(r)
        parts.append({"store": r.store, "partition": r.partition, "failure_reason": "NO_COMMON_POSITION",
                      "failure_message": f"at {at.to_json() if at is not None else 'no Position'}, not {common}",
                      "retryable": True})
    named = "; ".join(f"store {p['store']!r} partition {p['partition']} {p['failure_message']}" for p in parts)
    return NoCommonPositionError(
        f"no common Position of the stores this statement reads within {moment.waited_ms:.0f} ms "
        f"({moment.rounds} round(s)): {named}. A store may be stopped, rebuilding or too far behind; retry, wait "
        "longer (SET wait_for_bound_ms), or read each store at its latest (SET consistency = 'eventual')",
        partitions=parts)


def mark_unaligned(answers: list[Answers], moment: Moment, close: Callable[[QueryResult], None]) -> None:
    """With partial results: the reads not at the common Position become failure rows, so no row of another
    moment is in the answer."""
    common = moment.common.to_json()
    for r in moment.unaligned:
        request, result = answers[r.scan][r.request]
        merged = dict(result.partition_results)
        old = merged[r.partition]
        close(old)
        reason = old.failure_reason if old.is_failure else FailureReason.POSITION_NOT_KEPT
        merged[r.partition] = QueryResult.for_failure(
            reason, f"NO_COMMON_POSITION: read at {old.position.to_json() if old.position else 'no Position'}, "
                    f"not at the statement's Position {common}", old.position)
        answers[r.scan][r.request] = (request, StateQueryResult.of(merged, result.global_result))
