"""Point lanes: a plain point lookup, planned once, bound per call with nothing but its key.

Why: ``WHERE key = ?`` on a key-value store is the statement services and
BI tools send most, and for it the general binding (a StoreScan of
StateQueryRequests, the residual SQL, a Plan) and the engine's general
steps cost several times the one SQLite read that answers it (issue 14).
A lane holds what every call of one statement shares (the store, the key's
type and partitioner, the columns, the text's ``AS OF POSITION`` bound);
``key`` binds a call's parameters exactly as ``plan`` would, or says None
where ``plan`` must decide (a wrong parameter, a key no row can have, a
comparison DuckDB must make). tests/planner/test_point_binding.py holds
every lane to ``plan``'s scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from stores.catalog.partitioner import partition_for_key, partition_for_long
from stores.catalog.schema import SqlType, StoreKind, StoreSpec
from stores.iqv2.position import PositionBound

from .limits import check_param_values
from .literals import NO_MATCH, NOT_PUSHABLE, Const, Param, ValueRef, coerce_bound, resolve
from .plan import StatementKind
from .requests import _point_ref, check_params
from .residual_program import Program
from .template import Template

__all__ = ["PointLane", "lane_of"]

_INT_KEYS = {SqlType.BIGINT: (-(2**63), 2**63 - 1), SqlType.INTEGER: (-(2**31), 2**31 - 1)}  # as coerce_bound clamps


@dataclass(frozen=True, slots=True, eq=False)
class PointLane:
    """One statement's point lookup: ``key(params)`` → ``partition(key)`` → one KeyQuery, rows ``columns``.

    Or, with ``program``, a residual the gateway evaluates over the looked-up row (a filter, an aggregate:
    planner/residual_program.py), as ``plan``'s ``residual_program`` with ``residual_values(params)``.
    """

    store: str
    spec: StoreSpec = field(repr=False)
    timestamped: bool  # a timestamped store: plan sends a TimestampedKeyQuery (the rows carry its timestamp)
    columns: tuple[str, ...] | None  # the store columns the statement answers with, in its order (no program)
    program: Program | None = field(repr=False)
    bound: PositionBound  # the text's AS OF POSITION (unbounded without one)
    deps: tuple[tuple[str, StoreSpec], ...] = field(repr=False)  # the catalog entries the lane was planned on
    template: Template = field(repr=False)
    ref: ValueRef
    constant: Any  # the coerced key of a literal (``WHERE k = 5``), else None
    # a lone ``?`` whose value of this Python type is the key as it is (int keys within ``ints``, ASCII text):
    # what ``coerce_bound`` would answer, without its general steps
    same_type: type | None = None
    ints: tuple[int, int] | None = None

    def key(self, params: Any) -> Any:
        """The call's key as ``plan`` binds it, or None where ``plan`` must decide (it then answers, or says what
        is wrong with the parameters and where). No key is None: SQL's NULL matches no key."""
        if self.constant is not None:
            return None if params else self.constant
        if self.same_type is not None and type(params) in (list, tuple) and len(params) == 1:
            v = params[0]
            if type(v) is self.same_type:
                ints = self.ints
                if ints is not None:
                    if ints[0] <= v <= ints[1]:
                        return v
                elif v.isascii():  # no lone surrogate can be in it (check_param_values' one test of text)
                    return v
        try:
            if params:
                check_param_values(params)
            value, sql_type = resolve(self.ref, check_params(params, self.template))
            key, op = coerce_bound(value, sql_type, self.spec.key.type, "=", column=self.spec.key.name,
                                   what="key column", line=None, col=None)
        except Exception:  # noqa: BLE001 - plan raises it again, with the line and column
            return None
        if key is NO_MATCH or key is NOT_PUSHABLE or op != "=":
            return None
        return key

    def residual_values(self, params: Any) -> tuple[Any, ...]:
        """The program's parameter values, as ``plan`` gives them (call after ``key`` accepted ``params``)."""
        return self.template.slot_values(params)

    def partition(self, key: Any) -> int:
        """The one partition that can hold ``key`` (the partitioner every writer uses)."""
        if self.ints is not None:
            return partition_for_long(key, self.spec.partitions)
        return partition_for_key(key, self.spec.partitions, self.spec.key.type)

    def planned_on(self, catalog: Any) -> bool:
        """Is ``catalog`` (still) what the lane was planned on? A store's new generation or shape is not."""
        for name, spec in self.deps:
            now = catalog.get(name)
            if now is not spec and now != spec:
                return False
        return True


def lane_of(template: Template, bound: PositionBound) -> PointLane | None:
    """The lane of a template that plans as a plain point lookup answered without DuckDB, else None.
    ``bound``: the template's own, as ``plan`` reads it for the default session."""
    if template.kind is not StatementKind.SELECT or template.explain or template.system_tables or len(template.scans) != 1 \
            or template.streams:
        return None
    t = template.scans[0]
    if t.fast_path is not None and t.all_consumed:
        columns, program = t.fast_path, None
    elif template.program is not None:
        columns, program = None, template.program
    else:
        return None
    ref = _point_ref(t)
    if ref is None:
        return None
    spec = t.spec
    ints = _INT_KEYS.get(spec.key.type)
    lone = template.param_mode in ("qmark", "numbered") and template.param_count == 1 and isinstance(ref, Param) \
        and ref.key == 0
    same_type = (int if ints is not None else str if spec.key.type is SqlType.VARCHAR else None) if lone else None
    lane = PointLane(store=t.store, spec=spec, timestamped=spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE,
                     columns=columns, program=program, bound=bound, deps=tuple(template.deps.items()), template=template,
                     ref=ref, constant=None, same_type=same_type, ints=ints)
    if isinstance(ref, Const):
        key = lane.key(None) if template.param_mode is None else None
        if key is None:
            return None  # a literal no key can equal: plan answers (no rows, or the mistake)
        lane = replace(lane, constant=key)
    return lane

