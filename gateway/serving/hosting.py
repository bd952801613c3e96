"""Hosting a pipeline file in this process: Spark, the pipeline's stores, the StreamsApp (``iqgate serve|demo``).

This is the one place in ``gateway`` that may start Spark — the embedded
default hosts the pipeline in the server's supervisor process, whose serving
processes read the stores it writes — and it does so only when a command asks
for a pipeline: its import of ``stores.pipeline.session`` sits inside a
function, so importing the gateway (the serving path, ``serve --state-dir``,
the HTTP app, the DB-API) never loads pyspark. The exception is declared in
pyproject's import-linter contract and in tests/test_layers.py.

A pipeline file defines ``APPLICATION_ID``, ``TOPICS = {topic: partitions}``
and ``build(spark, log) -> Topology`` (see examples/shop_pipeline.py); ``log`` is
the source the topology reads: the embedded EventLog, or a KafkaSource when the
command names ``--bootstrap-servers`` or the file sets ``BOOTSTRAP_SERVERS``
(and optionally ``KAFKA_OPTIONS``, librdkafka settings).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from stores.iqv2.position import Position
from stores.iqv2.state import State
from stores.log.eventlog import EventLog
from stores.log.source import SourceLog

__all__ = ["PipelineError", "load_pipeline", "build_topology", "start_pipeline", "caught_up", "wait_caught_up",
           "source_log", "pipeline_source", "source_location", "progress_line", "raise_open_files_limit",
           "FILES_PER_PARTITION"]

#: Open files one store partition costs the serving process at most (writer: file, WAL, -shm; one reader: 2 more).
FILES_PER_PARTITION = 5
_RESERVED_FILES = 200  # sockets, the event log, Spark's py4j connections, libraries


class PipelineError(Exception):
    """A pipeline file that does not follow the convention, or a pipeline that did not come up."""


def load_pipeline(path: str | Path) -> ModuleType:
    """Import a pipeline file and check it defines what ``serve`` needs, naming anything missing."""
    p = Path(path)
    if not p.is_file():
        raise PipelineError(f"pipeline file {str(p)!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"iqgate_pipeline_{p.stem}", p)
    if spec is None or spec.loader is None:
        raise PipelineError(f"{str(p)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    _user_code(p, "failed to load", lambda: spec.loader.exec_module(module))  # type: ignore[union-attr]
    missing = [n for n in ("APPLICATION_ID", "TOPICS", "build") if not hasattr(module, n)]
    if missing:
        raise PipelineError(f"pipeline file {str(p)!r} must define {', '.join(missing)} "
                            "(APPLICATION_ID, TOPICS = {topic: partitions}, build(spark, log) -> Topology)")
    topics = module.TOPICS
    if not isinstance(topics, dict) or not all(isinstance(t, str) and isinstance(n, int) and n > 0
                                               for t, n in topics.items()):
        raise PipelineError(f"pipeline file {str(p)!r}: TOPICS must map topic names to partition counts > 0")
    if not callable(module.build):
        raise PipelineError(f"pipeline file {str(p)!r}: build must be a function build(spark, log)")
    return module


def source_log(bootstrap_servers: str | None, kafka_options: dict[str, Any] | None,
               log_dir: str | Path) -> SourceLog:
    """Kafka when bootstrap servers are given, else the embedded event log at ``log_dir``."""
    if bootstrap_servers:
        from stores.log.kafka import KafkaSource

        return KafkaSource(bootstrap_servers, kafka_options or None)
    return EventLog(log_dir)


def pipeline_source(module: ModuleType, bootstrap_servers: str | None, kafka_options: dict[str, Any] | None,
                    log_dir: str | Path) -> SourceLog:
    """The pipeline's source: the command's ``--bootstrap-servers``, else the file's ``BOOTSTRAP_SERVERS``, else the log."""
    servers = bootstrap_servers or getattr(module, "BOOTSTRAP_SERVERS", None)
    options = {**dict(getattr(module, "KAFKA_OPTIONS", None) or {}), **(kafka_options or {})}
    if servers is not None and (not isinstance(servers, str) or not servers.strip()):
        raise PipelineError(f"BOOTSTRAP_SERVERS must be 'host:port[,host:port]', got {servers!r}")
    return source_log(servers, options, log_dir)


def source_location(log: SourceLog) -> dict[str, str] | None:
    """Where ``log`` is, for serving processes that open it themselves (routing's heartbeat topic)."""
    from stores.app.layout import source_location as where

    return where(log)


SPARK_LOG4J = Path(__file__).with_name("spark-log4j2.properties")


def spark_session(master: str | None = None, log_file: Path | None = None) -> Any:
    """The process's SparkSession (started on first use; several seconds); ``master`` e.g. ``spark://host:7077``.

    ``log_file``: where Spark's own log goes (its warnings at start, its errors at shutdown), instead of the
    user's console, where only iqgate's lines belong (issue 45)."""
    from stores.pipeline.session import get_or_create  # the declared exception: see the module docstring

    conf = None
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        conf = {"spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{SPARK_LOG4J} "
                                                 f"-Diqgate.spark.log={log_file}"}
    return get_or_create(conf=conf) if master is None else get_or_create(master=master, conf=conf)


