"""Live answers on the engine (issue 46): ``Gateway.subscribe`` and the limit's counts, apart from pull statements.

A mixin of ``Gateway`` rather than methods in gateway.py: a subscription
shares the gateway's planning, grants and activity, but its answer is a
``live.Subscription`` run by one pump per gateway (``live/service.py``), not
a ``Result`` — and gateway.py stays one statement's way through.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from planner.plan import StatementKind
from stores.catalog.schema import StoreSpec
from stores.iqv2.position import Position

from .config import GatewayConfig, Session
from .errors import BadRequest, GatewayInternalError
from .statement import bound_from

if TYPE_CHECKING:
    from planner.plan import Plan

    from ..access.principal import Principal
    from .duck import DuckPool
    from .guards import Guards
    from .sources import Capabilities, Source

__all__ = ["Subscribing"]


class Subscribing:
    """``subscribe`` and ``subscriptions`` of a ``Gateway`` (which provides the attributes declared here)."""

    source: Source
    config: GatewayConfig
    capabilities: Capabilities
    _activity: Any
    _live: Any
    _live_lock: threading.Lock
    _pool: DuckPool
    _guards: Guards

    if TYPE_CHECKING:
        def catalog_for(self, principal: Principal | None) -> Mapping[str, StoreSpec]: ...
        def _settings(self, session: Session | Mapping[str, Any] | None) -> dict[str, Any]: ...
        def _plan(self, text: str, params: Any, settings: Mapping[str, Any],
                  catalog: Mapping[str, StoreSpec] | None = None) -> Plan: ...

    def subscribe(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
                  position: Position | Mapping[str, Any] | str | None = None, *,
                  session: Session | Mapping[str, Any] | None = None,
                  resume: Position | Mapping[str, Any] | str | None = None,
                  principal: Principal | None = None) -> Any:
        """A live answer (``SUBSCRIBE …`` or ``SELECT … EMIT CHANGES``): a ``live.Subscription`` to iterate.

        First the snapshot (``insert`` messages: the answer the same SELECT gives at one Position), then every
        change after it in Position order (``upsert`` / ``delete``), with ``progress`` messages at least every
        second (unless ``WITH (PROGRESS = false)``). ``position`` stands in for the statement's ``AS OF
        POSITION``; ``resume`` is a Position a subscription gave (its ``position``, a progress message's, an
        end's ``resume_from``): the changes exactly after it follow, without a snapshot. It runs until closed,
        or ends with ``SubscriptionError`` saying why and where to resume (the server's limit of concurrent
        subscriptions, too slow a reader, a resume point older than the changelog holds…).
        ``principal``: the user asking; a store they may not read does not exist for the subscription either.
        """
        settings = self._settings(session)
        catalog = self.catalog_for(principal)
        plan = self._plan(text, params, settings, catalog)
        if plan.kind is not StatementKind.SUBSCRIBE or plan.subscription is None:
            raise BadRequest(f"not a live answer ({plan.kind.value}): subscribe to SUBSCRIBE … or SELECT … EMIT "
                             "CHANGES; run other statements with sql()")
        start = bound_from(position)
        again = bound_from(resume)

        def replan() -> tuple[Any, Mapping[str, StoreSpec]]:
            now = self.catalog_for(principal)
            new = self._plan(text, params, settings, now)
            if new.subscription is None:  # pragma: no cover - the same text plans the same kind
                raise GatewayInternalError("the subscription no longer plans as one")
            return new.subscription, now

        slot = self._activity.begin(text) if self._activity is not None else None
        try:
            return self._live_answers().open(plan.subscription, text, position=start, resume=again,
                                             replan=replan, catalog=catalog)
        finally:
            if slot is not None:
                self._activity.end(slot)

    def subscriptions(self) -> dict[str, Any]:
        """Open subscriptions against the limit, started, ended by reason (``/metrics``, ``/v1/health``)."""
        live = self._live
        if live is None:
            return {"open": 0, "limit": self.config.max_subscriptions, "started": 0, "ended": {}}
        return live.stats()

    def _live_answers(self) -> Any:
        with self._live_lock:
            if self._live is None:
                from .live.service import LiveAnswers  # stores.live is loaded by the first subscription

                live_source = self.capabilities.live_source
                target = live_source() if live_source is not None else self.source
                self._live = LiveAnswers(target, self.config, self._pool.cursor,
                                         lambda: self._guards.watch(self.config.statement_timeout_ms))
            return self._live
