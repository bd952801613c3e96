"""The query page's routes over plain HTTP: open without the token (they hold no data), everything else not;
the result links (``GET /v1/query``) answer like ``POST /v1/sql`` and refuse bad input by name."""

from __future__ import annotations

import json
import re
import urllib.parse

from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from tests.gateway.gwfixtures import Http, serve_gateway


def _query(http: Http, **args: str) -> tuple[int, dict[str, str], bytes]:
    return http.request("GET", "/v1/query?" + urllib.parse.urlencode(args))


def test_the_page_and_its_assets_need_no_token_and_no_cdn(gw: Gateway) -> None:
    with serve_gateway(gw, GatewayConfig(auth_token="t0k")) as srv:
        anon = Http(srv.url)
        status, hdrs, html = anon.request("GET", "/")
        assert status == 200 and hdrs["content-type"].startswith("text/html")
        assets = [a for a in re.findall(rb'(?:src|href)="([^"]+)"', html) if a != b"#"]
        assert assets and all(a.startswith(b"/page/") for a in assets)  # nothing from elsewhere
        for a in assets:
            st, h, body = anon.request("GET", a.decode())
            assert st == 200 and body and b"http://" not in body and b"https://" not in body, a
        assert "default-src 'self'" in hdrs["content-security-policy"]
        assert Http(srv.url, token="t0k").request("GET", "/page/nope.js")[0] == 404
        assert _query(anon, sql="SELECT 1")[0] == 401  # data needs the token
        assert _query(Http(srv.url, token="t0k"), sql="SELECT 1")[0] == 200


def test_result_links_answer_like_post(server: Http) -> None:
    sql = "SELECT customer, orders FROM revenue ORDER BY customer LIMIT 3"
    _, _, posted = server.sql(sql)
    status, hdrs, body = _query(server, sql=sql)
    assert status == 200 and json.loads(body) == posted
    status, hdrs, body = _query(server, sql=sql, format="csv")
    assert hdrs["content-disposition"] == 'attachment; filename="iqgate-result.csv"'
    assert body.decode().splitlines() == ["customer,orders"] + [f"{c},{n}" for c, n in posted["rows"]]
    assert json.loads(hdrs["x-iq-position"]) == posted["position"]
    status, hdrs, body = _query(server, sql=sql, format="arrow")
    assert status == 200 and hdrs["content-type"] == "application/vnd.apache.arrow.stream" and body[:4] == b"\xff\xff\xff\xff"


def test_result_links_refuse_bad_input_by_name(server: Http) -> None:
    for args, words in [({"sql": "SELECT 1", "format": "xml"}, "format must be one of"),
                        ({"sql": "SELECT 1", "position": "{nope"}, "position is not valid JSON"),
                        ({"sql": "SELECT 1", "position": "[" * 60_000}, "position nests JSON too deeply"),
                        ({}, '"sql" is required'),
                        ({"sql": "SELECT * FROM nope"}, "UNKNOWN_STORE")]:
        status, _, body = _query(server, **args)
        err = json.loads(body)["error"]
        assert status in (400, 404) and (words in err["message"] or words == err["code"]), (args, err)
