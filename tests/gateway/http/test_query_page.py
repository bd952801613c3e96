"""The query page in a real headless browser: Playwright for Python driving Debian's chromium.

Type a query and see its rows, Position and per-partition outcomes; see an
error inline with line and column; EXPLAIN; follow the CSV link; give the
token when the server asks for one. Every request the page makes goes to
iqgate itself (no CDN). Answers are compared with the same statement over HTTP.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from tests.gateway.gwfixtures import SPECS, Http, serve_gateway

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("IQGATE_CI"),
                                reason="chromium missing (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM is not None, "chromium is not installed (Debian: apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"], timeout=60_000)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any, server: Http) -> Iterator[Any]:
    context = browser.new_context(accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    requests: list[str] = []
    pg.on("request", lambda r: requests.append(r.url))
    yield pg
    context.close()
    assert requests and all(u.startswith(server.url) or u.startswith("blob:") for u in requests), requests


def _run(page: Any, sql: str) -> None:
    page.fill("#sql", sql)
    page.press("#sql", "Control+Enter")


def _table(page: Any, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"{selector} tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def test_stores_are_listed_with_kind_key_partitions_and_positions(page: Any, server: Http) -> None:
    page.goto(server.url + "/")
    page.wait_for_selector("#stores tbody tr")
    rows = {r[0]: r for r in _table(page, "#stores")}
    assert sorted(rows) == sorted(s.name for s in SPECS)
    _, _, stores = server.sql("SHOW TABLES")
    for spec in SPECS:
        name, kind, key, _cols, partitions, positions, _status = rows[spec.name]
        assert (kind, key, int(partitions)) == (spec.kind.value, spec.key.name, spec.partitions)
        assert positions.count(":") >= spec.partitions
    assert page.title() == "iqgate"


def test_typing_a_query_shows_rows_position_and_outcomes(page: Any, server: Http) -> None:
    sql = "SELECT customer, revenue, orders FROM revenue WHERE orders > 10 ORDER BY customer"
    page.goto(server.url + "/")
    _run(page, sql)
    page.wait_for_selector("#results tbody tr")
    _, _, body = server.sql(sql)
    got = _table(page, "#results")
    assert got == [["NULL" if v is None else str(v) for v in r] for r in body["rows"]]
    assert page.eval_on_selector_all("#results thead th", "hs => hs.map(h => h.textContent)") == \
        [c["name"] for c in body["columns"]]
    assert json.loads(page.text_content("#position")) == body["position"]
    outcomes = _table(page, "#partitions")
    assert sorted((r[0], int(r[1]), r[2]) for r in outcomes) == \
        sorted((p["store"], p["partition"], "ok") for p in body["partitions"])


def test_an_error_is_shown_inline_with_line_and_column(page: Any, server: Http) -> None:
    page.goto(server.url + "/")
    _run(page, "SELECT customer,\n  nope FROM revenue")
    page.wait_for_selector("#error:not([hidden])")
    text = page.text_content("#error")
    assert "UNKNOWN_COLUMN" in text and "at line 2, column 3" in text
    assert page.is_hidden("#results")


def test_explain_shows_the_iqv2_plan(page: Any, server: Http) -> None:
    page.goto(server.url + "/")
    page.fill("#sql", "SELECT * FROM revenue WHERE customer = 'c01'")
    page.click("#explain")
    page.wait_for_selector("#plan:not([hidden])")
    plan = page.text_content("#plan")
    _, _, body = server.sql("EXPLAIN SELECT * FROM revenue WHERE customer = 'c01'")
    assert plan == "\n".join(r[0] for r in body["rows"]) and "KeyQuery" in plan


def test_following_the_csv_link_downloads_the_same_result(page: Any, server: Http, tmp_path: Path) -> None:
    sql = "SELECT id, name, balance FROM accounts ORDER BY id LIMIT 20"
    page.goto(server.url + "/")
    _run(page, sql)
    page.wait_for_selector("#links:not([hidden])")
    with page.expect_download() as info:
        page.click("#link-csv")
    target = tmp_path / "result.csv"
    info.value.save_as(target)
    _, _, body = server.sql(sql)
    got = list(csv.reader(io.StringIO(target.read_text())))
    assert got[0] == ["id", "name", "balance"]
    assert got[1:] == [[str(r[0]), r[1] or "", str(r[2])] for r in body["rows"]]
    assert page.get_attribute("#link-arrow", "href").endswith("format=arrow")


def test_the_page_asks_for_the_token(browser: Any, gw: Gateway) -> None:
    with serve_gateway(gw, GatewayConfig(auth_token="page-token")) as srv:
        context = browser.new_context(accept_downloads=True)
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.goto(srv.url + "/")
            page.wait_for_selector("#auth:not([hidden])")
            page.fill("#token", "wrong")
            page.click("#auth-submit")
            # (no wait_for_function: the page's CSP forbids the eval it uses)
            page.locator("#auth-msg", has_text="not valid").wait_for()
            page.fill("#token", "page-token")
            page.click("#auth-submit")
            page.wait_for_selector("#stores tbody tr")
            assert page.is_hidden("#auth")
            _run(page, "SELECT count(*) AS n FROM revenue")
            page.wait_for_selector("#results tbody tr")
            assert _table(page, "#results") == [[str(Http(srv.url, "page-token").sql(
                "SELECT count(*) AS n FROM revenue")[2]["rows"][0][0])]]
            with page.expect_download() as info:  # the link carries no token: the page fetches with it
                page.click("#link-csv")
            assert Path(info.value.path()).read_text().splitlines()[0] == "n"
        finally:
            context.close()


def test_a_subscription_is_a_live_table_and_a_chart(browser: Any, tmp_path: Path) -> None:
    """SUBSCRIBE on the page: the rows held update in place as the store changes (a row keeps its table row), the
    table is the pull query's answer once the page has the latest progress, and a numeric column is charted."""
    from tests.gateway.live.livefixtures import http_pull, live_env

    with live_env(tmp_path, kinds=("kv",)) as env:
        url = env.http.url  # type: ignore[union-attr]
        context = browser.new_context()
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.goto(url + "/")
            _run(page, "SUBSCRIBE (SELECT k, total, n FROM kv)")
            page.wait_for_selector("#live:not([hidden])")
            page.wait_for_selector("#results tbody tr")
            assert page.eval_on_selector_all("#results thead th", "hs => hs.map(h => h.textContent)") == \
                ["k", "total", "n"]
            assert page.input_value("#live-column") == "total"
            before = {h.get_attribute("data-key"): h for h in page.query_selector_all("#results tbody tr")}
            assert before
            for _ in range(4):
                env.write(env.batches + 1)
                time.sleep(0.3)
            want_position = None
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                text = page.text_content("#live-position") or ""
                if text.startswith("{") and json.loads(text)[env.topic("kv")]["0"] == env.batches - 1:
                    want_position = text
                    break
                time.sleep(0.1)
            assert want_position is not None, "the page never showed the latest progress"
            rows = sorted(tuple(r) for r in _table(page, "#results"))
            pulled = http_pull(url, "SELECT k, total, n FROM kv")
            assert rows == sorted(tuple(str(v) for v in r) for r in pulled.elements())
            kept = {json.dumps([r[0]], separators=(",", ":")) for r in pulled}
            changed = 0
            for key, handle in before.items():  # a row that stayed is the same table row, updated in place
                assert handle.evaluate("e => e.isConnected") == (key in kept), key
                changed += key in kept and handle.text_content() != ""
            assert changed
            points = int(page.get_attribute("#live-chart", "data-points") or 0)
            assert points >= 2
            assert float(page.get_attribute("#live-chart", "data-last") or "nan") == pytest.approx(
                sum(r[1] for r in pulled))
            page.click("#live-stop")
            page.wait_for_selector("#live-state.ended")
        finally:
            context.close()
        deadline = time.monotonic() + 10
        while env.gw.subscriptions()["open"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env.gw.subscriptions()["open"] == 0  # stopping (or leaving) the page ends the subscription
