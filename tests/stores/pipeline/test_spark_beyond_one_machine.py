"""Spark beyond one process: a standalone cluster (master + worker from pyspark's own spark-class) running a
Kafka-fed pipeline, and a SparkSession whose Python workers cannot import iqgate getting an exact instruction.

Both need their own SparkContext, so they run the pipeline in child processes (the test run shares one local
context); the master and worker bind 127.0.0.1 and everything is stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402 - Spark tests run or fail, never skip quietly

from stores import KafkaSource  # noqa: E402
from stores.log.broker import LocalBroker  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

SPARK_HOME = Path(pyspark.__file__).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the {what} exited (code {proc.returncode})"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the {what} did not open port {port} within {timeout_s} s")


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1; yields the master URL."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(tmp_path), "SPARK_WORKER_DIR": str(tmp_path / "w")}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _port()
    procs: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(_port())], env=env, stdout=open(tmp_path / "master.log", "wb"),
            stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(master)
        _wait_port(port, master, "Spark master")
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
             "--memory", "1g", "--webui-port", str(_port()), "--work-dir", str(tmp_path / "work")],
            env=env, stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(worker)
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in (tmp_path / "worker.log").read_text(errors="replace"):
            assert worker.poll() is None and time.monotonic() < deadline, "the Spark worker did not register"
            time.sleep(0.3)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def test_a_kafka_pipeline_on_a_standalone_cluster_matches_the_oracle_before_and_after_an_upgrade(standalone_cluster: str, tmp_path: Path) -> None:
    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        src.create_topic("orders", 3)
        src.append_batch("orders", shop.generate_orders(1500, customers=25, seed=31))
        child = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("cluster_child.py")), standalone_cluster,
             broker.bootstrap_servers, str(tmp_path / "state")],
            capture_output=True, text=True, timeout=420)
        src.close()
    tail = (child.stdout + child.stderr)[-3000:]
    assert child.returncode == 0, tail
    assert "OK orders=1500 executors=1" in child.stdout, tail
    assert "UPGRADED revenue_keys=25" in child.stdout, tail  # issue 20 on a cluster: rebuilt, swapped, oracle


WORKER_CHECK = """
import sys
sys.path.insert(0, {root!r})
from pyspark.sql import SparkSession
from stores.pipeline.session import WorkerImportError
from stores import EventLog, Topology
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.pyspark.python", {python!r}).getOrCreate())
try:
    Topology(spark, EventLog({log!r}))
except WorkerImportError as exc:
    print("REFUSED", exc)
spark.stop()
"""


def test_workers_that_cannot_import_iqgate_get_an_exact_instruction(tmp_path: Path) -> None:
    """A user's own SparkSession whose Python workers run an interpreter without iqgate (here: one without pyspark)."""
    bare = shutil.which("python3.11", path="/usr/bin:/usr/local/bin:" + os.environ.get("PATH", ""))
    other = next((p for p in ("/usr/bin/python3", bare) if p and Path(p).exists()
                  and subprocess.run([p, "-c", "import stores"], capture_output=True, cwd="/").returncode != 0), None)
    assert other, "no Python without iqgate on this machine to play the misconfigured worker"
    code = WORKER_CHECK.format(root=str(Path(__file__).resolve().parents[3]), python=other, log=str(tmp_path / "log"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    # 'python3' must not be this venv's (an activated venv puts it first on the PATH)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env,
                           cwd=str(tmp_path))
    out = child.stdout
    assert "REFUSED" in out, (out + child.stderr)[-3000:]
    # PySpark takes the workers' interpreter from PYSPARK_PYTHON only (here unset: 'python3'); the message says
    # which one ran, that the conf the user set was not applied, and what to do instead
    assert "Python workers cannot import iqgate (they run 'python3'" in out
    assert f"spark.pyspark.python={other!r} is applied only by spark-submit" in out
    assert "PYSPARK_PYTHON" in out and sys.executable in out and "No module named" in out
