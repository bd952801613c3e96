"""Nested values (issue 16) in PG's text format: a MAP whose keys are dates, times or bytes is still JSON."""

from __future__ import annotations

import datetime as dt
import json

from gateway.pg.types import encoder, pg_type_for_duck


def test_a_map_with_date_keys_is_json_text() -> None:
    enc = encoder(pg_type_for_duck("MAP(DATE, BIGINT)"), False)
    value = {dt.date(2026, 11, 26): 3, dt.date(2026, 11, 27): None}
    assert json.loads(enc(value)) == {"2026-11-26": 3, "2026-11-27": None}


def test_a_struct_with_a_timestamp_and_bytes_is_json_text() -> None:
    enc = encoder(pg_type_for_duck("STRUCT(at TIMESTAMP, raw BLOB)"), False)
    got = json.loads(enc({"at": dt.datetime(2026, 11, 26, 9, 30), "raw": b"\x00\x01", "m": {b"k": 1.5}}))
    assert got == {"at": "2026-11-26T09:30:00", "raw": "AAE=", "m": {"aw==": 1.5}}
