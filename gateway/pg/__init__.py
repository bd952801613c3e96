"""The PostgreSQL wire face: ``iqgate serve … --pg-port N`` for psql, DBeaver, Metabase, Grafana, Tableau, Superset.

Protocol v3 written here (no usable server library; see README "PostgreSQL
port"), one module per concern: ``wire`` (framing, message builders),
``auth`` (SCRAM-SHA-256, MD5, cleartext with the server token as password),
``types`` (text and binary values, parameters), ``sqltext`` (statement
splitting, ``$n`` parameters, session commands), ``commands`` (SET/SHOW/
transactions), ``sqlstate`` (errors), ``answer`` (results), ``session``
(simple and extended query), ``server`` (listener, TLS, cancel, limits).
Every statement runs through the one engine (``Gateway.sql``) with the same
limits and read-only checks as HTTP; the PostgreSQL catalog clients query is
emulated from the store catalog by the planner (``planner.systables``).
"""

from __future__ import annotations

from .server import PgServer

__all__ = ["PgServer"]
