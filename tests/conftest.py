"""Shared fixtures: a real Kafka broker for the session, isolated topic prefixes per test.

``kafka_bootstrap`` uses, in order: the broker named by ``SEGCOORD_TEST_BOOTSTRAP``;
a testcontainers Kafka when a Docker engine answers; else the local broker from
Maven jars started under a temporary home (and stopped at the end). A broker that
cannot start fails the tests that need it; nothing is skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from events.topics import Topics

# Tests never assert wall-clock times, and Hypothesis's deadline and too_slow health check are exactly that: on a
# loaded 2-core machine a fresh-clone CI failed `test_round_trip[segments_import_requested]` with "Input generation
# is slow". Every property test keeps its examples and shrinking; only the timing checks are off.
settings.register_profile("segcoord", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("segcoord")

# One publish key for the test session and every process it starts: the lockbox agent seals its publishes with it
# and the timeline, planner, replay and audit verify them (coordinator/locks/seal.py).
os.environ.setdefault("SEGCOORD_PUBLISH_KEY", "segcoord-tests-" + uuid.uuid4().hex)


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    named = os.environ.get("SEGCOORD_TEST_BOOTSTRAP")
    if named:
        yield named
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    from streaming.local_broker import LocalBroker

    broker = LocalBroker(tmp_path_factory.mktemp("kafka-home"))
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture
def topics(kafka_bootstrap: str) -> Topics:
    """A fresh topic prefix with every design topic created (1 partition each, so order is total)."""
    from streaming.admin import create_topics

    t = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, t, partitions=1)
    return t


@pytest.fixture(scope="session")
def spark(kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    """One local Spark session (with the Kafka connector) for the test session, stopped before the broker."""
    from streaming.spark import local_spark

    session = local_spark("segcoord-tests")
    try:
        yield session
    finally:
        session.stop()
