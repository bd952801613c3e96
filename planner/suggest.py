"""Did-you-mean: the known name closest to a typo, by edit distance (a swap counts as one edit).

difflib's similarity ratio ranks ``wsum`` as close to ``sumz`` as ``sums``; one
substitution is what a typo usually is, so edits decide, then a shared
prefix, then the alphabet. Names longer than 64 characters get no suggestion
(comparing them costs more than it could help).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest"]

_MAX_LEN = 64


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate within ``max(1, len(name) // 3)`` edits of ``name`` (case-insensitive), or None."""
    if len(name) > _MAX_LEN:
        return None
    low = name.lower()
    limit = max(1, len(low) // 3)
    best: tuple[int, int, str] | None = None
    for cand in candidates:
        c = cand.lower()
        if abs(len(c) - len(low)) > limit or len(c) > _MAX_LEN:
            continue
        d = _distance(low, c, limit)
        if d > limit:
            continue
        key = (d, -_common_prefix(low, c), cand)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance (Damerau-Levenshtein with adjacent swaps), stopped past ``limit``."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]
