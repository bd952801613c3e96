"""The SQLAlchemy dialect ``iqgate://``: it lives in the client distribution (``iqgate_client.sqlalchemy``).

Re-exported here so code written against the server package keeps working;
the ``sqlalchemy.dialects`` entry point is registered by ``iqgate-client``,
which a BI host (Superset) installs without the server.
"""

from __future__ import annotations

from iqgate_client.sqlalchemy import IqgateCompiler, IqgateDialect, sa_type_for

__all__ = ["IqgateDialect", "IqgateCompiler", "sa_type_for"]
