"""Fixtures of the stores tests: apps in tmp_path (closed at teardown), and apps holding Kafka's fixture."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import StoreKind, StoreSpec
from tests.stores.iqv2_fixture import spec_for, write_fixture


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., StreamsApp]]:
    """Build (and by default start) apps in tmp_path; every app is closed at teardown."""
    apps: list[StreamsApp] = []

    def make(specs: list[StoreSpec], *, start: bool = True, state_dir: Path | None = None,
             app_id: str | None = None, **kw: object) -> StreamsApp:
        kw.setdefault("synchronous", "NORMAL")  # crash-safe for process kills; FULL fsyncs cost test time
        app = StreamsApp(
            StoreTopology(specs), app_id or f"test-{uuid.uuid4().hex[:8]}", state_dir or tmp_path / f"state{len(apps)}",
            coordination_base=tmp_path / "coord", shutdown_poll_s=0.05, **kw,  # type: ignore[arg-type]
        )
        apps.append(app)
        if start:
            app.start()
        return app

    yield make
    for app in apps:
        app.close(timeout_s=10)


@pytest.fixture
def fixture_app(make_app: Callable[..., StreamsApp]) -> Callable[[StoreKind, str], tuple[StreamsApp, str]]:
    """An app with one store of ``kind`` holding Kafka's acceptance fixture."""

    def make(kind: StoreKind, flavor: str = "dsl") -> tuple[StreamsApp, str]:
        spec = spec_for(kind)
        app = make_app([spec])
        write_fixture(app, spec.name, kind, flavor)
        return app, spec.name

    return make
