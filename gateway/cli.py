"""``iqgate``: serve | replica | sql | explain | produce | upgrade | demo.

Every command reports bad input as one line on stderr naming what was wrong
and exits non-zero (2 for usage and SQL errors, 1 for failures at run time),
so scripts can tell "fix your command" from "try again".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .console import die, print_result, request_stop, reset_stop, wait_for_stop
from .errors import GatewayError
from .json_values import dumps
from .options import (
    config_from_args,
    config_kwargs,
    http_url,
    non_negative_int,
    pg_args,
    positive_int,
    positive_seconds,
    server_args,
)
from .pg.launch import pg_server as _pg_server
from .pg.launch import start_pg as _start_pg
from .replica_cmd import add_replica_parser, routing_args
from .upgrade_cli import add_upgrade_parser

__all__ = ["main", "console", "request_stop"]

DEFAULT_URL = "http://127.0.0.1:8080"


# -- running SQL: against a server or a state directory -----------------------------------------
def _post(url: str, payload: dict[str, Any], token: str | None, timeout_s: float) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/sql", data=json.dumps(payload).encode(), headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        raise GatewayError.from_error_body(err.code, body) from None
    except urllib.error.URLError as err:
        raise ConnectionError(f"cannot reach the iqgate server at {url}: {err.reason}") from None


def _run_sql(args: argparse.Namespace, text: str) -> dict[str, Any]:
    params = [_param(p) for p in args.param] or None
    try:
        position = json.loads(args.position) if args.position else None
    except ValueError as exc:
        raise SystemExit(f"iqgate: --position is not JSON: {exc}") from None
    if args.state_dir:
        from .engine import Gateway

        gw = Gateway.open(args.state_dir)
        try:
            res = gw.sql(text, params, position, partial=args.partial or None, wait_ms=args.wait_ms)
            body = {"columns": [{"name": n, "type": t} for n, t in res.columns], "rows": res.rows(),
                    "row_count": res.row_count, "position": res.position.to_json_map(),
                    "partitions": [p.to_json() for p in res.partitions], "statement": res.statement.value}
            return json.loads(dumps(body))
        finally:
            gw.close()
    payload: dict[str, Any] = {"sql": text}
    if params is not None:
        payload["params"] = params
    if position is not None:
        payload["position"] = position
    if args.partial:
        payload["partial"] = True
    if args.wait_ms is not None:
        payload["wait_ms"] = args.wait_ms
    return _post(args.url, payload, args.token, args.timeout)


def _param(text: str) -> Any:
    """``--param`` values are JSON when they parse as JSON (numbers, true, null), else strings."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_sql(args: argparse.Namespace) -> int:
    body = _run_sql(args, args.sql)
    print_result(body, args.format, sys.stdout)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    text = args.sql if args.sql.lstrip().upper().startswith("EXPLAIN") else f"EXPLAIN {args.sql}"
    body = _run_sql(args, text)
    for row in body["rows"]:
        print(row[0])
    return 0


