"""Live answers (issue 46): SUBSCRIBE and SELECT … EMIT CHANGES, run by the engine for every face.

``Gateway.subscribe`` plans the statement (``planner.plan.Subscription``), opens a feed of the store
(``stores.live``: a snapshot at a Position, then every change after it) and hands back a ``Subscription``: the
messages its reader takes (``Change``: insert, upsert, delete, progress, reset), the Position to resume from,
and an end that always says why. The subscription's SQL runs in DuckDB over each batch of changed rows as a
pull query's runs over a scan (``changes.py``); one pump thread per gateway moves every subscription along
(``pump.py``); ``service.py`` counts them against the server's limit.
"""

from __future__ import annotations

from .changes import DELETE, INSERT, OPS, PROGRESS, RESET, UPSERT, Change
from .subscription import OUTBOX_BYTES, Subscription

__all__ = ["Change", "Subscription", "INSERT", "UPSERT", "DELETE", "PROGRESS", "RESET", "OPS", "OUTBOX_BYTES"]
