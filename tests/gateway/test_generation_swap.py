"""A statement that meets a store's swap to a rebuilt generation (a new column) is planned again, not failed.

Found by the replica-rebuild Spark test: a replica's gateway planned a scan on
generation 0's catalog, and the read (which refreshes the catalog first, as
``ReplicaSource.query`` does) found generation 1's files, with a column more.
Here the swap is made to happen at exactly that moment: the reader below
swaps ``store.json`` to generation 1 when the first request reaches it, after
the gateway has planned. Both generations are real store files written by a
real StreamsApp; the expected rows come from the rows written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.errors import StateStoreMigratedError
from gateway.engine.gateway import Gateway
from stores.app import layout
from stores.app.reader import StateDirReader
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.result import StateQueryResult
from tests.gateway.gwfixtures import make_app

V0 = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
               (Column("revenue", SqlType.DOUBLE),), partitions=3, source_topics=("orders",))
V1 = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
               (Column("revenue", SqlType.DOUBLE), Column("orders", SqlType.BIGINT)), partitions=3,
               source_topics=("orders",))
ROWS = {f"c{i:02d}": (round(i * 1.5, 2), i + 1) for i in range(20)}
POSITION = Position.from_map({"orders": {0: 19}})


class SwapAtFirstRead(StateDirReader):
    """The state dir's reader, with the writer's swap landing between a statement's planning and its read.

    ``times``: how many requests swap (each flips the generation), to show the give-up after repeated swaps.
    """

    def __init__(self, state_dir: Path, times: int = 1, new: StoreSpec = V1) -> None:
        super().__init__(state_dir)
        self.times = times
        self.generation = 0
        self.new = new

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        if self.times > 0:
            self.times -= 1
            self.generation = 1 - self.generation
            layout.write_store(self.state_dir, "revenue", self.new if self.generation else V0, self.generation)
            self._rescan(force=True)  # noticed at once, as ReplicaSource.query's catalog refresh does
        return super().query(request)


def _write(state_dir: Path, spec: StoreSpec, values) -> None:  # noqa: ANN001 - a function of a row
    app = make_app(state_dir, (spec,), app_id="swap")
    app.start()
    try:
        app.writer("revenue").write_batch(0, [Change(k, values(v)) for k, v in ROWS.items()], POSITION)
    finally:
        app.close()


def _two_generations(root: Path, new: StoreSpec, values) -> Path:  # noqa: ANN001 - a function of a row
    """Generation 0 (V0) serving, generation 1 (``new``) built beside it, as a rebuild leaves them."""
    _write(root / "v0", V0, lambda v: (v[0],))
    _write(root / "v1", new, values)
    shutil.copytree(layout.generation_dir(root / "v1", "revenue", 0), layout.generation_dir(root / "v0", "revenue", 1))
    return root / "v0"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """Generation 1 has a column more (``orders``)."""
    return _two_generations(tmp_path, V1, lambda v: v)


@pytest.mark.parametrize("sql, arrow_scans", [
    ("SELECT * FROM revenue", True),  # the Arrow stream path (the replica test's failure)
    ("SELECT * FROM revenue", False),  # the row path
    ("SELECT customer, revenue FROM revenue WHERE customer = 'c07'", True),  # the point lane
    ("SELECT count(*) AS n, sum(revenue) AS r FROM revenue", True),  # a residual aggregate
])
def test_a_statement_planned_before_a_swap_is_answered_on_the_new_generation(state_dir: Path, sql: str,
                                                                               arrow_scans: bool) -> None:
    reader = SwapAtFirstRead(state_dir)
    gw = Gateway(reader, config=GatewayConfig(arrow_scans=arrow_scans))
    try:
        assert [c.name for c in gw.catalog()["revenue"].values] == ["revenue"]  # planned on generation 0
        result = gw.sql(sql)
        assert reader.generation == 1 and reader.times == 0
        assert result.position == POSITION
        if "count" in sql:
            assert result.rows() == [(len(ROWS), pytest.approx(sum(v[0] for v in ROWS.values())))]
        elif "c07" in sql:
            assert result.rows() == [("c07", ROWS["c07"][0])]
        else:  # the new column is there: the statement was planned again on generation 1
            assert [c for c, _ in result.columns][:3] == ["customer", "revenue", "orders"]
            got = {r[0]: r[1:3] for r in result.rows()}
            assert got == ROWS
    finally:
        gw.close()
        reader.close()


def test_a_store_that_keeps_changing_shape_is_a_retryable_error_not_a_wrong_answer(state_dir: Path) -> None:
    reader = SwapAtFirstRead(state_dir, times=10)
    gw = Gateway(reader)
    try:
        with pytest.raises(StateStoreMigratedError, match="changed shape 3 times") as err:
            gw.sql("SELECT * FROM revenue")
        assert err.value.retryable and "revenue" in str(err.value)
        assert reader.times == 7  # planned three times, then given up
        reader.times = 0
        assert len(gw.sql("SELECT * FROM revenue").rows()) == len(ROWS)  # and the next statement is answered
    finally:
        gw.close()
        reader.close()


def test_a_peer_request_that_meets_a_swap_is_a_retryable_503(state_dir: Path) -> None:
    """``POST /v1/iq`` (a peer forwarding a partition's request) reads the catalog, then the store: same race."""
    from gateway.routing.codec import encode_request
    from stores.iqv2.query import KeyQuery
    from tests.gateway.gwfixtures import Http, serve_gateway

    reader = SwapAtFirstRead(state_dir)
    gw = Gateway(reader)
    try:
        with serve_gateway(gw) as server:
            http = Http(server.url)
            req = StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key("c07"))
            status, _, raw = http.request("POST", "/v1/iq", encode_request(req))
            assert status == 503 and b"STATE_STORE_MIGRATED" in raw and b"retry" in raw, raw[:300]
            status, _, raw = http.request("POST", "/v1/iq", encode_request(req))  # the next one: the new columns
            assert status == 200, raw[:300]
            rows = [r for a in json.loads(raw)["answers"] for r in a["rows"]]
            assert rows == [["c07", *ROWS["c07"]]]
    finally:
        gw.close()
        reader.close()


@pytest.mark.parametrize("arrow_scans", [True, False])
def test_a_column_whose_type_changed_is_a_shape_change_too(tmp_path: Path, arrow_scans: bool) -> None:
    """Same names, same width, another type (``revenue`` DOUBLE → VARCHAR): planned again, answered in the new type."""
    text = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR, nullable=False),
                     (Column("revenue", SqlType.VARCHAR),), partitions=3, source_topics=("orders",))
    reader = SwapAtFirstRead(_two_generations(tmp_path, text, lambda v: (f"{v[0]:.2f}",)), new=text)
    gw = Gateway(reader, config=GatewayConfig(arrow_scans=arrow_scans))
    try:
        result = gw.sql("SELECT * FROM revenue")
        assert reader.generation == 1
        assert result.columns[:2] == [("customer", "VARCHAR"), ("revenue", "VARCHAR")]
        assert {r[0]: r[1] for r in result.rows()} == {k: f"{v[0]:.2f}" for k, v in ROWS.items()}
    finally:
        gw.close()
        reader.close()
