"""A store's definition and its fingerprint: what decides whether the store on disk still fits the pipeline.

Issue 20 item 1. The definition is what the store's contents depend on: its
kind and shape, key and value columns with types, window size/advance,
session gap, retentions, output mode, partitions, source topics, and Spark's
*analyzed* plan of its query (so ``F.sum`` becoming ``F.avg`` under the same
column name counts as a change, while renaming a Python variable does not).

The plan text is normalized before it is hashed, so the same pipeline file
gives the same fingerprint in every process: expression ids (``#12``),
JVM object hashes (``PythonTable@19c0ba16``), watermark ids (a UUID per run), our
stream id option, and source options that say *where* the source is rather
than *what* it is (the log path, bootstrap servers, client settings — they
may carry credentials, and must never reach ``store.json``) are removed.
Only options that change which records are read stay: topics, value schema,
key type, starting offsets.

A JVM object hash is ``Integer.toHexString(identityHashCode)``: 1 to 8 hex
digits, not always 6 or more. Every streaming source leaf prints two of them
(``PythonDataSourceV2@…``, ``PythonTable@…``); one in about two thousand has
5 digits or fewer, and left in the text it made a store's fingerprint differ
between two builds of the same declaration (an upgrade then rebuilt a store
nobody changed). Hashes of 6 digits or more are removed wherever they are, as
before; shorter ones after a JVM class name (``a.b.C@1f``), so the text of a
plan whose hashes were long is unchanged and so are the fingerprints on disk.

The stream's ``tombstone`` column (issue 51) is taken out of every list of
the stream's columns (the source's, a projection's, the arguments of a
session table's function): every stream gained it, and a store that does not
read it computes what it computed before, so its fingerprint stays what it was. A
store whose rows it decides (a table of records, a versioned table, a join)
records its tombstone rule in the definition instead: Kafka's rule changes
what such a store holds, so it is rebuilt once.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

__all__ = ["definition_of", "normalize_plan", "fingerprint"]

_KEPT_OPTIONS = ("topics", "subscribe", "valueSchema", "keyType", "startingOffsets")
_EXPR_ID = re.compile(r"#\d+L?")
_OBJ_HASH = re.compile(r"@[0-9a-f]{6,}\b")
# a short identity hash (1-5 hex digits) after a JVM class name (Object.toString: getClass().getName() + "@" + hex),
# ``org.apache.spark...PythonTable@634c8``: a package in lower case, then the class
_SHORT_OBJ_HASH = re.compile(r"((?<![\w$.])(?:[a-z_][\w]*\.)+[A-Z][\w$]*)@[0-9a-f]{1,5}\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# The options of a streaming source leaf: "[k=v, k=v, ...], [attributes]". Values may hold ", " (a schema DDL).
_OPTIONS = re.compile(r"\[((?:[A-Za-z][\w.]*=[^\]]*))\], \[")
_OPTION = re.compile(r"(?:^|, )([A-Za-z][\w.]*)=(.*?)(?=, [A-Za-z][\w.]*=|$)")
# the stream's tombstone column after offset in a column or argument list (our sources), or Spark's Kafka source's
# projection
_TOMBSTONE_ATTR = re.compile(r"(offset#\d+L), tombstone#\d+(?=[,\])])|, isnull\(value#\d+\) AS tombstone#\d+")


def normalize_plan(plan: str) -> str:
    """The analyzed plan text with run-specific ids and source locations removed (see the module docstring)."""
    def options(m: re.Match[str]) -> str:
        kept = {k: v for k, v in _OPTION.findall(m.group(1)) if k in _KEPT_OPTIONS}
        return "[" + ", ".join(f"{k}={kept[k]}" for k in sorted(kept)) + "], ["

    text = _TOMBSTONE_ATTR.sub(lambda m: m.group(1) or "", plan)
    text = _OPTIONS.sub(options, text)
    text = _EXPR_ID.sub("", text)
    text = _OBJ_HASH.sub("", text)
    text = _SHORT_OBJ_HASH.sub(r"\1", text)
    text = _UUID.sub("", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def fingerprint(definition: dict[str, Any]) -> str:
    """sha256 of the definition's canonical JSON (without the fingerprint itself)."""
    body = {k: v for k, v in definition.items() if k != "fingerprint"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def definition_of(decl: Any, plan_text: str) -> dict[str, Any]:
    """The definition of one declared store (``StoreDecl``) whose query's analyzed plan is ``plan_text``."""
    spec = decl.spec
    plan = normalize_plan(plan_text)
    out: dict[str, Any] = {
        "kind": spec.kind.value,
        "shape": decl.shape,
        "output_mode": decl.output_mode,
        "key": f"{spec.key.name} {spec.key.type}",
        "values": [f"{c.name} {c.type}" for c in spec.values],
        "timestamp": decl.timestamp_col,
        "window": decl.window_col,
        "window_size_ms": spec.window_size_ms,
        "window_advance_ms": spec.window_advance_ms,
        "gap_ms": spec.gap_ms,
        "history_retention_ms": spec.history_retention_ms,
        "options": dict(spec.options or {}),
        "partitions": spec.partitions,
        "source_topics": list(spec.source_topics),
        "plan": hashlib.sha256(plan.encode()).hexdigest(),
    }
    if getattr(decl, "tombstones", None) == "kafka":  # absent under the earlier rule: those stores keep their print
        out["tombstones"] = "kafka"
    extra = getattr(decl, "definition_extra", None)
    if extra:  # what a kind of store adds (a join's sides, conditions, aggregates beyond sums)
        out.update(dict(extra))
    out["fingerprint"] = fingerprint(out)
    return out