def build_topology(module: ModuleType, spark: Any, log: SourceLog) -> Any:
    """``module.build(spark, log)``; what the pipeline's own code raises becomes a PipelineError pointing into it."""
    return _user_code(Path(module.__file__ or module.__name__), "build(spark, log) failed",
                      lambda: module.build(spark, log))


def _user_code(path: Path, what: str, run: Callable[[], Any]) -> Any:
    """Run the pipeline file's code; an exception it raises → PipelineError naming the file and its own lines.

    Why: the error is in the user's file, so it is their lines they need (as
    ``python file.py`` would show them), not iqgate's frames around them.
    """
    try:
        return run()
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        text = f"\n    {exc.text.rstrip()}" if exc.text else ""
        raise PipelineError(f"pipeline file {str(path)!r} {what}: {where}: {exc.msg}{text}") from None
    except Exception as exc:  # noqa: BLE001 - any error of the user's code, reported with its frames in their file
        mine = path.resolve()
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == mine]
        lines = "".join(traceback.format_list(frames)).rstrip()
        detail = "".join(traceback.format_exception_only(exc)).strip()
        raise PipelineError(f"pipeline file {str(path)!r} {what}: {detail}" + (f"\n{lines}" if lines else "")) from None


def start_pipeline(module: ModuleType, log: SourceLog, state_dir: Path, spark: Any | None = None, *,
                   master: str | None = None, rebuild_from_available: bool = False,
                   listener: Callable[[Any], None] | None = None) -> Any:
    """Create the topics, build the topology on Spark (local, or the cluster at ``master``), start a StreamsApp.

    The app compares the pipeline with the stores on disk (``app.upgrades.plan``, issue 20);
    ``rebuild_from_available`` lets a changed store be rebuilt from a source that lost early records;
    ``listener`` is handed the app before it starts (to follow its every transition).
    """
    from stores.app.streams import StreamsApp

    for topic, partitions in module.TOPICS.items():
        log.create_topic(topic, partitions=partitions, exist_ok=True)
    if spark is None:
        spark_log = state_dir / "logs" / "spark.log"
        spark = spark_session(master, spark_log)
        print(f"iqgate: Spark's own log: {spark_log}", file=sys.stderr, flush=True)
    topology = build_topology(module, spark, log)
    app = StreamsApp(topology, application_id=module.APPLICATION_ID, state_dir=str(state_dir),
                     rebuild_from_available=rebuild_from_available)
    if listener is not None:
        listener(app)
    app.start()
    return app


def caught_up(app: Any, log: SourceLog) -> tuple[int, int]:
    """(records applied by the slowest store, records in the log), summed over the source partitions."""
    specs = app.catalog()
    wanted_topics = {t for spec in specs.values() for t in spec.source_topics}
    ends = {t: log.last_offsets(t) for t in log.list_topics() if t in wanted_topics or not wanted_topics}
    total = sum(o + 1 for parts in ends.values() for o in parts.values())
    positions: dict[str, Position] = app.positions()
    done = total
    for name, pos in positions.items():
        topics = specs[name].source_topics or tuple(ends)
        applied = sum(min((pos.offset(t, p) or -1), o) + 1 for t in topics for p, o in ends.get(t, {}).items())
        wanted = sum(o + 1 for t in topics for o in ends.get(t, {}).values())
        done = min(done, total - (wanted - applied))
    return done, total


def wait_caught_up(app: Any, log: SourceLog, timeout_s: float,
                   progress: Callable[[int, int], None] | None = None) -> None:
    """Block until every store has applied the whole log (and the app is RUNNING), or raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for _ in range(1_000_000):  # bounded; the clock ends it
        state = app.state
        if state in (State.ERROR, State.PENDING_ERROR, State.NOT_RUNNING):
            raise PipelineError(f"the pipeline stopped while loading (state {state})")
        done, total = caught_up(app, log)
        if progress is not None:
            progress(done, total)
        if done >= total and state is State.RUNNING:
            return
        if time.monotonic() > deadline:
            raise PipelineError(f"the pipeline applied {done} of {total} records within {timeout_s:.0f} s")
        time.sleep(0.25)


def progress_line(status: Mapping[str, Any]) -> str | None:
    """One console line of catch-up progress (``None`` when there is nothing to report)."""
    parts, reached, target = [], 0, 0
    for name, st in sorted(status["stores"].items()):
        pr = getattr(st, "progress", None)
        if not pr or "target" not in pr or st.status not in ("starting", "rebuilding"):
            continue  # no figures yet (a rebuild's first report only names its upcoming columns)
        reached += pr["reached"]
        target += pr["target"]
        eta = f", ETA {pr['eta_s']:.0f} s" if pr.get("eta_s") is not None else ""
        what = "rebuilding" if st.status == "rebuilding" else ("catching up" if pr.get("query_started") else
                                                                "starting its query")
        parts.append(f"{name} {what} {pr['reached']:,}/{pr['target']:,}{eta}")
    if not parts:
        return None
    pct = 100.0 * reached / target if target else 100.0
    return f"iqgate: catch-up {reached:,}/{target:,} records ({pct:.0f}%): " + "; ".join(parts)


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE as far as the hard limit allows; (soft, partitions it leaves room for).

    Why: each store partition keeps up to FILES_PER_PARTITION files open (issue 23), so a pipeline of
    100 stores x 4 partitions needs ~2,000, over the usual soft limit of 1,024. None where there is no limit.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft, max(0, (soft - _RESERVED_FILES) // FILES_PER_PARTITION)
