"""Broker faults on the 3-node local cluster (``segcoord kafka start --brokers 3``): kill one node mid-stream and
restart it, then kill the active controller; the service keeps going, loses nothing, and audit is clean.

Topics have 3 replicas and ``min.insync.replicas=2``; producers use ``acks=all``. The stream is the timeline
tests' seeded mix of publishes (here imports through the lockbox), announces, unannounces and marks unused,
plus task requests for the lockbox; the oracle is the pure fold of what reached the log. The topics the
worker creates at run time (the planner election's, and all of them when none exist) are replicated alike.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import Envelope, Event, Topics
from events.segments import SegmentsPublished
from events.topics import LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from streaming.admin import Replication, create_topics, replication_of
from streaming.cli import main
from streaming.local_cluster import LocalCluster
from streaming.service.election import election_topic
from tests.accepted import import_request
from tests.integration.test_service_broker_restart import lockbox_published, produce
from tests.integration.test_service_lockbox import dedup, request_stream
from tests.integration.test_service_lockbox import pure_fold as lockbox_fold
from tests.integration.test_service_timeline import (
    Service,
    check_agent_equals_fold,
    count_distinct_ids,
    read_all,
    segment_stream,
    wait_for,
)

pytestmark = pytest.mark.integration


def as_imports(stream: list[Envelope[Event]]) -> list[Envelope[Event]]:
    """The stream with every publish made through the lockbox (an import request on ``lock-requests``, same id):
    the service's own sealed publishes then follow, so audit finds every publish's decision on ``locks``."""
    out: list[Envelope[Event]] = []
    for env in stream:
        event = env.event
        if isinstance(event, SegmentsPublished):
            request = import_request(event.segments, env.event_id)
            env = Envelope(request, env.event_id, env.occurred_at, env.key)
        out.append(env)
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "home", 3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_a_node_killed_and_restarted_then_the_controller_killed_loses_nothing(
        cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = cluster.bootstrap
    topics = Topics(f"c{uuid.uuid4().hex[:10]}.")
    create_topics(bootstrap, topics, partitions=1, replication=3)
    segments = as_imports(segment_stream(random.Random(1616), 1800))
    requests = request_stream(random.Random(1617), 600)
    thirds = [(segments[i * 600:(i + 1) * 600], requests[i * 200:(i + 1) * 200]) for i in range(3)]
    service = Service(bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        produce(bootstrap, topics, [*thirds[0][0], *thirds[0][1]])
        wait_for("visibility changes flowing", lambda: count_distinct_ids(bootstrap, topics.name(TIMELINE)) > 50,
                 service, 90)
        # the topic the worker created at run time (the planner election) is replicated as the deployment's
        election = replication_of(bootstrap, election_topic(topics))
        assert election == Replication(3, "2"), election
        controller = cluster.controller()
        victim = next(n for n in (1, 2, 3) if n != controller)
        cluster.kill(victim)  # a broker that leads some partitions, mid-stream
        produce(bootstrap, topics, [*thirds[1][0], *thirds[1][1]])
        cluster.start_node(victim)
        cluster.kill(cluster.controller())  # the active controller (a majority of 2 voters remains)
        produce(bootstrap, topics, [*thirds[2][0], *thirds[2][1]])

        expected_locks = lockbox_fold(read_all(bootstrap, topics.name(LOCK_REQUESTS)))
        wait_for("every lock decision", lambda: len(dedup(read_all(bootstrap, topics.name(LOCKS))))
                 >= len(expected_locks.locks), service, 120)
        wait_for("every publish", lambda: len(lockbox_published(bootstrap, topics))
                 >= len(expected_locks.segments), service, 60)
        from tests.integration.test_service_timeline import pure_fold as timeline_fold

        expected = timeline_fold(read_all(bootstrap, topics.name(SEGMENTS)))
        wait_for("every visibility change", lambda: count_distinct_ids(bootstrap, topics.name(TIMELINE))
                 >= len(expected.outputs), service, 120)
        assert service.alive()
    finally:
        code = service.stop()
    assert code == 0, service.log.read_text()[-3000:]
    on_segments = sum(1 for e in segments if e.event.event_topic == SEGMENTS)
    assert len(read_all(bootstrap, topics.name(SEGMENTS))) >= on_segments  # every acknowledged record is there
    check_agent_equals_fold(bootstrap, topics, tmp_path / "state")
    assert dedup(read_all(bootstrap, topics.name(LOCKS))) == expected_locks.locks
    assert lockbox_published(bootstrap, topics) == expected_locks.segments
    # topics segcoord run has to create itself take the cluster's defaults (3 replicas, min.insync.replicas 2)
    fresh = Topics(f"f{uuid.uuid4().hex[:10]}.")
    create_topics(bootstrap, fresh, replication=None)
    assert {replication_of(bootstrap, fresh.name(t)) for t in (SEGMENTS, LOCKS)} == {Replication(3, "2")}
    capsys.readouterr()
    assert main(["audit", "--json", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix]) == 0
    assert json.loads(capsys.readouterr().out)["violations"] == []
