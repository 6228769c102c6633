"""Fixtures of the integration tests that need more than the session's shared broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.local_broker import LocalBroker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A single-node broker of the test's own (under its temporary home), for tests that stop, kill and restart
    it; stopped at the end. ``LocalBroker.start`` reuses the recorded port when it is free; it binds with
    SO_REUSEADDR, as the JVM does, so TIME_WAIT leftovers of a killed broker's connections do not move the
    restart to a new port."""
    broker = LocalBroker(tmp_path / "kafka-home", heap_mb=384, log_level="WARN")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A ``--secure`` single-node broker (SCRAM, ACLs, one principal per role) shared by one test module."""
    broker = LocalBroker(tmp_path_factory.mktemp("secure-home"), secure=True)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
