"""How a server is to serve, as typed values: what ``serve``, ``demo`` and ``replica`` hand the one start-up path.

The command line parses flags into these (``gateway.cli.options``); nothing
below the CLI sees an argparse Namespace. A serving process receives them as
JSON (``to_json``/``from_json``), never the token (it goes by environment,
out of the process list).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..engine.config import GatewayConfig

__all__ = ["HttpOptions", "PgOptions", "FlightOptions", "RoutingOptions", "ServeOptions"]


@dataclass(frozen=True)
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    threads: int = 4


@dataclass(frozen=True)
class PgOptions:
    host: str = "127.0.0.1"
    port: int = 0
    auth: str = "scram-sha-256"
    max_connections: int = 64
    tls_cert: str | None = None
    tls_key: str | None = None


@dataclass(frozen=True)
class FlightOptions:
    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: str | None = None
    tls_key: str | None = None


@dataclass(frozen=True)
class RoutingOptions:
    peers: tuple[str, ...] = ()
    advertised_url: str | None = None
    max_lag: int | None = None
    heartbeat_ms: int = 500
    heartbeat_topic: bool = False
    catch_up_wait_ms: int = 0
    always: bool = False  # a replica routes even without peers (its catch-up wait)

    @property
    def wanted(self) -> bool:
        return self.always or bool(self.peers) or self.max_lag is not None or self.heartbeat_topic


@dataclass(frozen=True)
class ServeOptions:
    """Everything a server's serving processes need besides the state dir and what they serve."""

    http: HttpOptions = field(default_factory=HttpOptions)
    workers: int = 1
    pin_cpus: bool = True
    config: GatewayConfig = field(default_factory=GatewayConfig)
    pg: PgOptions | None = None
    flight: FlightOptions | None = None
    routing: RoutingOptions | None = None

    def to_json(self) -> dict[str, Any]:
        """Everything but the token (a serving process reads it from its environment)."""
        out = dataclasses.asdict(self)
        out["config"] = {k: v for k, v in out["config"].items() if k != "auth_token"}
        return out

    @staticmethod
    def from_json(raw: dict[str, Any], token: str | None) -> ServeOptions:
        def of(cls: type, value: Any) -> Any:
            if value is None:
                return None
            if cls is RoutingOptions:
                value = dict(value, peers=tuple(value.get("peers") or ()))
            return cls(**value)

        return ServeOptions(http=of(HttpOptions, raw["http"]), workers=raw["workers"], pin_cpus=raw["pin_cpus"],
                            config=GatewayConfig(**raw["config"], auth_token=token), pg=of(PgOptions, raw.get("pg")),
                            flight=of(FlightOptions, raw.get("flight")),
                            routing=of(RoutingOptions, raw.get("routing")))
