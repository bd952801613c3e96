"""The error contract: PEP 249 classes, stable codes, one body shape, and a lossless round trip over the wire."""

from __future__ import annotations

import pytest

import gateway.engine.errors as ge
from planner import errors as pe
from stores.iqv2 import errors as se

ALL = [c for c in vars(ge).values() if isinstance(c, type) and issubclass(c, ge.GatewayError) and c is not ge.GatewayError]


def test_every_gateway_error_is_a_pep249_error() -> None:
    pep249 = (ge.InterfaceError, ge.DatabaseError)
    for cls in ALL:
        assert issubclass(cls, ge.Error)
        assert issubclass(cls, pep249), cls


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_body_round_trip_rebuilds_the_same_class(cls: type[ge.GatewayError]) -> None:
    parts = [{"store": "s", "partition": 3, "failure_reason": "NOT_UP_TO_BOUND", "failure_message": "m",
              "retryable": True}]
    err = cls("what went wrong", line=2, col=14, partitions=parts)
    body = err.to_error_body()
    extra = {"resume_from", "oldest"} if cls is ge.SubscriptionError else set()  # where a live answer resumes
    assert set(body["error"]) == {"code", "message", "retryable", "line", "col", "partitions"} | extra
    back = ge.GatewayError.from_error_body(err.http_status, body)
    assert type(back) is cls
    assert (back.code, back.message, back.line, back.col, back.partitions, back.retryable) == (
        err.code, err.message, err.line, err.col, err.partitions, err.retryable)


def test_planner_codes_keep_their_code_and_position() -> None:
    for cls in (pe.SqlSyntaxError, pe.UnknownColumnError, pe.TypeMismatchError, pe.ReadOnlyError,
                pe.ForbiddenFunctionError, pe.TableScanDisabledError, pe.InvalidPositionError,
                pe.InvalidSettingError, pe.ParameterError):
        mapped = ge.translate(cls("bad", line=1, col=8))
        assert isinstance(mapped, ge.SqlError) and isinstance(mapped, ge.ProgrammingError)
        assert (mapped.code, mapped.line, mapped.col, mapped.http_status) == (cls.code, 1, 8, 400)
        back = ge.GatewayError.from_error_body(400, mapped.to_error_body())
        assert isinstance(back, ge.SqlError) and back.code == cls.code
    assert isinstance(ge.translate(pe.UnknownStoreError("x")), ge.UnknownStoreError)
    assert isinstance(ge.translate(pe.UnsupportedSqlError("x")), ge.NotSupportedError)


@pytest.mark.parametrize(("exc", "cls", "status", "retryable"), [
    (se.StreamsNotStartedException, ge.StreamsNotStartedError, 503, True),
    (se.StreamsRebalancingException, ge.StreamsRebalancingError, 503, True),
    (se.StateStoreMigratedException, ge.StateStoreMigratedError, 503, True),
    (se.StreamsStoppedException, ge.StreamsStoppedError, 503, False),
    (se.StateStoreNotAvailableException, ge.StateStoreNotAvailableError, 503, False),
    (se.UnknownStateStoreException, ge.UnknownStoreError, 404, False),
    (se.InvalidStateStorePartitionException, ge.InvalidPartitionError, 400, False),
])
def test_kip216_exceptions_map_with_status_and_retryability(exc: type, cls: type, status: int,
                                                             retryable: bool) -> None:
    mapped = ge.translate(exc("the message"))
    assert type(mapped) is cls
    assert mapped.http_status == status and mapped.retryable is retryable
    assert mapped.message == "the message"


def test_unknown_code_falls_back_on_status() -> None:
    assert isinstance(ge.GatewayError.from_error_body(503, {"error": {"code": "NEW_THING", "message": "m",
                                                                      "retryable": True}}), ge.OperationalError)
    assert isinstance(ge.GatewayError.from_error_body(418, {"error": {"code": "TEAPOT", "message": "m"}}),
                      ge.ProgrammingError)
    broken = ge.GatewayError.from_error_body(502, "<html>bad gateway</html>")
    assert isinstance(broken, ge.InternalError) and "502" in broken.message


def test_translate_leaves_foreign_exceptions_alone() -> None:
    assert ge.translate(KeyError("x")) is None
    err = ge.SqlError("x")
    assert ge.translate(err) is err
