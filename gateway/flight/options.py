"""The IQv2 knobs of one call, sent as headers (for clients that cannot write ``AS OF POSITION`` or SET).

``x-iq-position``   a position bound, ``{topic: {partition: offset}}`` as JSON (merged with the session's and
                    the statement's own ``AS OF POSITION``)
``x-iq-wait-ms``    how long to wait for the stores to reach the bound before NOT_UP_TO_BOUND
``x-iq-partial``    ``true``: answer with the partitions that could, their failures in the metadata
``x-iq-max-rows``   a row limit below the server's
``x-iq-setting-<name>``  any session setting for this call only (``x-iq-setting-statement_timeout_ms: 500``)

Each is checked here and a bad one is INVALID_ARGUMENT naming the header; an
``x-iq-`` header that is none of these is refused too (a typo must not
silently read without the bound it meant to set).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .internals import BadRequest, GatewayError, Session

__all__ = ["CallOptions", "call_options", "HEADERS"]

HEADERS = ("x-iq-position", "x-iq-wait-ms", "x-iq-partial", "x-iq-max-rows", "x-iq-setting-<name>")
_SETTING = "x-iq-setting-"


@dataclass(frozen=True)
class CallOptions:
    position: str | None = None
    wait_ms: int | None = None
    partial: bool | None = None
    max_rows: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def engine_kwargs(self) -> dict[str, Any]:
        return {"position": self.position, "wait_ms": self.wait_ms, "partial": self.partial,
                "max_rows": self.max_rows}


def _text(values: list[Any]) -> str:
    v = values[-1]
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _count(name: str, text: str) -> int:
    try:
        n = int(text.strip(), 10)
    except ValueError:
        n = -1
    if n < 0:
        raise BadRequest(f"header {name} must be a non-negative integer, got {text!r}")
    return n


def call_options(headers: Mapping[str, list[Any]]) -> CallOptions:
    position = wait_ms = partial = max_rows = None
    settings: dict[str, Any] = {}
    for name, values in headers.items():
        if not name.startswith("x-iq-") or not values:
            continue
        text = _text(values)
        if name == "x-iq-position":
            try:
                Session.validated({"position_bound": text})
            except GatewayError as exc:
                raise BadRequest(f"header x-iq-position: {exc.message}") from None
            position = text
        elif name == "x-iq-wait-ms":
            wait_ms = _count(name, text)
        elif name == "x-iq-max-rows":
            max_rows = _count(name, text)
        elif name == "x-iq-partial":
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise BadRequest(f"header x-iq-partial must be true or false, got {text!r}")
            partial = lowered == "true"
        elif name.startswith(_SETTING) and len(name) > len(_SETTING):
            setting = name[len(_SETTING):].replace("-", "_")
            try:
                settings.update(Session.validated({setting: text}))
            except GatewayError as exc:
                raise BadRequest(f"header {name}: {exc.message}") from None
        else:
            raise BadRequest(f"unknown header {name}; iqgate reads {', '.join(HEADERS)}")
    return CallOptions(position, wait_ms, partial, max_rows, settings)
