"""A user's view of the gateway: the stores they may read, the system schema, their limits.

The rule is that a store a user may not read does not exist for that user.
So it is enforced where names come to exist: the catalog a statement is
planned on is the user's (``catalog``), and everything downstream (the
planner's name resolution and did-you-mean suggestions, ``information_schema``
and ``pg_catalog``, DESCRIBE, SHOW TABLES, EXPLAIN, ``system.stores``) only
ever sees that catalog. A forbidden name and a name that does not exist take
the same path (filter, plan, UNKNOWN_STORE) and do the same work: neither
touches a store. ``system.partitions`` rows come from the sources, so they
are asked for the user's stores only; the system schema itself needs the
``system`` grant.

A principal with every grant (the single ``--token``, a server without
authentication) takes none of this: its catalog is the source's own.

``CALLER`` holds the principal of the statement a thread runs, for a routed
source forwarding part of it to a peer in that user's name (the peer checks
the same grants again).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from stores.catalog.schema import StoreSpec
from stores.catalog.streams import Catalog, streams_of

from ..access.principal import LIMIT_NAMES, Principal
from .config import GatewayConfig
from .errors import ForbiddenError

__all__ = ["Grants", "CALLER", "restricted"]

#: the principal of the statement this thread (or task) runs now; None outside a statement or for everything
CALLER: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("iqgate_caller", default=None)

_MAX_VIEWS = 1024  # distinct grant sets remembered (a users file has a handful of roles)
_SETTINGS = tuple(n for n in LIMIT_NAMES if n in {f.name for f in fields(GatewayConfig)})


def restricted(principal: Principal | None) -> bool:
    """Does this principal see less than everything?"""
    return principal is not None and not principal.everything


class Grants:
    """Per-user views for one Gateway: which store names a grant set reads, and the config a user's limits give.

    Both are remembered per grant set / limits (not per user: many users share a role), so the point lane
    checks a name with one dict lookup, not a glob match. Thread-safe (dict reads and writes are atomic; a
    race recomputes the same value).
    """

    def __init__(self) -> None:
        self._readable: dict[tuple[Any, ...], dict[str, bool]] = {}
        self._configs: dict[tuple[Any, ...], GatewayConfig] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(principal: Principal) -> tuple[Any, ...]:
        return (principal.grants, principal.system)

    def can_read(self, principal: Principal | None, store: str) -> bool:
        if not restricted(principal):
            return True
        assert principal is not None
        names = self._readable.get(self._key(principal))
        if names is None:
            with self._lock:
                if len(self._readable) >= _MAX_VIEWS:
                    self._readable.clear()
                names = self._readable.setdefault(self._key(principal), {})
        known = names.get(store)
        if known is None:
            if len(names) > 65_536:  # names are the catalog's: this only bounds a catalog that keeps changing
                names.clear()
            known = names[store] = principal.can_read(store)
        return known

    def catalog(self, principal: Principal | None, full: Mapping[str, StoreSpec]) -> Mapping[str, StoreSpec]:
        """``full`` as ``principal`` sees it: only the stores and streams they may read (the same spec objects; a
        stream is granted by its name, as a store is)."""
        if not restricted(principal):
            return full
        return Catalog({name: spec for name, spec in full.items() if self.can_read(principal, name)},
                       {name: spec for name, spec in streams_of(full).items() if self.can_read(principal, name)})

    def config(self, principal: Principal | None, base: GatewayConfig) -> GatewayConfig:
        """``base`` with the principal's limits as ceilings (a user's limit never raises the server's)."""
        if principal is None:
            return base
        key = (id(base), principal.limits)  # one dict lookup per statement: Limits are frozen values
        cfg = self._configs.get(key)
        if cfg is None:
            tightened = principal.limits.tighten({n: getattr(base, n) for n in _SETTINGS})
            cfg = GatewayConfig.of(base, **tightened) if principal.limits.as_dict() else base
            with self._lock:
                if len(self._configs) >= _MAX_VIEWS:
                    self._configs.clear()
                self._configs[key] = cfg
        return cfg

    @staticmethod
    def check_system(principal: Principal | None, system_tables: Iterable[str]) -> None:
        """The ``system`` schema needs the ``system`` grant (information_schema and pg_catalog do not: they only
        ever show the user's own stores)."""
        if principal is None or principal.can_read_system():
            return
        for key in system_tables:
            if key.startswith("system."):
                raise ForbiddenError(f"permission denied for schema system: user {principal.name!r} may not read "
                                     f"{key} (it needs the 'system' grant)")
