"""Who is asking, and what they may read: a Principal with its grants (store globs, the system schema) and limits.

A Principal is a snapshot: the faces ask ``Users.principal(name)`` (or
``authenticate_token``) once per statement, so a grant revoked in the users
file takes effect at the next statement even on a long-lived PG connection,
and one statement never sees its grants change half-way.

Store names match their globs case-insensitively, as the catalog resolves
names; ``*`` matches every store but never the system schema, which only the
grant ``system`` opens.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

__all__ = ["Principal", "Limits", "SYSTEM_GRANT", "LIMIT_NAMES", "check_pattern"]

SYSTEM_GRANT = "system"
_PATTERN = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]{1,200}$")


def check_pattern(pattern: str) -> str:
    """The grant ``pattern`` as stored (lower case), or ValueError saying what a pattern may hold."""
    if not isinstance(pattern, str) or not _PATTERN.match(pattern):
        raise ValueError(f"a grant is a store-name glob (letters, digits, _ . - and * ? [ ] !, at most 200) "
                         f"or {SYSTEM_GRANT!r}; got {pattern!r}")
    return pattern.lower()


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-user ceilings; None leaves the server's own setting. Names match GatewayConfig's fields.

    ``concurrent_statements`` is enforced by Admission; the rest are ceilings a
    statement's settings are clamped to (a user may ask for less, never more).
    """

    concurrent_statements: int | None = None
    statement_timeout_ms: int | None = None
    max_memory_bytes: int | None = None
    max_rows: int | None = None
    max_response_bytes: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise ValueError(f"limit {f.name} must be a positive integer, got {v!r}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object], where: str) -> Limits:
        unknown = sorted(set(raw) - set(LIMIT_NAMES))
        if unknown:
            raise ValueError(f"{where}: unknown limit(s) {', '.join(unknown)}; known: {', '.join(LIMIT_NAMES)}")
        try:
            return cls(**raw)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def over(self, defaults: Limits) -> Limits:
        """These limits, with ``defaults`` where these leave one unset."""
        return Limits(**{**defaults.as_dict(), **self.as_dict()})

    def tighten(self, settings: Mapping[str, int]) -> dict[str, int]:
        """``settings`` (e.g. GatewayConfig's values) lowered to these ceilings, for the keys both name.

        ``GatewayConfig.of(cfg, **principal.limits.tighten({n: getattr(cfg, n) for n in LIMIT_NAMES if hasattr(cfg, n)}))``
        """
        return {name: min(value, getattr(self, name)) if getattr(self, name) is not None else value
                for name, value in settings.items() if name in LIMIT_NAMES}


LIMIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Limits))


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated user: name, store grants (lower-case globs), the system grant, limits.

    ``everything`` is the single-token and unauthenticated modes' user: every
    store and the system schema, as before users existed.
    """

    name: str
    grants: tuple[str, ...] = ()
    system: bool = False
    limits: Limits = field(default_factory=Limits)
    everything: bool = False
    roles: tuple[str, ...] = ()
    _match: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.grants and not self.everything:
            joined = "|".join(f"(?:{fnmatch.translate(g.lower())})" for g in self.grants)
            object.__setattr__(self, "_match", re.compile(joined))

    @classmethod
    def all_grants(cls, name: str, limits: Limits | None = None) -> Principal:
        return cls(name, ("*",), True, limits or Limits(), everything=True)

    def can_read(self, store: str) -> bool:
        """May this user read the store named ``store`` (its bare catalog name)?"""
        if self.everything:
            return True
        return self._match is not None and self._match.match(store.lower()) is not None

    def can_read_system(self) -> bool:
        return self.everything or self.system

    def readable(self, stores: Iterable[str]) -> list[str]:
        """The names in ``stores`` this user may read, in their order (what catalogs and listings show)."""
        return [s for s in stores if self.can_read(s)]
