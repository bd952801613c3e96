"""One changelog record: one batch's share of one store partition, self-describing.

Why one record per (batch, partition) rather than one per key (Kafka
Streams' layout): a replica must apply a batch whole, with its Position, or
its answers would carry a Position whose effect is only half in the store.
The rows are the writer's canonical change table (engine/batch.py), so a
replica merges them with the very code the active used.

Two carriers, one content: on Kafka the rows are the record value (Arrow IPC
stream bytes) and the rest are headers; on the embedded EventLog, whose
values are JSON objects, the rows travel base64-encoded in the value.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position

__all__ = ["ChangelogRecord", "ChangelogFormatError", "FORMAT"]

FORMAT = 1
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))
_IPC_PLAIN = pa.ipc.IpcWriteOptions()
COMPRESS_MIN_ROWS = 256  # below this the zstd frames cost more time than the bytes they save


class ChangelogFormatError(ValueError):
    """A changelog record that this version cannot read (names the topic, partition and offset when known)."""


@dataclass(frozen=True)
class ChangelogRecord:
    """``rows`` of store ``spec`` applied by batch ``batch_id``, leaving the partition at ``position``.

    ``topic_id`` is the id of the changelog topic the writer wrote it to (EventLog epoch, Kafka topic id; None
    when the log cannot tell, and in records written before it was recorded): a replica that finds a record of
    another id is reading a topic deleted and created again (a rebuild begun anew) and must not mix the two.
    """

    spec: StoreSpec
    batch_id: int
    position: Position
    observed: int | None
    rows: pa.Table
    topic_id: str | None = None

    # -- bytes -----------------------------------------------------------------------------------
    def rows_buffer(self) -> pa.Buffer:
        """The rows as an Arrow IPC stream, zstd-compressed (any Arrow reader decompresses it).

        Why compressed: a big batch's record is copied several times on its
        way to the log (base64 and JSON on the embedded log); measured on 1M
        rows, zstd level 1 cut the record ~3x and the write's peak memory with it.
        A small batch (a live pipeline's usual one: a few rows) is written
        plain: compressing it cost ~0.1 ms a record for a few bytes saved
        (issue 22: freshness), and Arrow IPC readers take either.
        """
        sink = pa.BufferOutputStream()
        options = _IPC_OPTIONS if len(self.rows) >= COMPRESS_MIN_ROWS else _IPC_PLAIN
        with pa.ipc.new_stream(sink, self.rows.schema, options=options) as w:
            w.write_table(self.rows)
        return sink.getvalue()

    def rows_ipc(self) -> bytes:
        return self.rows_buffer().to_pybytes()

    def header(self) -> dict[str, Any]:
        head = {"f": FORMAT, "b": self.batch_id, "p": self.position.to_json_map(), "o": self.observed,
                "s": _spec_map(self.spec), "n": len(self.rows)}
        if self.topic_id is not None:
            head["t"] = self.topic_id
        return head

    # -- the embedded log: a JSON value ----------------------------------------------------------
    def to_value(self) -> dict[str, Any]:
        return {**self.header(), "rows": base64.b64encode(self.rows_buffer()).decode("ascii")}

    @classmethod
    def from_value(cls, value: Any, where: str) -> ChangelogRecord:
        if not isinstance(value, Mapping) or "rows" not in value:
            raise ChangelogFormatError(f"{where}: not a changelog record (expected a JSON object with rows)")
        try:
            raw = base64.b64decode(value["rows"], validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise ChangelogFormatError(f"{where}: the rows are not base64: {exc}") from None
        return cls._build(value, raw, where)

    # -- Kafka: value = Arrow IPC, headers = the rest --------------------------------------------
    def to_kafka(self) -> tuple[bytes, list[tuple[str, bytes]]]:
        return self.rows_ipc(), [("iqgate.changelog", json.dumps(self.header(), separators=(",", ":")).encode())]

    @classmethod
    def from_kafka(cls, value: bytes | None, headers: Sequence[tuple[str, bytes]] | None, where: str
                   ) -> ChangelogRecord:
        head = dict(headers or ()).get("iqgate.changelog")
        if head is None or value is None:
            raise ChangelogFormatError(f"{where}: not a changelog record (no iqgate.changelog header or no value)")
        try:
            meta = json.loads(head)
        except ValueError as exc:
            raise ChangelogFormatError(f"{where}: the changelog header is not JSON: {exc}") from None
        return cls._build(meta, value, where)

    @classmethod
    def _build(cls, meta: Mapping[str, Any], raw: bytes, where: str) -> ChangelogRecord:
        if meta.get("f") != FORMAT:
            raise ChangelogFormatError(f"{where}: changelog format {meta.get('f')!r}; this iqgate reads {FORMAT}")
        try:
            spec = StoreSpec.from_json(json.dumps(meta["s"]))
            position = Position.from_map(meta["p"])
            batch_id = int(meta["b"])
            observed = None if meta.get("o") is None else int(meta["o"])
            topic_id = None if meta.get("t") is None else str(meta["t"])
            rows = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as exc:
            raise ChangelogFormatError(f"{where}: a damaged changelog record: {type(exc).__name__}: {exc}") from None
        if len(rows) != meta.get("n", len(rows)):
            raise ChangelogFormatError(f"{where}: the record says {meta.get('n')} rows but holds {len(rows)}")
        return cls(spec, batch_id, position, observed, rows, topic_id)


@functools.lru_cache(maxsize=256)
def _spec_map(spec: StoreSpec) -> dict[str, Any]:
    """The spec as the header carries it; one per store (it repeats in every record). Callers must not change it."""
    return json.loads(spec.to_json())
