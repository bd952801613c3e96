"""Tests of the Spark pipeline part of stores: EventLog, iqlog source, Topology, materializer, runtime."""

from __future__ import annotations
