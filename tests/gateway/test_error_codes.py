"""Every error code the gateway or the planner can raise has its class on the wire and its SQLSTATE on PG.

A code added in one place and forgotten in another is the bug this guards:
the remote client would raise a generic class and a PG client would see
XX000 or 42000 instead of the class it branches on.
"""

from __future__ import annotations

import inspect

import pytest
from iqgate_client import errors as wire

from gateway.engine import errors as gateway_errors
from gateway.pg.sqlstate import SQLSTATES
from planner import errors as planner_errors


def _codes(module: object, base: type) -> dict[str, type]:
    return {c.code: c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, base) and isinstance(getattr(c, "code", None), str)}


# routes and content negotiation exist on HTTP only; GATEWAY_ERROR is the abstract base
HTTP_ONLY = {"GATEWAY_ERROR", "METHOD_NOT_ALLOWED", "NOT_ACCEPTABLE", "NOT_FOUND"}
GATEWAY_CODES = _codes(gateway_errors, gateway_errors.GatewayError)
PLANNER_CODES = _codes(planner_errors, planner_errors.PlanningError)


@pytest.mark.parametrize("code", sorted(set(GATEWAY_CODES) | set(PLANNER_CODES)))
def test_every_code_has_a_sqlstate(code: str) -> None:
    if code in HTTP_ONLY:
        return
    assert code in SQLSTATES, f"{code} has no SQLSTATE in gateway/pg/sqlstate.py"


@pytest.mark.parametrize("code", sorted(GATEWAY_CODES))
def test_every_gateway_code_is_rebuilt_as_its_own_class(code: str) -> None:
    cls = GATEWAY_CODES[code]
    if cls is wire.GatewayError:
        return
    assert wire.error_class_for_code(code, cls.http_status) is cls


@pytest.mark.parametrize("code", sorted(PLANNER_CODES))
def test_every_planner_code_reaches_the_client_as_the_class_the_server_raised(code: str) -> None:
    mapped = gateway_errors.translate(PLANNER_CODES[code]("x"))
    assert mapped is not None and mapped.code == code and mapped.http_status < 500
    assert wire.error_class_for_code(code, mapped.http_status) is type(mapped)
