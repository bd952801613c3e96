"""``iqgate``: serve | replica | sql | explain | produce | upgrade | users | demo.

No command ends in a traceback (issue 45): every error is one or two lines
on stderr saying what went wrong and what to do, and the exit code says
whose move it is: 2 for usage (a bad flag, a bad statement: fix the
command), 1 for failures at run time (try again, or fix the setup).
``--debug`` (or ``IQGATE_DEBUG=1``) adds the traceback, for a bug report.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from .demo import add_demo_parser
from .errors import describe
from .produce import add_produce_parser
from .replica import add_replica_parser
from .serve import add_serve_parser
from .sql import add_sql_parsers
from .upgrade import add_upgrade_parser

__all__ = ["main", "console", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iqgate", description="SQL over the live state stores of a streaming "
                                     "pipeline, with the Kafka Streams IQv2 contract.")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an error (for a bug report); also IQGATE_DEBUG=1")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    add_replica_parser(sub)
    add_sql_parsers(sub)
    add_produce_parser(sub)
    add_upgrade_parser(sub)
    sub.add_parser("users", add_help=False, help="edit a users file: add, remove, grant, revoke, password, token, "
                   "limit, list (`iqgate users --help`)")
    add_demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    at = 1 if words[:1] == ["--debug"] else 0
    if words[at:at + 1] == ["users"]:  # its own parser and messages (gateway.access.users_cmd)
        from ..access.users_cmd import main as users_main

        return users_main(words[at + 1:])
    args = build_parser().parse_args(words)  # a usage error: argparse's message and exit 2
    from ..serving.stopping import reset_stop

    reset_stop()
    debug = args.debug or os.environ.get("IQGATE_DEBUG", "") not in ("", "0")
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a message: one line, as any other error here
            print(exc.code if exc.code.startswith("iqgate") else f"iqgate: {exc.code}", file=sys.stderr)
            return 1
        raise
    except Exception as exc:  # noqa: BLE001 - every error becomes a message and an exit code (errors.py)
        code, text, unexpected = describe(exc)
        print(text, file=sys.stderr)
        if debug:
            traceback.print_exc()
        elif unexpected:
            print("iqgate: this is a bug: run the command again with --debug and report what it prints",
                  file=sys.stderr)
        return code


def console() -> None:
    """The ``iqgate`` console script: ``main`` plus a quiet exit after hosting Spark.

    Once a command has hosted Spark (``serve <pipeline>``, ``demo``) and closed
    the app, interpreter teardown only produces noise — DuckDB's bindings
    report objects still referenced from Spark's threads as leaks. Everything
    the command owns is already closed by then, so exit without the teardown.
    """
    code = main()
    if "pyspark" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
