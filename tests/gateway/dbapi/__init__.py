"""Tests of the DB-API face and the SQLAlchemy dialect (incl. the dbapi20 compliance suite)."""
