"""Which partitions of each store an app instance serves: active (hosted) and standby.

Kept as plain validated maps so the app can swap them atomically on a
rebalance; everything else (NOT_PRESENT, NOT_ACTIVE, handle partitions)
is derived from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..catalog.schema import StoreSpec

__all__ = ["Hosting", "check_partitions", "initial_hosting", "reassigned"]

Hosting = tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]


def check_partitions(
    specs: Mapping[str, StoreSpec], given: Mapping[str, Iterable[int]] | None, what: str
) -> dict[str, frozenset[int]]:
    """Validate ``{store: partitions}``: known stores, partition numbers in range."""
    out: dict[str, frozenset[int]] = {}
    for name, parts in (given or {}).items():
        spec = specs.get(name)
        if spec is None:
            raise ValueError(f"{what}: unknown store {name!r}; stores are {sorted(specs)}")
        ps = frozenset(parts)
        bad = sorted(p for p in ps if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < spec.partitions)
        if bad:
            raise ValueError(f"{what}: store {name!r} has partitions 0..{spec.partitions - 1}, got {bad}")
        out[name] = ps
    return out


def _no_overlap(specs: Mapping[str, StoreSpec], hosting: Hosting) -> Hosting:
    hosted, standby = hosting
    for n in specs:
        both = sorted(hosted[n] & standby[n])
        if both:
            raise ValueError(f"store {n!r}: partitions {both} cannot be both hosted (active) and standby")
    return hosting


def initial_hosting(
    specs: Mapping[str, StoreSpec], hosted: Mapping[str, Iterable[int]] | None,
    standby: Mapping[str, Iterable[int]] | None,
) -> Hosting:
    """A store not named in ``hosted`` hosts every partition that is not a standby."""
    h = check_partitions(specs, hosted, "hosted_partitions")
    s = check_partitions(specs, standby, "standby_partitions")
    for n, spec in specs.items():
        s.setdefault(n, frozenset())
        h.setdefault(n, frozenset(range(spec.partitions)) - s[n])
    return _no_overlap(specs, (h, s))


def reassigned(
    specs: Mapping[str, StoreSpec], current: Hosting, hosted: Mapping[str, Iterable[int]] | None,
    standby: Mapping[str, Iterable[int]] | None,
) -> Hosting:
    """``current`` with the named stores' partitions replaced; others unchanged."""
    new_h = check_partitions(specs, hosted, "hosted")
    new_s = check_partitions(specs, standby, "standby")
    old_h, old_s = current
    return _no_overlap(specs, ({n: new_h.get(n, old_h[n]) for n in specs}, {n: new_s.get(n, old_s[n]) for n in specs}))
