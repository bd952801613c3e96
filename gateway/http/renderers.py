"""Result → response body, one renderer per media type (chosen by Accept).

Every format streams the rows chunk by chunk as the engine produces them
(issue 14): JSON (an error after the headers went out ends the object with
an ``"error"`` member), NDJSON (header line, a line per row, trailer line; an
error comes in-band), CSV and Arrow IPC (no in-band error: the connection is
dropped before the last chunk). Values are encoded as ``gateway.json_values``
says.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from flask import Response

from ..engine.arrow_rows import position_json
from ..engine.errors import GatewayError, GatewayInternalError, ResponseTooLarge
from ..engine.json_values import dumps, json_default
from ..engine.result import CHUNK_ROWS, PartitionOutcome, Result

__all__ = ["RENDERERS", "MEDIA_TYPES", "position_header", "error_response", "json_body"]

log = logging.getLogger(__name__)

JSON = "application/json"
NDJSON = "application/x-ndjson"
CSV = "text/csv"
ARROW = "application/vnd.apache.arrow.stream"
MEDIA_TYPES = (JSON, NDJSON, CSV, ARROW)
_JSON_CT = "application/json"


def position_header(result: Result) -> str:
    return position_json(result.position) or "{}"


def _columns(result: Result) -> list[dict[str, str]]:
    return [{"name": n, "type": t} for n, t in result.columns]


def _trailer(result: Result, row_count: int) -> dict[str, Any]:
    return {
        "position": result.position.to_json_map(),
        "partitions": [p.to_json() for p in result.partitions],
        "row_count": row_count,
    }


def _partitions_json(result: Result) -> str:
    """The partitions array, each partition's JSON cached (it repeats on every read of a store until its next batch)."""
    out = []
    for p in result.partitions:
        text = _PARTITION_JSON.get(p)
        if text is None:
            if len(_PARTITION_JSON) > 4096:
                _PARTITION_JSON.clear()
            text = _PARTITION_JSON[p] = _partition_json(p)
        out.append(text)
    return "[" + ",".join(out) + "]"


def _partition_json(p: PartitionOutcome) -> str:
    served = "" if p.host is None else ',"host":%s,"active":%s' % (json.dumps(p.host), json.dumps(p.active))
    return '{"store":%s,"partition":%d,"failure_reason":%s,"failure_message":%s,"position":%s%s}' % (
        json.dumps(p.store), p.partition, json.dumps(p.failure_reason), json.dumps(p.failure_message),
        position_json(p.position) or "null", served)


def _columns_json(result: Result) -> str:
    """The columns array, cached by the (name, type) pairs: a statement's shape repeats on every call."""
    try:
        key = tuple(result.columns)
        text = _COLUMNS_JSON.get(key)
    except TypeError:  # not hashable: build it each time
        return dumps(_columns(result))
    if text is None:
        if len(_COLUMNS_JSON) > 4096:
            _COLUMNS_JSON.clear()
        text = _COLUMNS_JSON[key] = dumps(_columns(result))
    return text


_PARTITION_JSON: dict[PartitionOutcome, str] = {}
_COLUMNS_JSON: dict[tuple[Any, ...], str] = {}


def _too_large(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"the answer is larger than the server's response limit of {limit:,} bytes; "
                            "add a LIMIT, select fewer columns, or aggregate")


def render_json(result: Result, max_bytes: int) -> Response:
    """One JSON object, written chunk by chunk as the rows come (memory: a chunk, issue 14); see ``json_body``."""
    return Response(json_body(result, max_bytes), content_type=_JSON_CT)