# -- produce ---------------------------------------------------------------------------------------
def cmd_produce(args: argparse.Namespace) -> int:
    """JSON lines ``{"key", "value", "timestamp"?, "headers"?}`` from stdin into a topic of the event log or of Kafka.

    ``headers``: ``{"name": "text"}`` or ``[["name", "text"], …]`` (record headers, values as UTF-8).

    Prints the Position of what was written (the last offset per partition), usable verbatim as
    ``AS OF POSITION`` for read-your-writes. Every line is checked before anything is written.
    """
    from .hosting import source_log

    source = source_log(args.bootstrap_servers, _kafka_options(args), args.log)
    where = source.describe()
    if args.partitions is not None:
        try:
            source.create_topic(args.topic, partitions=args.partitions, exist_ok=True)
        except ValueError as exc:  # a topic name Kafka would refuse
            raise SystemExit(f"iqgate produce: {exc}") from None
    elif not source.has_topic(args.topic):
        raise SystemExit(f"iqgate produce: topic {args.topic!r} does not exist in {where}; "
                         "pass --partitions N to create it")
    records = []
    for lineno, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise SystemExit(f"iqgate produce: stdin line {lineno} is not JSON: {exc}; nothing was written") from None
        except RecursionError:
            from stores.log.records import MAX_VALUE_DEPTH

            raise SystemExit(f"iqgate produce: stdin line {lineno} nests JSON too deeply (a value may nest "
                             f"{MAX_VALUE_DEPTH} levels); nothing was written") from None
        if not isinstance(rec, dict) or "key" not in rec or not set(rec) <= {"key", "value", "timestamp", "headers"}:
            raise SystemExit(f"iqgate produce: stdin line {lineno} must be an object with \"key\", \"value\" and "
                             f"optionally \"timestamp\" (epoch ms) and \"headers\"; got {line.strip()[:80]!r}; "
                             "nothing was written")
        records.append((rec["key"], rec.get("value"), rec.get("timestamp"), rec.get("headers")))
    try:
        written = source.append_batch(args.topic, records)
    except Exception as exc:  # noqa: BLE001 - records are checked before anything is written
        from stores.log.eventlog import LogWriteError
        from stores.log.kafka import KafkaError

        if isinstance(exc, (KafkaError, LogWriteError)):  # their messages say exactly what was written
            raise SystemExit(f"iqgate produce: {exc}") from None
        raise SystemExit(f"iqgate produce: {exc}; nothing was written") from None
    last: dict[str, dict[str, int]] = {args.topic: {}}
    for p, o in written:
        last[args.topic][str(p)] = max(o, last[args.topic].get(str(p), -1))
    print(json.dumps({"records": len(written), "position": last}))
    return 0


