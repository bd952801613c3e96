"""The Arrow Flight SQL face: ``start_flight(gateway, port=…)`` serves ADBC, pandas, polars and JDBC clients.

Flight SQL over gRPC (pyarrow's Flight server; the Flight SQL messages are
ours to read, ``protocol``), one module per job: ``auth`` (token, basic auth,
sessions), ``options`` (the ``x-iq-*`` call headers), ``answers`` (running a
statement and streaming it), ``prepared`` (prepared statements and their
parameters), ``metadata`` and ``sqlinfo`` (the catalog calls), ``errors``
(gateway errors as Flight statuses), ``server`` (the dispatch and
``start_flight``). Every statement goes through the one engine
(``Gateway.sql``) with the same budgets and read-only checks as HTTP and the
PostgreSQL port; ``internals`` is the only module that imports the engine.
"""

from __future__ import annotations

from .auth import FlightAuth, Principal, TokenAuth, UsersAuth
from .limits import FlightLimits
from .server import FlightHandle, start_flight

__all__ = ["start_flight", "FlightHandle", "FlightLimits", "FlightAuth", "TokenAuth", "UsersAuth", "Principal"]
