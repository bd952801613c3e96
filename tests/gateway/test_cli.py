"""The ``iqgate`` command: sql/explain against a server and a state dir, produce, serve --state-dir, errors."""

from __future__ import annotations

import csv
import io
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.main import main
from gateway.serving.hosting import PipelineError, load_pipeline
from stores.app.streams import StreamsApp
from stores.log.eventlog import EventLog
from tests.gateway.gwfixtures import Http, Shop

ROOT = Path(__file__).resolve().parents[2]


def test_sql_json_against_a_server(server: Http, shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    c = sorted(shop.revenue)[4]
    rc = main(["sql", "SELECT customer, orders FROM revenue WHERE customer = ?", "--param", c,
               "--url", server.url, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["rows"] == [[c, shop.revenue[c][1]]]


def test_sql_table_and_csv(server: Http, shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT customer, orders FROM revenue ORDER BY customer LIMIT 3"
    assert main(["sql", sql, "--url", server.url]) == 0
    text = capsys.readouterr().out
    first = sorted(shop.revenue)[0]
    lines = text.splitlines()
    assert lines[0].split("|")[0].strip() == "customer" and "(3 rows)" in text
    assert lines[2].split("|")[0].strip() == first and lines[2].split("|")[1].strip() == str(shop.revenue[first][1])
    assert main(["sql", sql, "--url", server.url, "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows == [["customer", "orders"]] + [[k, str(shop.revenue[k][1])] for k in sorted(shop.revenue)[:3]]


def test_sql_on_a_state_dir_and_explain(shop_app: StreamsApp, shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sql", "SELECT count(*) AS n FROM revenue", "--state-dir", str(shop_app.state_dir), "--format",
               "json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["rows"] == [[len(shop.revenue)]]
    assert main(["explain", "SELECT * FROM revenue WHERE customer = 'c01'", "--state-dir",
                 str(shop_app.state_dir)]) == 0
    assert "KeyQuery" in capsys.readouterr().out


def test_errors_exit_codes_and_messages(server: Http, shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "SELECT customer\nFROM revenue WHERE = 1", "--url", server.url]) == 2
    err = capsys.readouterr().err
    assert "SQL_SYNTAX_ERROR at line 2" in err
    ahead = json.dumps({"orders": {"0": shop.position.offset("orders", 0) + 9}})
    assert main(["sql", "SELECT * FROM revenue", "--url", server.url, "--position", ahead]) == 1
    assert "NOT_UP_TO_BOUND" in capsys.readouterr().err
    assert main(["sql", "SELECT 1", "--url", server.url, "--position", "{x"]) == 2  # a usage error: one line
    assert "--position is not JSON" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert main(["sql", "SELECT 1", "--url", dead, "--timeout", "5"]) == 1
    assert "cannot reach" in capsys.readouterr().err


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str, code: int = 1) -> None:
    """The command fails with ``code`` and says ``needle`` on stderr, in a line or two and no traceback."""
    assert main(argv) == code
    err = capsys.readouterr().err
    assert re.search(needle, err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def _stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_produce_appends_and_prints_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    lines = [{"key": f"c{i}", "value": {"amount": i * 1.5}, "timestamp": 1_700_000_000_000 + i} for i in range(6)]
    lines[2]["headers"] = {"channel": "web"}  # record headers (issue 16), kept per record
    lines[3]["headers"] = [["a", "1"], ["a", "2"]]
    _stdin(monkeypatch, "\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert main(["produce", "orders", "--log", str(tmp_path / "log"), "--partitions", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    log = EventLog(tmp_path / "log")
    recs = [r for p in range(2) for r in log.read("orders", p)]
    assert out["records"] == 6 and sorted(r.key for r in recs) == sorted(x["key"] for x in lines)
    assert {r.key: r.headers for r in recs if r.headers} == {"c2": (("channel", b"web"),),
                                                             "c3": (("a", b"1"), ("a", b"2"))}
    assert out["position"] == {"orders": {str(p): o for p, o in log.last_offsets("orders").items()}}


@pytest.mark.parametrize(("text", "needle"), [
    ('{"key": "a", "value": {"x": 1}}\nnot json\n', "line 2 is not JSON"),
    ('{"key": "a"}\n{"value": {"x": 1}}\n', "line 2 must be an object"),
    ('{"key": "a", "value": {}, "extra": 1}\n', "line 1 must be an object"),
    ('{"key": "a", "value": {}}\n{"key": "b", "value": {}, "headers": 5}\n', "record 1 .* headers must be a list"),
    ('{"key": "a", "value": {}}\n{"key": "b", "value": {"x": ' + "[" * 100_000 + "]" * 100_000 + '}}\n',
     "line 2 nests JSON too deeply"),  # was a RecursionError traceback
    ('{"key": "a", "value": {"x": ' + "[" * 900 + "]" * 900 + '}}\n', "record 0 of topic 'orders': value nests more than 256 levels deep"),
])
def test_produce_writes_nothing_on_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                             needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=2)
    _stdin(monkeypatch, text)
    _fails(capsys, ["produce", "orders", "--log", str(tmp_path / "log")], needle)
    assert sum(log.end_offsets("orders").values()) == 0


def test_produce_needs_an_existing_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, '{"key": "a", "value": {}}\n')
    _fails(capsys, ["produce", "nope", "--log", str(tmp_path / "log")], "does not exist")
    _fails(capsys, ["produce", "../up", "--partitions", "1", "--log", str(tmp_path / "log")],
           r"iqgate produce: invalid topic name '\.\./up': use 1-249 of")
    assert not (tmp_path / "up").exists()


def test_produce_to_kafka_prints_the_broker_offsets(kafka_broker: Any, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The printed Position is the last offset per partition from the delivery reports: a read-your-writes bound."""
    from stores import KafkaSource

    bs = kafka_broker.bootstrap_servers
    lines = [{"key": f"c{i}", "value": {"amount": i}, "timestamp": 1_700_000_000_000 + i} for i in range(50)]
    _stdin(monkeypatch, "\n".join(json.dumps(x) for x in lines))
    assert main(["produce", "cli-orders", "--bootstrap-servers", bs, "--partitions", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    src = KafkaSource(bs)
    assert out["records"] == 50
    assert out["position"] == {"cli-orders": {str(p): o for p, o in src.last_offsets("cli-orders").items()}}
    _stdin(monkeypatch, '{"key": "a", "value": {}}\nnot json\n')
    _fails(capsys, ["produce", "cli-orders", "--bootstrap-servers", bs], "line 2 is not JSON")
    assert src.last_offsets("cli-orders") == {int(p): o for p, o in out["position"]["cli-orders"].items()}
    _stdin(monkeypatch, '{"key": "a", "value": {}}\n')
    _fails(capsys, ["produce", "nope", "--bootstrap-servers", bs], f"topic 'nope' does not exist in Kafka at {bs}")
    assert not src.has_topic("nope")
    _fails(capsys, ["produce", "cli-orders", "--bootstrap-servers", bs, "--kafka-option", "oops"],
           "--kafka-option must be name=value", code=2)
    src.close()


def test_a_pipeline_reads_kafka_when_the_command_or_the_file_names_it(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gateway.serving.hosting import pipeline_source
    from stores import EventLog, KafkaSource

    plain = SimpleNamespace()
    assert isinstance(pipeline_source(plain, None, None, tmp_path / "log"), EventLog)
    named = SimpleNamespace(BOOTSTRAP_SERVERS="h1:9092", KAFKA_OPTIONS={"security.protocol": "SSL"})
    src = pipeline_source(named, None, {"sasl.mechanism": "PLAIN"}, tmp_path / "log")
    assert isinstance(src, KafkaSource) and src.bootstrap_servers == "h1:9092"
    assert dict(src.options or {}) == {"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}
    assert pipeline_source(named, "h2:9092", None, tmp_path / "log").bootstrap_servers == "h2:9092"
    with pytest.raises(PipelineError, match="BOOTSTRAP_SERVERS must be"):
        pipeline_source(SimpleNamespace(BOOTSTRAP_SERVERS=""), None, None, tmp_path / "log")


def test_serve_needs_a_pipeline_or_a_state_dir(capsys: pytest.CaptureFixture[str]) -> None:
    _fails(capsys, ["serve"], "pipeline file, or --state-dir", code=2)


def test_pipeline_file_convention_is_checked(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="does not exist"):
        load_pipeline(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("APPLICATION_ID = 'x'\n")
    with pytest.raises(PipelineError, match="must define TOPICS, build"):
        load_pipeline(bad)
    bad.write_text("APPLICATION_ID = 'x'\nTOPICS = {'t': 0}\ndef build(spark, log): pass\n")
    with pytest.raises(PipelineError, match="TOPICS must map"):
        load_pipeline(bad)
    bad.write_text("APPLICATION_ID = 'x'\nTOPICS = {'t': 1}\nbuild = 3\n")
    with pytest.raises(PipelineError, match="build must be a function"):
        load_pipeline(bad)
    txt = tmp_path / "pipeline.txt"
    txt.write_text("APPLICATION_ID = 'x'\n")
    with pytest.raises(PipelineError, match="not a Python file"):
        load_pipeline(txt)


@pytest.mark.parametrize("text, says, line", [
    ("import os\n\nraise ValueError('no config here')\n", "failed to load: ValueError: no config here", 3),
    ("APPLICATION_ID = 'x'\nTOPICS = {'t': (\n", "failed to load: line 2, column 16: '(' was never closed", None),
    ("APPLICATION_ID = 'x'\nTOPICS = {'t': 1}\n\ndef helper(log):\n    return log.no_such_thing\n\n"
     "def build(spark, log):\n    return helper(log)\n",
     "build(spark, log) failed: AttributeError: 'EventLog' object has no attribute 'no_such_thing'", 5),
])
def test_errors_in_the_pipeline_files_own_code_name_the_file_and_its_lines(
        tmp_path: Path, text: str, says: str, line: int | None, capsys: pytest.CaptureFixture[str]) -> None:
    """The user's mistake, in the user's lines (as ``python file.py`` would show them), without iqgate's frames."""
    from gateway.serving.hosting import start_pipeline

    f = tmp_path / "mine.py"
    f.write_text(text)
    with pytest.raises(PipelineError) as info:
        start_pipeline(load_pipeline(f), EventLog(tmp_path / "log"), tmp_path / "state", spark=object())
    message = str(info.value)
    assert message.startswith(f"pipeline file {str(f)!r} {says}"), message
    if line is not None:
        assert f'File "{f}", line {line}' in message
    assert "gateway" not in message.split(says, 1)[1]  # only the user's frames
    if "failed to load" in says:  # (a build error would need Spark and a port: start_pipeline above is that path)
        assert main(["serve", str(f), "--data-dir", str(tmp_path / "data")]) == 1
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_read_only_server_processes_on_one_state_dir(shop_app: StreamsApp, shop: Shop) -> None:
    """``iqgate serve --state-dir`` worker processes read the same store files while the app holds them."""
    ports = [_free_port(), _free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(shop_app.state_dir),
                               "--port", str(p), "--threads", "2", "--workers", "1"], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for p in ports]
    try:
        for port, proc in zip(ports, procs):
            http = Http(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                try:
                    with urllib.request.urlopen(f"{http.url}/v1/ping", timeout=2):
                        break
                except OSError:
                    time.sleep(0.2)
            status, _, body = http.sql("SELECT customer, revenue, orders FROM revenue ORDER BY customer")
            assert status == 200
            assert [tuple(r) for r in body["rows"]] == [(k, *shop.revenue[k]) for k in sorted(shop.revenue)]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def test_a_missing_pipeline_file_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "/nonexistent/pipeline.py"]) == 1
    assert "pipeline file '/nonexistent/pipeline.py' does not exist" in capsys.readouterr().err


HAND_PIPELINE = '''
from stores import Column, SqlType, StoreKind, StoreSpec, StoreTopology

APPLICATION_ID = "hand"
TOPICS = {"ticks": 2}


def build(spark, log):
    return StoreTopology([StoreSpec("seen", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
                                    (Column("n", SqlType.BIGINT),), partitions=2, source_topics=("ticks",))])
'''


def test_waiting_for_a_pipeline_that_does_not_catch_up(tmp_path: Path) -> None:
    """A pipeline (here one without a runtime, so nothing applies the log) fails the wait with a clear error."""
    from gateway.serving.hosting import start_pipeline, wait_caught_up

    f = tmp_path / "hand.py"
    f.write_text(HAND_PIPELINE)
    module = load_pipeline(f)
    log = EventLog(tmp_path / "log")
    app = start_pipeline(module, log, tmp_path / "state", spark=object())
    try:
        assert log.list_topics() == {"ticks": 2}
        wait_caught_up(app, log, timeout_s=1)  # an empty log: nothing to wait for
        log.append_batch("ticks", [("a", {"x": 1}, 1), ("b", {"x": 2}, 2)])
        seen: list[tuple[int, int]] = []
        with pytest.raises(PipelineError, match="applied 0 of 2 records"):
            wait_caught_up(app, log, timeout_s=0.5, progress=lambda d, t: seen.append((d, t)))
        assert seen and seen[-1] == (0, 2)
        app.close()
        with pytest.raises(PipelineError, match="stopped while loading"):
            wait_caught_up(app, log, timeout_s=5)
    finally:
        app.close()


@pytest.mark.parametrize("argv, says", [
    (["serve", "--state-dir", ".", "--max-rows", "0"], "--max-rows: must be at least 1, got 0"),
    (["serve", "--state-dir", ".", "--statement-timeout-ms", "-5"], "--statement-timeout-ms: must be at least 1"),
    (["serve", "--state-dir", ".", "--threads", "x"], "--threads: 'x' is not an integer"),
    (["demo", "--orders", "-1"], "--orders: must be at least 0, got -1"),
    (["demo", "--customers", "0"], "--customers: must be at least 1, got 0"),
    (["produce", "orders", "--partitions", "0"], "--partitions: must be at least 1, got 0"),
    (["sql", "SELECT 1", "--wait-ms", "-1"], "--wait-ms: must be at least 0, got -1"),
    (["serve", "--state-dir", ".", "--port", "99999"], "--port: a TCP port is 0-65535, got 99999"),
    (["serve", "--state-dir", ".", "--port", "-1"], "--port: must be at least 0, got -1"),
    (["serve", "--state-dir", ".", "--pg-port", "65536"], "--pg-port: a TCP port is 0-65535, got 65536"),
    (["replica", "--application-id", "a", "--port", "70000"], "--port: a TCP port is 0-65535, got 70000"),
    (["demo", "--port", "http"], "--port: 'http' is not an integer"),
    (["sql", "SELECT 1", "--url", "localhost:8080"], "--url: 'localhost:8080' is not an http:// or https:// URL"),
    (["sql", "SELECT 1", "--url", "ftp://h"], "--url: 'ftp://h' is not an http:// or https:// URL"),
    (["explain", "SELECT 1", "--url", "http://h:99999"], "--url: 'http://h:99999' is not a URL: Port out of range"),
    (["replica", "--application-id", "a", "--advertised-url", "h:1"], "--advertised-url: 'h:1' is not an http://"),
    (["sql", "SELECT 1", "--timeout", "-1"], "--timeout: must be a finite number of seconds > 0, got -1"),
    (["sql", "SELECT 1", "--timeout", "nan"], "--timeout: must be a finite number of seconds > 0, got nan"),
    (["demo", "--timeout", "inf"], "--timeout: must be a finite number of seconds > 0, got inf"),
    (["upgrade", "p.py", "--timeout", "soon"], "--timeout: 'soon' is not a number of seconds"),
])
def test_bad_numbers_are_usage_errors(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_demo_examples_pick_the_busiest_customer_in_one_pass() -> None:
    """Ties go to the first name; the example timestamp is the busiest customer's median order time."""
    from gateway.cli.demo import example_queries

    orders = [("c2", {}, 5), ("c1", {}, 1), ("c2", {}, 3), ("c1", {}, 2), ("c3", {}, 9), ("c1", {}, 7), ("c2", {}, 8)]
    queries = dict(example_queries(orders))
    lookup = queries["Point lookup (one KeyQuery to one partition)"]
    assert lookup.endswith("WHERE key = 'c1'")  # c1 and c2 have 3 orders each; c1 sorts first
    as_of = queries["The order current at an instant (VersionedKeyQuery as of)"]
    assert "TIMESTAMP '1970-01-01 00:00:00'" in as_of  # c1's times 1, 2, 7 ms: the median is 2 ms


def test_demo_examples_scale_to_many_customers() -> None:
    """300,000 orders over 300,000 customers (was O(customers x orders): never finished)."""
    from examples.shop_pipeline import generate_orders
    from gateway.cli.demo import example_queries

    orders = generate_orders(300_000, customers=300_000)
    assert len(example_queries(orders)) == 5


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.cli.main import build_parser
    from gateway.cli.options import UsageError, config_from_args

    def config(*argv: str) -> Any:
        return config_from_args(build_parser().parse_args(["serve", "--state-dir", ".", *argv]))

    monkeypatch.delenv("IQGATE_TOKEN", raising=False)
    assert config().auth_token is None
    assert config("--token", "on-the-command-line").auth_token == "on-the-command-line"
    monkeypatch.setenv("IQGATE_TOKEN", "from-the-env")
    assert config().auth_token == "from-the-env"
    secret = tmp_path / "token"
    secret.write_text("from-a-file\n")
    assert config("--token-file", str(secret)).auth_token == "from-a-file"
    secret.write_text("  \n")
    with pytest.raises(UsageError, match="is empty"):
        config("--token-file", str(secret))
    with pytest.raises(UsageError, match="cannot read --token-file"):
        config("--token-file", str(tmp_path / "missing"))
    assert config("--max-memory", "512MB").max_memory_bytes == 512 * 2**20
    assert config("--max-memory", "2GiB").max_memory_bytes == 2 * 2**30


@pytest.mark.parametrize("value, says", [("lots", "not a size"), ("1MB", "too small")])
def test_bad_memory_sizes_are_usage_errors(value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--state-dir", ".", "--max-memory", value])
    assert info.value.code == 2 and says in capsys.readouterr().err


def test_planning_a_command_logs_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """sqlglot's 'Falling back to parsing as a Command' line echoed user SQL into the server log."""
    import planner
    from tests.planner.planner_catalog import CATALOG

    planner.plan("RESET ALL", CATALOG)
    assert "Falling back" not in capfd.readouterr().err
