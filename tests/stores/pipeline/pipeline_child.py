"""Runs the shop pipeline in its own process (its own Spark) until killed: the kill -9 test's victim.

Usage: python pipeline_child.py <log_dir | kafka:host:port> <state_dir>. Prints RUNNING once the app is.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from stores import KafkaSource, State, StreamsApp
    from stores.log.eventlog import EventLog
    from stores.pipeline.session import get_or_create

    spec = importlib.util.spec_from_file_location("shop_pipeline", ROOT / "examples" / "shop_pipeline.py")
    shop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shop)
    src = sys.argv[1]
    log = KafkaSource(src[len('kafka:'):]) if src.startswith("kafka:") else EventLog(src)
    app = StreamsApp(shop.build(get_or_create(), log), application_id="shop-child", state_dir=sys.argv[2])
    app.start()
    for _ in range(1200):  # bounded: at most ~10 minutes
        if app.state is State.RUNNING:
            print("RUNNING", flush=True)
            break
        time.sleep(0.5)
    for _ in range(1200):
        time.sleep(0.5)


if __name__ == "__main__":
    main()
