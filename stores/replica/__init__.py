"""Standby replicas (issue 17): store partitions restored from their changelogs into a state dir of their own.

A ``Replica`` discovers an application's changelog topics, opens the store
partitions it hosts in its own state directory (the same layout as the
active's, so every face that serves a state dir serves it unchanged), applies
each changelog record with the merge code the active used, and keeps
tailing. A replica's answer carries the Position of the last changelog record
it applied. Lags per partition (offset and time, KIP-535) are in ``lags()``.
"""

from __future__ import annotations

from .source import ReplicaSource
from .standby import PartitionLag, Replica, ReplicaError

__all__ = ["Replica", "ReplicaError", "PartitionLag", "ReplicaSource"]
