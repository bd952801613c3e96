"""Who may read what: users and their grants, tokens and SCRAM verifiers, the audit log, fair-share admission.

This package decides; the engine and the faces enforce (they ask a ``Users``
for the ``Principal`` of each statement, pass it along, audit the outcome and
hold an ``Admission`` ticket while it runs). It imports nothing else of the
gateway, so every face can use it without pulling in another.
"""

from __future__ import annotations

from .admission import Admission, Ticket, TooManyStatements
from .audit import AuditLog, mask_literals
from .context import AccessContext, AuditedStatement
from .principal import LIMIT_NAMES, SYSTEM_GRANT, Limits, Principal
from .scram import ScramExchange, ScramMalformed, ScramRejected, ScramVerifier
from .users import ANONYMOUS, SINGLE_TOKEN_USER, Users
from .users_file import UsersFileError

__all__ = [
    "AccessContext", "AuditedStatement", "Admission", "Ticket", "TooManyStatements", "AuditLog", "mask_literals", "LIMIT_NAMES", "SYSTEM_GRANT",
    "Limits", "Principal", "ScramExchange", "ScramMalformed", "ScramRejected", "ScramVerifier", "ANONYMOUS",
    "SINGLE_TOKEN_USER", "Users", "UsersFileError",
]