def json_body(result: Result, max_bytes: int) -> str | Iterator[str]:
    """The JSON answer: the whole text when the first chunk was all there is, else the text piece by piece.

    An error found after the status line went out (row or size limit,
    timeout) ends the rows array and the object with an ``"error"`` member
    (the one error shape) instead of ``position``/``row_count``: the body is
    still valid JSON and never looks like a complete answer. Whole answers
    are a plain string so a face can send them with a Content-Length and no
    response object (``gateway.http.fast``).
    """
    if result.statement.value == "set":
        rows = result.rows()
        result.close()
        head = dumps({"columns": _columns(result), "rows": rows, "statement": "set"})
        tail = (',"position":' + (position_json(result.position) or "{}") + ',"partitions":'
                + _partitions_json(result) + ',"row_count":' + str(len(rows)) + ',"settings":' + dumps(result.settings))
        return head[:-1] + tail + "}"
    rows = result.rows_in_hand
    if rows is not None and len(rows) <= CHUNK_ROWS:  # the whole answer in hand (a point lookup): one text
        result.close()
        return _whole_json(result, rows, max_bytes)
    first, chunks = result.first_chunk()
    try:
        head, body = _head_and_rows(result, first, max_bytes)
    except BaseException:
        result.close()
        raise
    if chunks is None:
        return head + body + _json_end(result, len(first))

    def gen() -> Iterator[str]:
        n = len(first)
        sent = len(head) + len(body)
        end = '],"statement":' + dumps(result.statement.value)
        try:
            yield head + body
            for chunk in chunks:
                if not chunk:
                    continue
                text = ("," if n else "") + dumps(chunk)[1:-1]
                n += len(chunk)
                sent += len(text)
                if sent > max_bytes:
                    raise _too_large(max_bytes)
                yield text
        except GatewayError as exc:
            yield end + "," + dumps(exc.to_error_body())[1:]
            return
        except Exception as exc:  # noqa: BLE001 - the status line is gone; the client must still learn of it
            yield end + "," + dumps(GatewayInternalError(f"{type(exc).__name__}: {exc}").to_error_body())[1:]
            return
        finally:
            result.close()
        yield _json_end(result, n)

    return gen()


def _whole_json(result: Result, rows: list[tuple[Any, ...]], max_bytes: int) -> str:
    """A whole answer in hand as one JSON text.

    Its end (statement, position, partition, row count) is cached per partition outcome: the engine's point lane
    hands out one outcome object per store partition until its position moves, so a lookup's end is built once."""
    head, body = _head_and_rows(result, rows, max_bytes)
    n = len(rows)
    outcome = result.partitions[0] if len(result.partitions) == 1 else None
    cached = _POINT_ENDS.get((id(outcome), n)) if outcome is not None else None
    if cached is not None and cached[0] is outcome:
        return head + body + cached[1]
    end = _json_end(result, n)
    if outcome is not None:
        if len(_POINT_ENDS) > 4096:
            _POINT_ENDS.clear()
        _POINT_ENDS[(id(outcome), n)] = (outcome, end)  # the object kept beside its id: an id is reused
    return head + body + end


_POINT_ENDS: dict[tuple[int, int], tuple[PartitionOutcome, str]] = {}


def _head_and_rows(result: Result, rows: list[tuple[Any, ...]], max_bytes: int) -> tuple[str, str]:
    """The object's start through ``"rows":[`` and the first rows; a ResponseTooLarge past ``max_bytes``."""
    head = '{"columns":' + _columns_json(result) + ',"rows":['
    body = dumps(rows)[1:-1] if rows else ""
    if len(head) + len(body) > max_bytes:
        raise _too_large(max_bytes)
    return head, body


def _json_end(result: Result, row_count: int) -> str:
    return ('],"statement":' + _statement_json(result.statement.value) + ',"position":' + (position_json(result.position) or "{}")
            + ',"partitions":' + _partitions_json(result) + ',"row_count":' + str(row_count) + "}")


@functools.lru_cache(maxsize=None)  # one entry per statement kind
def _statement_json(kind: str) -> str:
    return dumps(kind)


def render_ndjson(result: Result, max_bytes: int) -> Response:
    """Header line, one array per row, trailer line; an error after the headers went out comes in-band."""

    def gen() -> Iterator[str]:
        yield dumps({"columns": _columns(result), "statement": result.statement.value}) + "\n"
        n = sent = 0
        try:
            for chunk in result.iter_batches():
                n += len(chunk)
                text = "".join(dumps(r) + "\n" for r in chunk)
                sent += len(text)
                if sent > max_bytes:
                    raise _too_large(max_bytes)
                yield text
        except GatewayError as exc:
            yield dumps(exc.to_error_body()) + "\n"
            return
        except Exception as exc:  # noqa: BLE001 - the status line is gone; the client must still learn of it
            yield dumps(GatewayInternalError(f"{type(exc).__name__}: {exc}").to_error_body()) + "\n"
            return
        finally:
            result.close()
        yield dumps(_trailer(result, n)) + "\n"

    return Response(gen(), mimetype=NDJSON)


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str | int | float):
        return v
    if isinstance(v, list | dict):
        return dumps(v)
    return json_default(v)


