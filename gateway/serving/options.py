"""How a server is to serve, as typed values: what ``serve``, ``demo`` and ``replica`` hand the one start-up path.

The command line parses flags into these (``gateway.cli.options``); nothing
below the CLI sees an argparse Namespace. A serving process receives them as
JSON (``to_json``/``from_json``), never a token (the server's and the peer
token go by environment, out of the process list).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..engine.config import GatewayConfig

__all__ = ["HttpOptions", "PgOptions", "FlightOptions", "RoutingOptions", "AccessOptions", "ServeOptions"]


@dataclass(frozen=True)
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    threads: int = 4
    tls_cert: str | None = None  # both set: the port speaks HTTPS only
    tls_key: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


@dataclass(frozen=True)
class AccessOptions:
    """Who may read what (``gateway.access``): a users file (None: the single token, or no authentication),
    the audit log (a path, ``-`` for stdout; each serving process of several writes ``PATH.<index>``) and
    whether it masks literals. ``peer_token`` is this server's credential towards its peers when it has a users
    file (never serialized: it travels by environment)."""

    users_file: str | None = None
    audit_log: str | None = None
    audit_mask: bool = False
    peer_token: str | None = None

    def audit_target(self, index: int, count: int) -> str | None:
        """Where serving process ``index`` of ``count`` writes its audit lines (one writer per file)."""
        if self.audit_log is None or self.audit_log == "-" or count == 1:
            return self.audit_log
        return f"{self.audit_log}.{index}"


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
    access: AccessOptions = field(default_factory=AccessOptions)

    @property
    def peer_credential(self) -> str | None:
        """What this server presents to its peers: its token, or with a users file the peer user's token."""
        return self.config.auth_token or self.access.peer_token

    def to_json(self) -> dict[str, Any]:
        """Everything but the tokens (a serving process reads them from its environment)."""
        out = dataclasses.asdict(self)
        out["config"] = {k: v for k, v in out["config"].items() if k != "auth_token"}
        out["access"] = {k: v for k, v in out["access"].items() if k != "peer_token"}
        return out

    @staticmethod
    def from_json(raw: dict[str, Any], token: str | None, peer_token: str | None = None) -> ServeOptions:
        def of(cls: type, value: Any) -> Any:
            if value is None:
                return None
            if cls is RoutingOptions:
                value = dict(value, peers=tuple(value.get("peers") or ()))
            return cls(**value)

        return ServeOptions(http=of(HttpOptions, raw["http"]), workers=raw["workers"], pin_cpus=raw["pin_cpus"],
                            config=GatewayConfig(**raw["config"], auth_token=token), pg=of(PgOptions, raw.get("pg")),
                            flight=of(FlightOptions, raw.get("flight")),
                            routing=of(RoutingOptions, raw.get("routing")),
                            access=AccessOptions(**raw.get("access", {}), peer_token=peer_token))