def _kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka-option name=value`` (repeatable): librdkafka client settings such as security.protocol, sasl.*."""
    out = {}
    for item in getattr(args, "kafka_option", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"iqgate: --kafka-option must be name=value, got {item!r}")
        out[name.strip()] = value
    return out


# -- serve and demo ------------------------------------------------------------------------------------
def _serve_until_stopped(gw: Any, args: argparse.Namespace, what: str) -> None:
    from .http import create_app
    from .server import ServerThread, tune_process_for_serving

    tune_process_for_serving()
    sock, board, workers = _listen(args)
    pg = _pg_server(gw, args) if args.listen_fd is None else None
    server = ServerThread(create_app(gw), args.host, args.port, args.threads, on_failure=die, sock=sock,
                          cpu=_serving_cpu(args), board=board).start()
    if args.listen_fd is None:
        _start_membership(gw, args, server)
        print(f"iqgate: serving {what} on {server.url}{_workers_note(workers)}", file=sys.stderr, flush=True)
    _start_pg(pg)
    try:
        wait_for_stop()
    finally:
        _stop_membership(gw)
        server.close()
        if workers is not None:
            workers.stop()
        if pg is not None:
            pg.close()


def _listen(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(the socket to serve on or None, its accept board or None, the extra worker processes or None) for
    ``--workers``/``--listen-fd``."""
    import socket

    from .accept_board import AcceptBoard
    from .workers import INDEX_ENV, Workers, die_with_parent, listening_socket, worker_index

    if args.listen_fd is not None:  # a worker: accept on the first process's socket, die with it
        from .console import request_stop

        die_with_parent(request_stop)
        board = None
        if args.accept_board_fd is not None:
            try:
                index = worker_index()
                if index is None:
                    raise ValueError(f"{INDEX_ENV} is not a number")
                board = AcceptBoard.attach(args.accept_board_fd, index)
            except (OSError, ValueError) as exc:  # serve without it: accepting stays correct, only less even
                print(f"iqgate: worker: no accept board ({exc}); accepting without it", file=sys.stderr, flush=True)
        return socket.socket(fileno=args.listen_fd), board, None
    n = args.workers
    if n <= 1:
        return None, None, None
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        raise SystemExit(f"iqgate: cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    try:
        board = AcceptBoard.create(n)
    except (AttributeError, OSError):  # no memfd here (not Linux): every process accepts as the kernel deals
        board = None
    state_dir = args.state_dir or str(Path(args.data_dir) / "state")
    token = _token_for_workers(args)
    return sock, board, Workers(n - 1, sock, state_dir, _worker_options(args),
                                {"IQGATE_TOKEN": token} if token else None,
                                board_fd=board.fileno() if board is not None else None).start()


def _serving_cpu(args: argparse.Namespace) -> int | None:
    """With ``--workers`` N > 1, each serving process's HTTP threads on a CPU of their own (``ServerThread``).

    ``--no-pin-cpus`` leaves them to the OS scheduler: on a machine shared with other busy processes a pinned
    CPU can be the one they are using.
    """
    from .workers import serving_cpu, worker_index

    if getattr(args, "no_pin_cpus", False):
        return None
    if args.listen_fd is not None:  # a worker: its index comes from the first process
        index = worker_index()
        return None if index is None else serving_cpu(index)
    return serving_cpu(0) if (args.workers or 1) > 1 else None


def _token_for_workers(args: argparse.Namespace) -> str | None:
    from .options import config_kwargs

    return config_kwargs(args).get("auth_token")


def _worker_options(args: argparse.Namespace) -> list[str]:
    """The limits a worker enforces, as flags (the token goes by environment, never on a command line)."""
    out = ["--threads", str(args.threads), "--max-rows", str(args.max_rows),
           "--statement-timeout-ms", str(args.statement_timeout_ms)]
    if args.max_memory is not None:
        out += ["--max-memory", str(args.max_memory)]
    if args.no_table_scans:
        out.append("--no-table-scans")
    if getattr(args, "no_pin_cpus", False):
        out.append("--no-pin-cpus")
    return out


def _workers_note(workers: Any) -> str:
    return "" if workers is None else f" ({workers.count + 1} processes: this one and workers {workers.pids})"


def cmd_serve(args: argparse.Namespace) -> int:
    from .engine import Gateway
    from .workers import default_workers

    if args.workers is None:
        args.workers = default_workers()
    if getattr(args, "peers", "") and args.workers > 1:
        # routing keeps its membership (peers' lags and health) in the serving process: one process routes
        print("iqgate: --peers: serving with one process (--workers is not combined with routing yet)",
              file=sys.stderr, flush=True)
        args.workers = 1

    if args.pipeline is None:
        if not args.state_dir:
            raise SystemExit("iqgate serve: give a pipeline file, or --state-dir DIR to serve its stores read-only")
        if args.listen_fd is None:
            _say_open_files_limit()
        else:
            from .hosting import raise_open_files_limit

            raise_open_files_limit()
        from stores.app.reader import StateDirReader

        from .replica_cmd import routed
        from .server import keep_pandas_out, lean_allocators

        keep_pandas_out()  # read-only: nothing here needs pandas (~50 MB a process)
        lean_allocators()
        kwargs = config_kwargs(args)
        reader = StateDirReader(args.state_dir)
        gw = Gateway(routed(reader, args, kwargs.get("auth_token")), config=config_from_args(args))
        try:
            _serve_until_stopped(gw, args, f"{args.state_dir} read-only")
        finally:
            gw.close()
            reader.close()
        return 0
    from .hosting import HostedSource, load_pipeline, pipeline_source, start_pipeline
    from .http import create_app
    from .replica_cmd import discover, routed
    from .server import ServerThread, tune_process_for_serving
    from .upgrade_cli import print_plan

    _say_open_files_limit()
    module = load_pipeline(args.pipeline)
    base = Path(args.data_dir)
    log = pipeline_source(module, args.bootstrap_servers, _kafka_options(args), args.log_dir or base / "log")
    state_dir = Path(args.state_dir or base / "state")
    # Serve the stores already on disk from the first second; the app takes over once Spark has started.
    hosted = HostedSource(state_dir)
    tune_process_for_serving()
    cfg = config_from_args(args)
    gw = Gateway(routed(hosted, args, cfg.auth_token), config=cfg)
    sock, board, workers = _listen(args)
    pg = _pg_server(gw, args)
    server = ServerThread(create_app(gw), args.host, args.port, args.threads, on_failure=die, sock=sock,
                          cpu=_serving_cpu(args), board=board).start()
    _start_membership(gw, args, server)
    discover(gw.source, args, log, module.APPLICATION_ID)
    print(f"iqgate: serving pipeline {module.APPLICATION_ID} on {server.url}{_workers_note(workers)} (the stores "
          "on disk, read-only, while Spark starts)", file=sys.stderr, flush=True)
    _start_pg(pg)
    app = None
    try:
        app = start_pipeline(module, log, state_dir, master=args.master,
                             rebuild_from_available=args.rebuild_from_available)
        hosted.attach(app)
        print_plan(app.upgrades.plan)
        _report_catch_up(app)
        wait_for_stop()
    finally:
        if pg is not None:
            pg.close()
        server.close()
        _stop_membership(gw)
        if workers is not None:
            workers.stop()
        if app is not None:
            app.close()
        hosted.close()
    return 0


def _start_membership(gw: Any, args: argparse.Namespace, server: Any) -> None:
    """With --peers: learn this server's URL from the bound socket (unless advertised) and start the heartbeats."""
    src = gw.source
    if hasattr(src, "membership"):
        if not getattr(args, "advertised_url", None):
            src.self_url = server.url.rstrip("/")
        src.membership.start()


def _stop_membership(gw: Any) -> None:
    from .replica_cmd import stop_discovery

    stop_discovery(gw.source)
    membership = getattr(gw.source, "membership", None)
    if membership is not None:
        membership.close()


def _say_open_files_limit() -> None:
    """Raise the open-files limit (before Spark starts, so its JVM inherits it) and say what it allows."""
    from .hosting import FILES_PER_PARTITION, raise_open_files_limit

    got = raise_open_files_limit()
    if got is not None:
        print(f"iqgate: open-files limit {got[0]:,}: room for about {got[1]:,} store partitions "
              f"(stores x partitions, {FILES_PER_PARTITION} files each)", file=sys.stderr, flush=True)


def _report_catch_up(app: Any, every_s: float = 2.0) -> None:
    """Print catch-up progress until the app is RUNNING (or stopped, or asked to stop); then say so."""
    from stores.iqv2.state import State

    from .console import stop_requested
    from .hosting import progress_line

    t0 = time.monotonic()
    last = 0.0
    for _ in range(1_000_000):  # bounded; the state or a stop request ends it
        state = app.state
        if state is State.RUNNING:
            print(f"iqgate: RUNNING: every store has caught up ({time.monotonic() - t0:.1f} s after Spark started)",
                  file=sys.stderr, flush=True)
            return
        if state.has_completed_shutdown() or state is State.PENDING_ERROR or stop_requested():
            return
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            line = progress_line(app.status())
            if line:
                print(line, file=sys.stderr, flush=True)
        time.sleep(0.2)


def cmd_replica(args: argparse.Namespace) -> int:
    from .replica_cmd import cmd_replica as run

    return run(args, _kafka_options(args), _pg_server, _start_pg)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


# -- argument parsing --------------------------------------------------------------------------------------
def _sql_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql", help="the statement")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", type=http_url, default=DEFAULT_URL, help=f"iqgate server (default {DEFAULT_URL})")
    where.add_argument("--state-dir", help="read this state directory directly (read-only) instead of a server")
    p.add_argument("--param", action="append", default=[], help="a positional parameter (JSON or text); repeatable")
    p.add_argument("--position", help='position bound as JSON, e.g. {"orders": {"0": 41}}')
    p.add_argument("--partial", action="store_true", help="return data beside failed partitions")
    p.add_argument("--wait-ms", type=non_negative_int, help="wait up to this long for the stores to reach --position")
    p.add_argument("--token", help="bearer token of the server")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, help="HTTP timeout in seconds")


