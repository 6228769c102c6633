"""The operator's commands on the real broker, against a running ``segcoord run`` and two historicals.

Each command is run through the CLI's ``main`` (the same code the ``segcoord`` script runs), reads fold
the log, writes wait for the worker to apply them; bad input gets one error line naming the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from events import Envelope, Event, Interval, SegmentDescriptor, Topics
from events.cluster import ServerJoined
from events.schema import Instant
from events.tasks import LockRequested, PublishRequested, TaskStarted
from streaming.cli import main
from tests.integration.test_service_planner import Historicals, PlanService, decoded, publish_through_lockbox, send
from tests.integration.test_service_timeline import T0, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000


def seg(d: int, size: int = 1000) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, size)


@pytest.fixture
def service(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> Iterator[PlanService]:
    svc = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=2)
    svc.start()
    try:
        yield svc
    finally:
        assert svc.stop() == 0


class Cli:
    def __init__(self, bootstrap: str, topics: Topics, capsys: pytest.CaptureFixture[str]) -> None:
        self.common = ["--bootstrap", bootstrap, "--topic-prefix", topics.prefix]
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        rc = main([*args, *self.common])
        out = self.capsys.readouterr()
        return rc, out.out, out.err

    def json(self, *args: str) -> Any:
        rc, out, err = self(*args, "--json")
        assert rc == 0, err
        return orjson.loads(out)


def test_every_operator_command(kafka_bootstrap: str, topics: Topics, tmp_path: Path, service: PlanService,
                                capsys: pytest.CaptureFixture[str]) -> None:
    cli = Cli(kafka_bootstrap, topics, capsys)
    with Historicals(kafka_bootstrap, topics, ["h1", "h2"]):
        wait_for("both servers joined", lambda: {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                                                  if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, service)

        # rules: a bad one is refused locally with the field path, a good one is applied by the worker
        bad = tmp_path / "bad.json"
        bad.write_text('[{"type": "loadForever", "tieredReplicants": {"hot": -1}}]')
        rc, out, err = cli("rules", "set", "wiki", str(bad))
        assert rc == 2 and "payload.rules[0].tieredReplicants.hot: expected a non-negative integer" in err
        (tmp_path / "notjson.json").write_text("[{")
        assert cli("rules", "set", "wiki", str(tmp_path / "notjson.json"))[0] == 2
        rc, _, err = cli("rules", "set", "wiki", str(tmp_path / "missing.json"))
        assert rc == 2 and "missing.json" in err
        (tmp_path / "object.json").write_text('{"type": "loadForever"}')
        rc, _, err = cli("rules", "set", "wiki", str(tmp_path / "object.json"))
        assert rc == 2 and "expected a JSON list of rule objects" in err
        (tmp_path / "empty.json").write_text("[]")
        rc, _, err = cli("rules", "set", "_default", str(tmp_path / "empty.json"))
        assert rc == 2 and "_default rules cannot be empty" in err
        good = tmp_path / "rules.json"
        good.write_text('[{"type": "loadForever", "tieredReplicants": {"hot": 2}}]')
        rc, out, err = cli("rules", "set", "wiki", str(good))
        assert rc == 0 and "applied by the coordinator" in out, (out, err)
        [rule] = cli.json("rules", "get", "wiki")  # as Druid serializes its rules: defaults written out
        assert rule["type"] == "loadForever" and rule["tieredReplicants"] == {"hot": 2}
        assert "_default" in cli.json("rules", "get")
        history = cli.json("rules", "history", "wiki")
        assert len(history) == 1 and history[0]["rules"][0]["tieredReplicants"] == {"hot": 2}

        # config: merging KEY=VALUE; unknown keys and bad values refused with the key
        rc, out, err = cli("config", "set", "maxSegmentsToMove=7", "replicationThrottleLimit=9")
        assert rc == 0, err
        conf = cli.json("config", "get")
        assert conf["maxSegmentsToMove"] == 7 and conf["replicationThrottleLimit"] == 9
        cli("config", "set", "maxSegmentsToMove=8")
        conf = cli.json("config", "get")
        assert conf["maxSegmentsToMove"] == 8 and conf["replicationThrottleLimit"] == 9  # merged, not replaced
        rc, _, err = cli("config", "set", "maxSegmentsToMov=1")
        assert rc == 2 and "maxSegmentsToMov: unknown" in err and "did you mean 'maxSegmentsToMove'" in err
        rc, _, err = cli("config", "set", "maxSegmentsToMove=abc")
        assert rc == 2 and "config.maxSegmentsToMove: expected an integer" in err
        assert cli("config", "set", "novalue")[0] == 2

        # a task holding a lock and another waiting for it
        def task_request(event: Event) -> None:
            send(kafka_bootstrap, topics, event, "wiki")
        for task in ("t1", "t2"):
            task_request(TaskStarted(task_id=task, group_id=task, task_type="index_kafka", data_source="wiki"))
            task_request(LockRequested(request_id=f"r-{task}", task_id=task, group_id=task, task_type="index_kafka",
                                       data_source="wiki", interval=Interval(T0, T0 + 3 * DAY),
                                       granularity="timeChunk", lock_type="exclusive", version="v1"))

        def locks() -> Any:
            doc = cli.json("locks")
            return doc if doc["locks"] and doc["waiting"] else None
        doc = wait_for("a live lock and a waiter", locks, service)
        assert doc["locks"][0]["holders"] == ["t1"] and doc["waiting"][0]["taskId"] == "t2"
        assert [t["taskId"] for t in cli.json("tasks")] == ["t1", "t2"]

        # publish: the planner loads 2 replicas on the hot tier; loadstatus, datasources, segments, lookup
        segments = [seg(0), seg(1), seg(2)]
        publish_through_lockbox(kafka_bootstrap, topics, tuple(segments), "wiki", request_event=PublishRequested(
            request_id="p-t1", task_id="t1", segments=tuple(segments)))  # t1 holds the lock: the lockbox accepts
        wait_for("wiki fully loaded", lambda: cli.json("loadstatus", "--full") == {"hot": {"wiki": 0}}, service, 60)
        assert cli.json("loadstatus") == {"loadStatus": {"wiki": 100.0},
                                          "tiers": {"hot": {"segments": 3, "unavailable": 0, "underReplicated": 0}}}
        assert cli.json("loadstatus", "--simple") == {"wiki": 0}
        rows = cli.json("datasources")
        assert rows[0]["name"] == "wiki" and rows[0]["segments"] == 3 and rows[0]["replicas"] == 6
        servers = {s["name"]: s for s in cli.json("servers")}
        assert set(servers) == {"h1", "h2"} and all(s["currSize"] == 3000 and s["tier"] == "hot"
                                                    for s in servers.values())
        assert all(s["lastHeard"] for s in servers.values())
        visible = cli.json("segments", "wiki", "--state", "visible")
        assert [r["segment"] for r in visible] == sorted(str(s.id) for s in segments)
        assert all(r["servers"] == ["h1", "h2"] for r in visible)
        assert len(cli.json("segments", "wiki", "--interval", Interval(T0, T0 + DAY).iso())) == 1
        rc, _, err = cli("segments", "wiki", "--interval", "nope")
        assert rc == 2 and "--interval" in err
        rc, _, err = cli("lookup", "wiki", "2026-01-02/2026-01-01")
        assert rc == 2 and "START/END '2026-01-02/2026-01-01'" in err
        assert cli("segments", "wiki", "extra")[0] == 2
        assert cli.json("rules", "history", "nope") == []
        assert cli.json("lookup", "wiki", Interval(T0 + DAY // 2, T0 + DAY * 3 // 2).iso()) == [
            {"segment": str(segments[0].id), "intervals": [Interval(T0 + DAY // 2, T0 + DAY).iso()]},
            {"segment": str(segments[1].id), "intervals": [Interval(T0 + DAY, T0 + DAY * 3 // 2).iso()]}]

        # text output is one line per thing
        rc, out, _ = cli("servers")
        assert rc == 0 and "h1" in out and "hot" in out
        rc, out, _ = cli("loadstatus")
        assert "wiki: 100.0% loaded" in out and "tier hot: 3 segments, 0 unavailable, 0 under-replicated" in out

        # mark-unused: bad ids and unknown ones refused, a used one applied and dropped from the servers
        rc, _, err = cli("segments", "mark-unused", "not-a-segment-id")
        assert rc == 2 and "ID[0]" in err
        unknown = str(SegmentDescriptor("wiki", Interval(T0, T0 + DAY), "v9", 0, 1).id)
        rc, _, err = cli("segments", "mark-unused", unknown)
        assert rc == 2 and "not a used segment" in err
        rc, _, err = cli("segments", "mark-used", str(segments[2].id))
        assert rc == 2 and "already used or never published" in err
        rc, out, err = cli("segments", "mark-unused", str(segments[2].id))
        assert rc == 0 and "applied" in out, err
        wait_for("the unused segment dropped", lambda: all(
            s["currSize"] == 2000 for s in cli.json("servers")), service, 60)
        assert [r["segment"] for r in cli.json("segments", "wiki")] == sorted(str(s.id) for s in segments[:2])
        # and used again: the planner loads it back, the timeline shows it visible
        rc, out, err = cli("segments", "mark-used", str(segments[2].id))
        assert rc == 0 and "mark-used 1 segment(s)" in out and "through the lockbox): applied" in out, err
        wait_for("the segment used and loaded again", lambda: all(
            s["currSize"] == 3000 for s in cli.json("servers")), service, 60)
        assert str(segments[2].id) in [r["segment"] for r in cli.json("segments", "wiki", "--state", "visible")]

        # decommission / recommission
        rc, _, err = cli("servers", "decommission", "h9")
        assert rc == 2 and "no such server" in err
        assert cli("servers", "drain", "h1")[0] == 2
        assert cli("servers", "decommission", "h1")[0] == 0
        assert {s["name"]: s["decommissioning"] for s in cli.json("servers")} == {"h1": True, "h2": False}
        assert cli("servers", "recommission", "h1")[0] == 0
        assert cli("servers", "recommission", "nobody")[0] == 2
        assert not any(s["decommissioning"] for s in cli.json("servers"))

        # tail and status
        lines = cli("tail", "cluster", "--from-beginning", "--max-messages", "3")[1].splitlines()
        assert len(lines) == 3 and "server_joined" in lines[0]
        docs = [orjson.loads(line) for line in
                cli("tail", "cluster", "--from-beginning", "--max-messages", "2", "--json")[1].splitlines()]
        # whole envelopes, one per line, in the text output's order (a server's heartbeat may come before the
        # other server's join: the topic is read partition by partition)
        assert len(docs) == 2 and docs[0]["event_type"] == "server_joined" and all(d["event_id"] for d in docs)
        assert [d["event_type"] in line for d, line in zip(docs, lines, strict=False)] == [True, True]
        assert cli("tail", "commands", "--max-messages", "0")[0] == 2
        st = cli.json("status")
        assert st["workerAlive"] is True and set(st["lag"]) == {"timeline", "lockbox", "planner"}
        assert st["deadLettersLastHour"] == 0
        assert st["lastPlan"]["durationMs"] >= 0 and st["sparkBalancer"] == "not started"
        rc, out, _ = cli("status")
        assert rc == 0 and "worker: alive" in out and "planner   lag" in out


def test_reads_without_a_worker_and_bad_topics(kafka_bootstrap: str, topics: Topics,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cli = Cli(kafka_bootstrap, topics, capsys)
    assert cli.json("servers") == [] and cli.json("datasources") == [] and cli.json("loadstatus", "--simple") == {}
    rc, out, _ = cli("status")
    assert rc == 1 and "NOT RUNNING" in out
    # a write without a worker stands in the log, and says so (exit 3)
    rc, out, _ = cli("config", "set", "maxSegmentsToMove=3", "--wait", "1")
    assert rc == 3 and "not applied within 1s" in out
    assert cli.json("config", "get")["maxSegmentsToMove"] == 3
    rc, _, err = main_err(["servers", "--bootstrap", kafka_bootstrap, "--topic-prefix", f"x{uuid.uuid4().hex[:6]}."],
                          capsys)
    assert rc == 2 and "does not exist" in err


def main_err(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


_ = (Envelope, Instant)
