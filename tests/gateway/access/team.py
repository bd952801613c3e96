"""A team in a real users file (made by ``iqgate users`` itself) over the no-Spark shop, and a source that counts reads.

- alice (finance): ``revenue`` and ``acc*`` (accounts) — the attacker in the tests;
- bob (support): ``last_order``, ``latest``, ``per_min`` — the victim: alice must never read ``last_order``;
- carol (ops): ``accounts`` and the system schema, with a PG password of her own;
- peer (peers): ``*`` and ``system``: what servers present to each other;
- dave: no role at all.

``CountingApp`` is the real StreamsApp; it only counts, per store, the IQv2 requests and point reads it answers,
so a test can say "0 reads of last_order" about everything a face did.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.access.users_cmd import main as users_main
from stores.app.streams import StoreTopology, StreamsApp
from stores.iqv2.request import StateQueryRequest
from tests.gateway.gwfixtures import SPECS

ROLES = {"finance": ("revenue", "acc*"), "support": ("last_order", "latest", "per_min"),
         "ops": ("accounts", "system"), "peers": ("*", "system")}
MEMBERS = {"alice": ("finance",), "bob": ("support",), "carol": ("ops",), "peer": ("peers",), "dave": ()}
CAROL_PASSWORD = "carol's pg pässword"
VICTIM = "last_order"


def users(path: Path, *argv: str, stdin: str | None = None) -> str:
    """``iqgate users --file PATH ARGV…``; its stdout (a new token), asserting it succeeded."""
    out = io.StringIO()
    code = users_main(["--file", str(path), *argv], stdin=io.StringIO(stdin) if stdin is not None else None,
                      stdout=out)
    assert code == 0, (argv, code)
    return out.getvalue().strip()


@dataclass
class Team:
    path: Path
    tokens: dict[str, str]

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


def make_team(directory: Path) -> Team:
    path = directory / "users.toml"
    for role, grants in ROLES.items():
        for g in grants:
            users(path, "grant", role, g)
    tokens = {}
    for name, roles in MEMBERS.items():
        tokens[name] = users(path, "add", name, *[w for r in roles for w in ("--role", r)])
    users(path, "password", "carol", stdin=CAROL_PASSWORD + "\n")
    return Team(path, tokens)


class CountingApp(StreamsApp):
    """The shop's StreamsApp, counting what it reads per store (IQv2 requests and point reads)."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(StoreTopology(SPECS), application_id="grants", state_dir=str(state_dir),
                         coordination_base=str(state_dir / "coord"))
        self.reads: Counter[str] = Counter()

    def query(self, request: StateQueryRequest) -> Any:
        self.reads[request.store_name] += 1
        return super().query(request)

    def point_read(self, store: str, partition: int, key: Any, bound: Any) -> Any:
        self.reads[store] += 1
        return super().point_read(store, partition, key, bound)
