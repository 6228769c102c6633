"""``segcoord run --planner-only`` beside a ``--no-planner`` worker: the planner in a process of its own.

What a user would notice when this fails: with the worker split in two (agents in one process, the planner in
another), publishes are not loaded, are loaded twice after the planner process is SIGKILLed, the planner process
takes a share of the agents' partitions (and leaves it unfolded), or the HTTP API of the agents' worker does not
lead the operator to the planner.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from events import Topics
from events.cluster import RulesSet
from events.commands import LoadSegment
from events.segments import SegmentsPublished
from streaming.admin import create_topics
from streaming.replay import audit
from tests.integration.processes import kill_alive, wait_for
from tests.integration.test_http_api import free_port
from tests.integration.test_planner_fencing import http_get
from tests.integration.test_service_planner import Historicals, send
from tests.integration.test_service_planner_crash import announced, answers_log, commands_log, unanswered
from tests.integration.test_service_workers import Worker, claims, wiki

pytestmark = pytest.mark.integration

SERVERS = ["hw1", "hw2", "hw3"]
REPLICAS = 2


def group_members(bootstrap: str, group: str) -> set[str]:
    """The group instance ids of ``group``'s live members."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return {m.group_instance_id or m.client_id for m in described.members}


def test_a_planner_only_process_plans_for_a_no_planner_worker_and_survives_sigkill(kafka_bootstrap: str,
                                                                                   tmp_path: Path) -> None:
    """A ``--no-planner`` worker (lockbox, timeline) and a ``--planner-only`` process: publishes go through the
    worker's lockbox and are loaded at their replica count by the planner process, which is elected, never joins
    the agents' group, and after a SIGKILL and restart goes on with one load id per (server, segment); the
    worker's HTTP API redirects planner questions to the planner process's."""
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=2)
    ports = {"agents": free_port(), "planner": free_port()}
    agents = Worker(kafka_bootstrap, topics, tmp_path, "agents", "--no-planner", "--http",
                    f"127.0.0.1:{ports['agents']}")
    planner = Worker(kafka_bootstrap, topics, tmp_path, "planner", "--planner-only", "--http",
                     f"127.0.0.1:{ports['planner']}")
    processes = [agents, planner]
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": REPLICAS}},)), "rules/wiki")
    segments = [wiki(d) for d in range(6)]
    try:
        with Historicals(kafka_bootstrap, topics, SERVERS, max_size=1_000_000):
            for p in processes:
                p.start()
            wait_for("the planner process elected", planner.leads, processes, 120)
            wait_for("the agents' worker in its group", lambda: "resumes at" in agents.log.read_text(), processes,
                     120)
            for d in range(3):
                send(kafka_bootstrap, topics, SegmentsPublished(task_id=f"t{d}", segments=(segments[d],)), f"wiki{d}")

            def loaded(upto: int) -> bool:
                placed = announced(answers_log(kafka_bootstrap, topics))
                return all(len(placed.get(str(s.id), set()) & set(SERVERS)) == REPLICAS for s in segments[:upto])

            wait_for("the first publishes loaded twice", lambda: loaded(3), processes, 180)

            # the operator's view: the worker that does not plan sends planner questions to the planner process
            path = "/druid/coordinator/v1/rules/wiki"
            wait_for("the planner's API", lambda: '"hot"' in http_get(url["planner"] + path)[2], processes, 120)
            status, headers, _ = http_get(url["agents"] + path)
            assert status == 307 and headers["Location"] == url["planner"] + path, (status, headers)
            assert http_get(url["planner"] + "/druid/coordinator/v1/isLeader")[0] == 200
            members = group_members(kafka_bootstrap, f"{topics.prefix}coordinator")
            assert members and all("agents" in m for m in members), members  # no partition for the planner

            planner.kill()  # SIGKILL
            for d in range(3, 6):
                send(kafka_bootstrap, topics, SegmentsPublished(task_id=f"t{d}", segments=(segments[d],)), f"wiki{d}")
            planner.start()
            wait_for("the restarted planner process elected",
                     lambda: planner.log.read_text().count("leads from epoch") == 2, processes, 120)
            wait_for("every publish loaded twice", lambda: loaded(6), processes, 180)
            for p in processes:
                assert p.stop() == 0, p.tail()
    finally:
        kill_alive(processes)
    text = planner.log.read_text()
    assert "planner only (--planner-only)" in text and "resumes at" not in text, text[-3000:]
    assert "leads from epoch" not in agents.log.read_text()
    assert set(claims(kafka_bootstrap, topics)) == {"planner"}
    commands = commands_log(kafka_bootstrap, topics)
    ids: dict[tuple[str, str], set[str]] = {}
    for c in commands:
        if isinstance(c.event, LoadSegment):
            ids.setdefault((c.event.server, str(c.event.segment.id)), set()).add(c.event_id)
    assert ids and all(len(v) == 1 for v in ids.values()), ids
    assert not unanswered(commands, answers_log(kafka_bootstrap, topics))
    assert audit(kafka_bootstrap, topics, command_timeout_ms=0) == []