def _csv_text(rows: list[tuple[Any, ...]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    for row in rows:
        w.writerow([_csv_value(v) for v in row])
    return buf.getvalue()


def render_csv(result: Result, max_bytes: int) -> Response:
    """A header line, then the rows chunk by chunk as they come (memory: a chunk, issue 14).

    CSV has no in-band error: one found after the status line went out (row
    or size limit, timeout) drops the connection before the response's last
    chunk, so the client sees an incomplete response, never a short answer.
    """
    first, chunks = result.first_chunk()
    try:
        head = _csv_text([tuple(n for n, _ in result.columns)]) + (_csv_text(first) if first else "")
        if len(head) > max_bytes:
            raise _too_large(max_bytes)
    except BaseException:
        result.close()
        raise
    if chunks is None:
        return Response(head, mimetype=CSV, headers={"Content-Type": "text/csv; charset=utf-8"})

    def gen() -> Iterator[str]:
        sent = len(head)
        try:
            yield head
            for chunk in chunks:
                text = _csv_text(chunk)
                sent += len(text)
                if sent > max_bytes:
                    raise _too_large(max_bytes)
                yield text
        except GatewayError as exc:
            log.warning("a CSV answer was cut short after its headers went out: %s", exc)
            raise
        finally:
            result.close()

    return Response(gen(), mimetype=CSV, headers={"Content-Type": "text/csv; charset=utf-8"})


class _Pieces:
    """A write-only file collecting what the IPC writer writes, handed out piece by piece."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def render_arrow(result: Result, max_bytes: int) -> Response:
    """An Arrow IPC stream written batch by batch as DuckDB produces them (memory: one batch).

    Errors found once the status line went out (row or size limit, timeout)
    drop the connection before the response's last chunk: the client sees
    an incomplete response (Arrow IPC has no in-band error).
    """
    schema, batches = result.arrow_batches()
    meta = {b"iqgate.position": position_header(result).encode()}
    schema = schema.with_metadata({**(schema.metadata or {}), **meta})
    try:
        first = next(batches, None)  # errors before any byte went out still get their status code
        if first is not None and first.nbytes > max_bytes:
            raise _too_large(max_bytes)
    except BaseException:
        result.close()
        raise

    def gen() -> Iterator[bytes]:
        pieces = _Pieces()
        sent = 0
        try:
            with pa.ipc.new_stream(pa.PythonFile(pieces, mode="w"), schema) as writer:
                yield pieces.take()
                if first is not None:
                    writer.write_batch(first.replace_schema_metadata(schema.metadata))
                    yield pieces.take()
                for batch in batches:
                    sent += batch.nbytes
                    if sent > max_bytes:
                        raise _too_large(max_bytes)
                    writer.write_batch(batch.replace_schema_metadata(schema.metadata))
                    yield pieces.take()
            yield pieces.take()  # the end-of-stream marker: only after every batch
        except GatewayError as exc:
            # IPC has no in-band error and readers accept a stream without its end marker: the connection is
            # dropped before the last chunk, so the client sees an incomplete response, never a short answer
            log.warning("an Arrow answer was cut short after its headers went out: %s", exc)
            raise
        finally:
            result.close()

    return Response(gen(), mimetype=ARROW)


RENDERERS: dict[str, Callable[[Result, int], Response]] = {
    JSON: render_json,
    NDJSON: render_ndjson,
    CSV: render_csv,
    ARROW: render_arrow,
}


def error_response(exc: GatewayError, retry_after_s: int) -> Response:
    """The one error shape, with Retry-After when waiting can help (503; 429: a user over their share)."""
    resp = Response(dumps(exc.to_error_body()), status=exc.http_status, mimetype=JSON)
    if exc.http_status in (503, 429) and exc.retryable:
        resp.headers["Retry-After"] = str(retry_after_s)
    if exc.http_status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="iqgate"'
    return resp
