"""iqgate's client: a PEP 249 driver over HTTP, the SQLAlchemy dialect ``iqgate://``, a Superset engine spec.

It imports nothing of the server (no sqlglot, DuckDB, pyspark, Flask or
waitress), so a BI host such as Superset can install it beside its own pins::

    pip install 'iqgate-client[superset]'

>>> from iqgate_client import connect                       # doctest: +SKIP
>>> cur = connect("http://127.0.0.1:8080").cursor()        # doctest: +SKIP
>>> cur.execute("SELECT revenue FROM main.revenue WHERE key = ?", ["c0077"]).fetchall()  # doctest: +SKIP
"""

from __future__ import annotations

from .dbapi import connect
from .errors import Error, GatewayError
from .position import Position

__all__ = ["connect", "Position", "Error", "GatewayError"]
