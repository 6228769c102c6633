"""A planner leader cut off from the group (SIGSTOP past its session) is fenced: its epoch's commands are void;
and the HTTP API of a worker that does not lead redirects to the leader's.

Two ``segcoord run`` workers and three simulated historicals. Rules ask two ``hot`` replicas of every ``wiki``
segment; balancing is off. The planner's owner is paused (SIGSTOP) until the other worker is elected and has
commanded the servers; meanwhile more segments are imported (the new leader places them), and a command of
the paused leader's epoch is written to ``commands`` as the zombie would write it: a drop of a copy it placed.
Then the paused worker is resumed (SIGCONT) and more segments are imported.

Then:

- the resumed worker says its epoch was superseded (or that it no longer leads) and plans nothing more;
- along every server's commands, nothing of an older epoch that comes after a newer epoch's command is acted
  on (no announce, unannounce or refusal is caused by it): the zombie drop included;
- the commands acted on came from one planner at a time (epochs never go down along a partition), and each
  epoch is one worker's;
- placement converges and ``segcoord audit`` finds nothing.
"""

from __future__ import annotations

import http.client
import itertools
import signal
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from events import Topics
from events.cluster import DynamicConfigSet, RulesSet, SegmentLoadRefused
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from streaming.admin import create_topics
from streaming.producer import EventProducer
from streaming.replay import audit
from streaming.service.election import HEADER
from tests.accepted import import_request
from tests.integration.processes import kill_alive, wait_for
from tests.integration.test_http_api import free_port
from tests.integration.test_service_planner import Historicals, send
from tests.integration.test_service_planner_crash import announced, answers_log, commands_log, unanswered
from tests.integration.test_service_workers import IN_TEST_PUBLISHES, Worker, command_epochs, wiki

pytestmark = pytest.mark.integration

SERVERS = ["hf1", "hf2", "hf3"]
REPLICAS = 2

Command = LoadSegment | DropSegment | CancelSegmentLoad


def epoch_of(w: Worker) -> int:
    lines = [ln for ln in w.log.read_text().splitlines() if "leads from epoch" in ln]
    return int(lines[-1].rsplit("leads from epoch", 1)[1].split(";")[0])


