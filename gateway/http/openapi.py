"""The OpenAPI 3.0 description of the HTTP API (served at /v1/openapi.json; a test checks it covers every route)."""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "retryable"],
            "properties": {
                "code": {"type": "string", "example": "UNKNOWN_COLUMN"},
                "message": {"type": "string"},
                "retryable": {"type": "boolean"},
                "line": {"type": "integer", "nullable": True},
                "col": {"type": "integer", "nullable": True},
                "partitions": {"type": "array", "items": {"type": "object", "properties": {
                    "store": {"type": "string"}, "partition": {"type": "integer"},
                    "failure_reason": {"type": "string"}, "failure_message": {"type": "string"},
                    "retryable": {"type": "boolean"}}}},
            },
        }
    },
}

_POSITION = {
    "type": "object",
    "description": "Consistency token {topic: {partition: offset}}: pass it back as `position` for monotonic reads.",
    "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}},
}


def _err(desc: str) -> dict[str, Any]:
    return {"description": desc, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def openapi_document() -> dict[str, Any]:
    errors = {
        "400": _err("Bad SQL or request (SQL_SYNTAX_ERROR, UNKNOWN_COLUMN, TYPE_MISMATCH, READ_ONLY, BAD_REQUEST, ...)"),
        "401": _err("Missing or wrong bearer token"),
        "403": _err("SQL tried to reach files, the network or extensions"),
        "404": _err("Unknown store or route"),
        "405": _err("Method not allowed on this route"),
        "406": _err("None of the Accept media types can be produced"),
        "409": _err("Store partitions failed (not retryable)"),
        "413": _err("Request body too large"),
        "422": _err("Result exceeds the row limit"),
        "503": _err("Retryable: app not started or rebalancing, or stores not up to the position bound (Retry-After)"),
        "504": _err("Statement timeout"),
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "iqgate", "version": "1",
                 "description": "SQL over the live state stores of a streaming pipeline, with the IQv2 contract."},
        "paths": {
            "/v1/sql": {"post": {
                "summary": "Run one SQL statement (a SUBSCRIBE streams its changes as NDJSON or server-sent events)",
                "parameters": [{"name": "Last-Event-ID", "in": "header", "required": False,
                                "schema": {"type": "string"},
                                "description": "A SUBSCRIBE: resume after this Position (the id of the last "
                                               "server-sent event received), without a snapshot"}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["sql"], "properties": {
                        "sql": {"type": "string"},
                        "params": {"oneOf": [{"type": "array"}, {"type": "object"}]},
                        "position": {"$ref": "#/components/schemas/Position"},
                        "partial": {"type": "boolean", "description": "return data beside failed partitions"},
                        "wait_ms": {"type": "integer", "minimum": 0,
                                    "description": "wait up to this long for the stores to reach the bound"},
                        "max_rows": {"type": "integer", "minimum": 0},
                        "session": {"type": "object", "description": "SET settings kept by the client"},
                    }}}}},
                "responses": {
                    "200": {"description": "Rows; the position is also in the X-IQ-Position header",
                            "headers": {"X-IQ-Position": {"schema": {"type": "string"}}},
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/SqlResult"}},
                                "application/x-ndjson": {"schema": {"type": "string"}},
                                "text/csv": {"schema": {"type": "string"}},
                                "application/vnd.apache.arrow.stream": {"schema": {"type": "string",
                                                                                   "format": "binary"}},
                                "text/event-stream": {"schema": {"type": "string"}},
                            }},
                    **errors,
                    "406": _err("None of the Accept media types can be produced; STREAM_REQUIRED: a SUBSCRIBE asked "
                                "for JSON, CSV or Arrow"),
                    "410": _err("SUBSCRIPTION_TOO_OLD: the resume Position is older than the changelog holds"),
                    "429": _err("TOO_MANY_SUBSCRIPTIONS: the server's limit of live answers"),
                },
            }},
            "/v1/stores": {"get": {"summary": "Stores: kinds, columns, partitions, positions",
                                   "responses": {"200": {"description": "The catalog"}, "401": errors["401"]}}},
            "/v1/health": {"get": {"summary": "The application's state (KIP-696); 200 only when RUNNING",
                                   "responses": {"200": {"description": "RUNNING"},
                                                 "503": {"description": "any other state"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics",
                                 "responses": {"200": {"description": "text exposition format 0.0.4"},
                                               "401": errors["401"]}}},
            "/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OK"}}}},
            "/v1/ping": {"get": {"summary": "No-op (load balancer and benchmark baseline)",
                                 "responses": {"200": {"description": "OK"}}}},
            "/v1/query": {"get": {
                "summary": "One SQL statement as a link (the query page's JSON/CSV/Arrow links)",
                "parameters": [
                    {"name": "sql", "in": "query", "required": True, "schema": {"type": "string"}},
                    {"name": "format", "in": "query", "schema": {"type": "string",
                                                                 "enum": ["json", "csv", "arrow", "ndjson"]}},
                    {"name": "partial", "in": "query", "schema": {"type": "boolean"}},
                    {"name": "position", "in": "query", "schema": {"type": "string"},
                     "description": "a position bound as JSON"},
                ],
                "responses": {"200": {"description": "as POST /v1/sql; CSV and Arrow as attachments"},
                              "400": errors["400"], "401": errors["401"]}}},
            "/": {"get": {"summary": "The query page (no token needed: it asks for one and holds no data)",
                          "responses": {"200": {"description": "HTML"}}}},
            "/page/<name>": {"get": {"summary": "The query page's CSS and JS (served here: no CDN)",
                                     "responses": {"200": {"description": "OK"}, "404": {"description": "no such asset"}}}},
            "/v1/partitions": {"get": {"summary": "Between servers: every store partition this server has, its role "
                                                  "(active, standby, copy), Position and lag (the heartbeat)",
                                       "responses": {"200": {"description": "OK"}}}},
            "/v1/iq": {"post": {"summary": "Between servers: run one IQv2 request on this server's own copies "
                                           "(never forwarded again); per-partition answers with their rows",
                                "responses": {"200": {"description": "OK"}, "400": _err("Malformed request")}}},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": _ERROR,
                "Position": _POSITION,
                "SqlResult": {"type": "object", "properties": {
                    "columns": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "type": {"type": "string"}}}},
                    "rows": {"type": "array", "items": {"type": "array"}},
                    "row_count": {"type": "integer"},
                    "position": {"$ref": "#/components/schemas/Position"},
                    "partitions": {"type": "array", "items": {"type": "object"}},
                    "statement": {"type": "string", "enum": ["select", "explain", "show_tables", "describe", "set"]},
                    "settings": {"type": "object"},
                }},
            },
        },
        "security": [{"bearer": []}, {}],
    }
