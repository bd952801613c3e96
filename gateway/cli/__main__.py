"""``python -m gateway.cli``: what serving processes are started as."""

from __future__ import annotations

from .main import console

console()