def test_a_paused_leader_is_fenced_when_it_comes_back(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    send(kafka_bootstrap, topics, DynamicConfigSet(config={"smartSegmentLoading": False, "maxSegmentsToMove": 0}),
         "config")
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": REPLICAS}},)), "rules/wiki")
    workers = [Worker(kafka_bootstrap, topics, tmp_path, f"w{i}") for i in (1, 2)]
    placed_so_far: list[str] = []

    def place(days: range) -> None:
        for d in days:
            send(kafka_bootstrap, topics, import_request((wiki(d),), f"wiki{d}"), "wiki")
            placed_so_far.append(str(wiki(d).id))

    def converged() -> bool:
        commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
        held = announced(answers)
        return all(len(held.get(s, set()) & set(SERVERS)) == REPLICAS for s in placed_so_far) \
            and not unanswered(live(commands), answers)

    try:
        with Historicals(kafka_bootstrap, topics, SERVERS, max_size=1_000_000):
            for w in workers:
                w.start()
            wait_for("an elected planner", lambda: sum(w.leads() for w in workers) == 1, workers, 120)
            place(range(6))
            wait_for("placement", converged, workers, 300)
            old = next(w for w in workers if w.leads())
            new = next(w for w in workers if w is not old)
            old_epoch = epoch_of(old)
            assert old.proc is not None
            old.proc.send_signal(signal.SIGSTOP)  # cut off: no heartbeat, no poll, no log line
            try:
                wait_for("the other worker's election", new.leads, [new], 120)
                new_epoch = epoch_of(new)
                assert new_epoch > old_epoch
                place(range(6, 14))

                def commanded_by_new() -> set[str]:
                    return {c.event.server for c in commands_log(kafka_bootstrap, topics)
                            if isinstance(c.event, LoadSegment) and c.event.planner_epoch == new_epoch}

                wait_for("the new leader's commands", commanded_by_new, [new], 300)
                wait_for("placement under the new leader", converged, [new], 300)
                # what the paused leader would send when it runs again: a drop of a copy it placed, in its epoch,
                # on a server the new leader commanded since
                held = announced(answers_log(kafka_bootstrap, topics))
                fenced = commanded_by_new()
                victim = next(s for s in sorted(held) if s in placed_so_far[:6] and held[s] & fenced)
                server = sorted(held[victim] & fenced)[0]
                zombie = Envelope(DropSegment(command_id="zombie-drop", server=server, segment_id=victim, stage="12",
                                              purpose="unloading", reason="stale view", planner_epoch=old_epoch),
                                  "zombie-drop", Instant(int(time.time() * 1000)), server)
                producer = EventProducer(kafka_bootstrap, topics)
                producer.headers = [(HEADER, f"{old.worker_id}@{old_epoch}".encode())]
                producer.send(zombie)
                producer.flush(30)
                producer.close()
            finally:
                old.proc.send_signal(signal.SIGCONT)

            def old_stepped_down() -> bool:
                text = old.log.read_text()
                return "stops planning" in text or "no longer leads" in text

            wait_for("the resumed leader to step down", old_stepped_down, workers, 120)
            place(range(14, 18))
            wait_for("placement after the resume", converged, workers, 300)
            for w in workers:
                assert w.stop() == 0, w.tail()
    finally:
        kill_alive(workers)

    commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
    acted = {e.causation_id for e in answers if e.causation_id is not None}
    acted |= {e.event.command_id for e in answers if isinstance(e.event, SegmentLoadRefused)}
    void = {commands[i].event_id for i in void_commands(commands)} - {c.event_id for c in live(commands)}
    assert "zombie-drop" in void
    assert not void & acted, f"acted on commands of a deposed epoch: {sorted(void & acted)}"
    assert victim in announced(answers) and server in announced(answers)[victim]

    # one planner at a time: among the commands acted on, epochs never go down along a partition
    epochs = command_epochs(kafka_bootstrap, topics)
    workers_of: dict[int, set[str]] = {}
    for seq in epochs.values():
        for worker, epoch in seq:
            workers_of.setdefault(epoch, set()).add(worker)
    assert all(len(v) == 1 for v in workers_of.values()), workers_of
    live_epochs = [c.event.planner_epoch for c in live(commands) if isinstance(c.event, Command)]
    assert old_epoch in live_epochs and new_epoch in live_epochs
    by_server: dict[str, list[int]] = {}
    for c in live(commands):
        if isinstance(c.event, Command) and c.event.planner_epoch is not None:
            by_server.setdefault(c.event.server, []).append(c.event.planner_epoch)
    assert all(a <= b for seq in by_server.values() for a, b in itertools.pairwise(seq)), by_server

    placed = announced(answers)
    assert all(len(placed[s] & set(SERVERS)) == REPLICAS for s in placed_so_far)
    violations = [v for v in audit(kafka_bootstrap, topics, command_timeout_ms=0) if v.rule not in IN_TEST_PUBLISHES]
    assert violations == [], violations[:10]


def void_commands(commands: list[Envelope[Event]]) -> list[int]:
    """Indices of the commands that come after a later epoch's command to the same server (the fence's oracle)."""
    highest: dict[str, int] = {}
    out = []
    for i, c in enumerate(commands):  # one server's commands are on one partition, in order
        ev = c.event
        if not isinstance(ev, Command) or ev.planner_epoch is None:
            continue
        if ev.planner_epoch < highest.get(ev.server, -1):
            out.append(i)
        highest[ev.server] = max(highest.get(ev.server, -1), ev.planner_epoch)
    return out


def live(commands: list[Envelope[Event]]) -> list[Envelope[Event]]:
    void = set(void_commands(commands))
    return [c for i, c in enumerate(commands) if i not in void]


def http_get(url: str, method: str = "GET", body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """One request, redirects NOT followed: (status, headers, body)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body,
                     headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode()
    finally:
        conn.close()


def test_the_http_api_of_a_worker_that_does_not_lead_redirects_to_the_leaders(kafka_bootstrap: str,
                                                                               tmp_path: Path) -> None:
    """Two workers with --http: the one not elected answers 307 to the elected one's API (Druid's redirect), both
    say who leads; when the leader stops, the other leads and answers itself."""
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    ports = {f"w{i}": free_port() for i in (1, 2)}
    workers = []
    for wid, port in ports.items():
        w = Worker(kafka_bootstrap, topics, tmp_path, wid)
        w.args += ["--http", f"127.0.0.1:{port}"]
        workers.append(w)
    url = {w.worker_id: f"http://127.0.0.1:{ports[w.worker_id]}" for w in workers}
    try:
        for w in workers:
            w.start()
        wait_for("an elected planner", lambda: sum(w.leads() for w in workers) == 1, workers, 120)
        leader = next(w for w in workers if w.leads())
        other = next(w for w in workers if w is not leader)

        def serving(w: Worker) -> bool:
            try:
                return http_get(url[w.worker_id] + "/status/health")[0] == 200
            except OSError:
                return False

        wait_for("both HTTP APIs", lambda: all(serving(w) for w in workers), workers, 120)
        send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
            {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "rules/wiki")
        path = "/druid/coordinator/v1/rules/wiki"
        wait_for("the leader to read the rules", lambda: '"hot"' in http_get(url[leader.worker_id] + path)[2],
                   workers, 120)

        status, headers, _ = http_get(url[other.worker_id] + path + "?x=1")
        assert status == 307, (status, headers)
        assert headers["Location"] == url[leader.worker_id] + path + "?x=1"
        assert headers["X-Segcoord-Leader"].startswith(f"{leader.worker_id}@")
        followed = urllib.request.urlopen(url[other.worker_id] + path, timeout=30).read().decode()
        assert '"hot"' in followed  # the leader's current view, reached through the other worker
        for w in workers:
            assert http_get(url[w.worker_id] + "/druid/coordinator/v1/leader")[2] == url[leader.worker_id]
        assert http_get(url[leader.worker_id] + "/druid/coordinator/v1/isLeader")[:1] == (200,)
        assert http_get(url[other.worker_id] + "/druid/coordinator/v1/isLeader")[:1] == (404,)
        assert http_get(url[other.worker_id] + "/status/health")[0] == 200  # its own, never redirected

        assert leader.stop() == 0, leader.tail()
        wait_for("the other worker's election", other.leads, [other], 120)
        wait_for("the other worker to answer itself", lambda: http_get(url[other.worker_id] + path)[0] == 200,
                   [other], 60)
        assert '"hot"' in http_get(url[other.worker_id] + path)[2]
        assert http_get(url[other.worker_id] + "/druid/coordinator/v1/isLeader")[0] == 200
        assert other.stop() == 0, other.tail()
    finally:
        kill_alive(workers)