def _kafka_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]", help=what)
    p.add_argument("--kafka-option", action="append", default=[], metavar="NAME=VALUE",
                   help="a librdkafka client setting, e.g. security.protocol=SASL_SSL (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iqgate", description="SQL over the live state stores of a streaming "
                                     "pipeline, with the Kafka Streams IQv2 contract.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a pipeline file and serve its stores, or serve a state dir read-only")
    serve.add_argument("pipeline", nargs="?", help="pipeline file (APPLICATION_ID, TOPICS, build(spark, log))")
    serve.add_argument("--data-dir", default="data", help="where the log and state live (default ./data)")
    serve.add_argument("--log-dir", help="event log directory (default DATA_DIR/log)")
    serve.add_argument("--state-dir", help="state directory (default DATA_DIR/state); alone: serve it read-only")
    _kafka_args(serve, "read the pipeline's topics from Kafka instead of the event log")
    serve.add_argument("--master", help="Spark master for the pipeline, e.g. spark://host:7077 (default: local[2])")
    serve.add_argument("--rebuild-from-available", action="store_true",
                       help="rebuild a changed store from what its source still holds when early records are gone "
                            "(its answers are partial history) instead of refusing the upgrade")
    server_args(serve)
    pg_args(serve)
    serve.add_argument("--workers", type=positive_int, default=None,
                       help="serving processes on the one port, reading the same state directory (default: the "
                            "number of cores); only the first hosts the pipeline")
    serve.add_argument("--no-pin-cpus", action="store_true",
                       help="with --workers > 1, do not run each process's HTTP threads on a CPU of its own "
                            "(pinning measured ~1.5x lookups/s on a 2-core machine; a machine shared with other "
                            "busy processes may do better without)")
    serve.add_argument("--listen-fd", type=non_negative_int, help=argparse.SUPPRESS)  # a worker's inherited socket
    serve.add_argument("--accept-board-fd", type=non_negative_int, help=argparse.SUPPRESS)  # and its accept board
    routing_args(serve)
    serve.set_defaults(fn=cmd_serve)

    add_replica_parser(sub, _kafka_args, cmd_replica)

    sql = sub.add_parser("sql", help="run a statement and print the result")
    _sql_args(sql)
    sql.add_argument("--format", choices=("table", "json", "csv"), default="table")
    sql.set_defaults(fn=cmd_sql)

    explain = sub.add_parser("explain", help="show the IQv2 requests and the residual SQL of a statement")
    _sql_args(explain)
    explain.set_defaults(fn=cmd_explain)

    produce = sub.add_parser("produce", help="append JSON lines from stdin to a topic of the event log or Kafka")
    produce.add_argument("topic")
    produce.add_argument("--log", default="data/log", help="event log directory (default ./data/log)")
    produce.add_argument("--partitions", type=positive_int, help="create the topic with this many partitions if missing")
    _kafka_args(produce, "produce to Kafka instead of the event log")
    produce.set_defaults(fn=cmd_produce)

    add_upgrade_parser(sub, _kafka_args, _kafka_options)

    demo = sub.add_parser("demo", help="the shop pipeline end to end: events, Spark, stores, HTTP, example queries")
    demo.add_argument("--dir", default="demo-data", help="working directory (default ./demo-data)")
    demo.add_argument("--orders", type=non_negative_int, default=5_000, help="synthetic orders to load")
    demo.add_argument("--customers", type=positive_int, default=100)
    demo.add_argument("--once", action="store_true", help="print the example answers and exit instead of serving")
    demo.add_argument("--kafka", action="store_true",
                      help="run over a Kafka broker (Tansu, in memory) the demo starts on 127.0.0.1 itself")
    demo.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds to wait for the pipeline to load")
    server_args(demo)
    pg_args(demo)
    demo.set_defaults(fn=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    reset_stop()
    try:
        return int(args.fn(args) or 0)
    except GatewayError as exc:
        where = f" at line {exc.line}, column {exc.col}" if exc.line is not None else ""
        print(f"iqgate: {exc.code}{where}: {exc.message}", file=sys.stderr)
        return 1 if exc.retryable or exc.http_status >= 500 else 2
    except (ConnectionError, json.JSONDecodeError, OSError) as exc:
        print(f"iqgate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a pipeline that fails to load or run: one line, not a traceback
        from .hosting import PipelineError

        if not isinstance(exc, PipelineError):
            raise
        print(f"iqgate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def console() -> None:
    """The ``iqgate`` console script: ``main`` plus a quiet exit after hosting Spark.

    Once a command has hosted Spark (``serve <pipeline>``, ``demo``) and closed
    the app, interpreter teardown only produces noise — DuckDB's bindings
    report objects still referenced from Spark's threads as leaks. Everything
    the command owns is already closed by then, so exit without the teardown.
    """
    code = main()
    if "pyspark" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
