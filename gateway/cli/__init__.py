"""The ``iqgate`` command line: serve | replica | sql | explain | produce | upgrade | demo (one module each)."""

from __future__ import annotations

from ..serving.stopping import request_stop
from .main import console, main

__all__ = ["main", "console", "request_stop"]
