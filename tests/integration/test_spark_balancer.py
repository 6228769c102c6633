"""The Spark balancer on the real broker and local Spark: agreement, convergence, restart from the checkpoint.

The cluster is events on real topics (servers, rules, config, publishes, announces);
instead of 21 historical processes an in-test executor answers the job's commands the
way a historical does (announce the load, unannounce a move's source only after its
target announced), writing the answers back to ``segments`` for the job to read.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from coordinator.locks.seal import seal_event
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import balance_tier, plan
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Envelope, Interval, SegmentDescriptor, Topics
from events.commands import DropSegment, LoadSegment
from events.envelope import decode
from events.registry import Event
from events.segments import SegmentsMarkedUnused, SegmentsPublished
from events.topics import COMMANDS
from streaming.balancer import job
from streaming.consumer import EventConsumer
from streaming.offsets import watermarks
from streaming.producer import EventProducer
from tests.unit.balancer.balancer_events import T0, TIER, ClusterSpec, Executor

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def produce(bootstrap: str, topics: Topics, envelopes: list[Envelope[Event]]) -> None:
    producer = EventProducer(bootstrap, topics)
    for env in envelopes:
        producer.send(env)
    producer.flush()


def read_commands(bootstrap: str, topics: Topics) -> list[Envelope[Event]]:
    """Everything on ``commands`` (one partition) up to its high watermark, in order."""
    name = topics.name(COMMANDS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        _low, high = watermarks(consumer, TopicPartition(name, 0), timeout=30)
        consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
        out: list[Envelope[Event]] = []
        last = -1
        while last < high - 1:
            msg = consumer.poll(10)
            assert msg is not None, f"{name}: no message after offset {last} (high watermark {high})"
            assert msg.error() is None, msg.error()
            out.append(decode(msg.value()))
            last = msg.offset()
        return out
    finally:
        consumer.close()


def dedup(envelopes: list[Envelope[Event]]) -> list[Envelope[Event]]:
    seen: set[str] = set()
    out = []
    for env in envelopes:
        if env.event_id not in seen:
            seen.add(env.event_id)
            out.append(env)
    return out


def run_available_now(spark: Any, bootstrap: str, topics: Topics, checkpoint: Path,
                      metrics: Path | None = None) -> None:
    query = job.start(spark, bootstrap, topics, checkpoint, available_now=True, metrics_path=metrics)
    query.awaitTermination(300)
    assert query.exception() is None


def moves_of(commands: list[Envelope[Event]]) -> list[tuple[str, str, str, str]]:
    """(segment, from, to, stage) per move, in command order, from LoadSegment/DropSegment pairs."""
    loads = {e.event.move_id: e.event for e in commands if isinstance(e.event, LoadSegment)}
    out = []
    for env in commands:
        drop = env.event
        if isinstance(drop, DropSegment) and drop.move_id in loads:
            load = loads[drop.move_id]
            out.append((drop.segment_id, drop.server, load.server, load.stage))
    return out


def test_agreement_with_the_pure_balancing_stage(kafka_bootstrap: str, topics: Topics, spark: Any,
                                                 tmp_path: Path) -> None:
    spec = ClusterSpec(servers=8, new_servers=1, data_sources=3, hours=48)
    events = spec.events()
    produce(kafka_bootstrap, topics, events)
    run_available_now(spark, kafka_bootstrap, topics, tmp_path / "ck")  # one batch, the tier's run 1
    spark_moves = moves_of(read_commands(kafka_bootstrap, topics))
    assert spark_moves == pure_moves(spec, events)


def test_unsealed_publishes_and_marks_do_not_enter_the_balancers_state(kafka_bootstrap: str, topics: Topics,
                                                                         spark: Any, tmp_path: Path) -> None:
    """Forged ``segments_marked_unused`` (two of three data sources, unsealed and wrongly sealed) and a forged
    publish between the real events: the job's moves are exactly the pure balancing of the real events alone."""
    spec = ClusterSpec(servers=8, new_servers=1, data_sources=3, hours=48)
    events = spec.events()
    held = [s for segs in spec.placement().values() for s in segs if s.data_source != "ds2"]
    at = events[-1].occurred_at
    forged: list[Envelope[Event]] = [
        Envelope(SegmentsMarkedUnused(segment_ids=tuple(sorted(str(s.id) for s in held)), reason="forged"),
                 "forged-mark", at, "ds0"),
        seal_event(Envelope(SegmentsMarkedUnused(segment_ids=tuple(sorted(str(s.id) for s in held)),
                                                 reason="forged"), "guessed-mark", at, "ds0"), b"guessed"),
        Envelope(SegmentsPublished(task_id="forged", segments=(SegmentDescriptor(
            "ds0", Interval(T0 - 86_400_000, T0), "v9", 0, 10**9),)), "forged-publish", at, "ds0"),
    ]
    produce(kafka_bootstrap, topics, [*events[:-1], *forged, events[-1]])
    metrics = tmp_path / "metrics.jsonl"
    run_available_now(spark, kafka_bootstrap, topics, tmp_path / "ck", metrics)
    assert moves_of(read_commands(kafka_bootstrap, topics)) == pure_moves(spec, events)
    summaries = [orjson.loads(line) for line in metrics.read_bytes().splitlines()]
    assert sum(s["refused"] for s in summaries) == len(forged)


def pure_moves(spec: ClusterSpec, events: list[Envelope[Event]]) -> list[tuple[str, str, str, str]]:
    """The pure balancing stage's moves (run 1) over the frozen placement: checked equal to the whole plan's."""
    placement = spec.placement()
    segments = {s.id: s for held in placement.values() for s in held}
    view = ClusterView(
        now=events[-1].occurred_at,
        servers={n: ServerState(Server(n, TIER, 10**12), frozenset(s.id for s in held))
                 for n, held in placement.items()},
        segments=segments, used=frozenset(segments),
        rules=RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {TIER: 1}}]}),
        config=DynamicConfig.parse(spec.config), run=1)  # the first balancing run
    pure = [(str(c.segment), c.source, c.server, str(c.stage)) for c in balance_tier(view, TIER).commands]
    whole_plan = [(str(c.segment), c.source, c.server, str(c.stage)) for c in plan(view).commands if c.type == "move"]
    assert pure, "the frozen placement (one empty server) must need moves"
    assert pure == whole_plan
    return pure


def test_convergence_with_a_new_empty_server(kafka_bootstrap: str, topics: Topics, spark: Any,
                                             tmp_path: Path) -> None:
    spec = ClusterSpec(servers=20, new_servers=1, data_sources=5, hours=120,
                       config={"smartSegmentLoading": False, "maxSegmentsToMove": 100,
                               "maxSegmentsInNodeLoadingQueue": 100})
    executor = Executor.of(spec.placement())
    cost_at_start = executor.total_cost()
    produce(kafka_bootstrap, topics, spec.events())
    metrics = tmp_path / "metrics.jsonl"
    stop = threading.Event()
    last_command = [time.monotonic()]
    failures: list[BaseException] = []

    def answer_loop() -> None:  # the historicals: commands in, announces/unannounces out
        consumer = EventConsumer(kafka_bootstrap, topics, f"x-{uuid.uuid4().hex}", [COMMANDS])
        producer = EventProducer(kafka_bootstrap, topics)
        try:
            while not stop.is_set():
                records = consumer.poll(timeout=0.2)
                if records:
                    last_command[0] = time.monotonic()
                for env in executor.answer([r.envelope for r in records]):
                    producer.send(env)
                producer.flush()
        except BaseException as e:  # surfaced by the test
            failures.append(e)
        finally:
            consumer.close()
            producer.close()

    thread = threading.Thread(target=answer_loop, daemon=True)
    thread.start()
    query = job.start(spark, kafka_bootstrap, topics, tmp_path / "ck", trigger_seconds=0.5, metrics_path=metrics,
                      compute_cost=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and query.exception() is None and not failures:
            time.sleep(1)
            quiet = time.monotonic() - last_command[0] > 3
            if quiet and not executor.waiting and _last_triggered_had_no_moves(metrics):
                break
    finally:
        query.stop()
        stop.set()
        thread.join(30)
    assert not failures and query.exception() is None
    summaries = [orjson.loads(line) for line in metrics.read_bytes().splitlines()]
    triggered = [s for s in summaries if s["triggered"] and "maxSegmentsToMove" in s]
    assert triggered and triggered[-1]["moves"] == 0, "the job must reach a batch with nothing left to move"

    counts = executor.counts()
    mean = statistics.mean(counts.values())
    assert all(abs(c - mean) <= 0.05 * mean for c in counts.values()), counts
    assert counts["h20"] > 0  # the new server took its share
    costs = [s["costAfter"] for s in triggered]
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(costs)), costs  # never rises
    assert costs[-1] < cost_at_start and triggered[-1]["costBefore"] == pytest.approx(costs[-1], rel=1e-9)
    assert executor.total_cost() == pytest.approx(costs[-1], rel=1e-9)  # the applied placement is the projected one
    # One shuffle partition, so one Python worker runs every batch: after the first (which restores or starts
    # empty), each batch finds the live placement and restores nothing from the maps (O(cluster) when it must).
    assert all(s["cacheHit"] for s in summaries[1:]), [(s["batch"], s["cacheHit"]) for s in summaries]
    for s in triggered:  # no batch exceeds its limits (the balancing share of each queue counts in-flight moves)
        assert s["moves"] <= s["maxSegmentsToMove"]
        assert all(n <= s["balancingQueueCap"] for n in s["balancingQueues"].values()), s


def _last_triggered_had_no_moves(metrics: Path) -> bool:
    if not metrics.exists():
        return False
    lines = metrics.read_bytes().splitlines()
    summaries = [orjson.loads(line) for line in lines]
    triggered = [s for s in summaries if s["triggered"]]
    return bool(triggered) and triggered[-1]["moves"] == 0 and triggered[-1].get("balancingQueues") == {}


def _rounds(spark: Any, bootstrap: str, topics: Topics, checkpoint: Path, spec: ClusterSpec, rounds: int,
            crash_round: int | None = None) -> list[Envelope[Event]]:
    """Feed the input, then per round: one available-now run, answer its new commands. The crash round runs
    the job in a subprocess killed (SIGKILL) after it wrote the round's commands, before Spark committed them,
    then the same round again in this process from the checkpoint."""
    executor = Executor.of(spec.placement())
    produce(bootstrap, topics, spec.events())
    for r in range(rounds):
        if r == crash_round:
            env = {**os.environ, job.CRASH_ENV: str(r)}
            proc = subprocess.run(
                [sys.executable, "-m", "streaming.cli", "balancer", "run", "--available-now", "--bootstrap", bootstrap,
                 "--prefix", topics.prefix, "--checkpoint", str(checkpoint)], env=env, capture_output=True,
                timeout=300)
            assert proc.returncode == -9, proc.stderr.decode()[-2000:]
        run_available_now(spark, bootstrap, topics, checkpoint)
        produce(bootstrap, topics, executor.answer(read_commands(bootstrap, topics)))
    return read_commands(bootstrap, topics)


def test_restart_from_the_checkpoint_applies_no_move_twice(kafka_bootstrap: str, spark: Any, tmp_path: Path) -> None:
    from streaming.admin import create_topics

    spec = ClusterSpec(servers=6, new_servers=1, data_sources=2, hours=48,
                       config={"smartSegmentLoading": False, "maxSegmentsToMove": 6,
                               "maxSegmentsInNodeLoadingQueue": 20})
    a, b = Topics(f"a{uuid.uuid4().hex[:8]}."), Topics(f"b{uuid.uuid4().hex[:8]}.")
    for t in (a, b):
        create_topics(kafka_bootstrap, t, partitions=1)
    uninterrupted = _rounds(spark, kafka_bootstrap, a, tmp_path / "a", spec, rounds=3)
    restarted = _rounds(spark, kafka_bootstrap, b, tmp_path / "b", spec, rounds=3, crash_round=1)

    def key(env: Envelope[Event]) -> bytes:
        return orjson.dumps(env.to_json())

    assert len(restarted) > len(dedup(restarted)), "the crash came after the write: the batch was sent twice"
    assert [key(e) for e in dedup(restarted)] == [key(e) for e in dedup(uninterrupted)]
    assert len(moves_of(dedup(uninterrupted))) > 6  # several rounds of moves, not one


def test_segcoord_run_with_the_spark_balancer_starts_it_and_leaves_balancing_to_it(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """``segcoord run --balancer spark``: the job starts beside the worker (checkpoint under the state folder),
    the planner agent says it skips its balancing stages, and a SIGTERM ends both processes."""
    import signal

    topics = Topics(f"bs{uuid.uuid4().hex[:8]}.")
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "segcoord"), "run", "--bootstrap", kafka_bootstrap,
             "--topic-prefix", topics.prefix, "--state-dir", str(tmp_path / "state"), "--balancer", "spark"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 180
        while "segcoord balancer: tiers _default_tier" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        text = log.read_text()
        assert "balancing left to the Spark balancer" in text
        child = int(text.split("Spark balancer started (pid ", 1)[1].split(")", 1)[0])
        assert str(tmp_path / "state" / "balancer-checkpoint") in text

        # segcoord status sees the balancer alive (the worker reports it on the metrics topic)
        def balancer_state() -> str:
            got = subprocess.run([str(Path(sys.executable).parent / "segcoord"), "status", "--json", "--bootstrap",
                                  kafka_bootstrap, "--topic-prefix", topics.prefix], capture_output=True, text=True,
                                 timeout=60)
            return str(json.loads(got.stdout)["sparkBalancer"]) if got.stdout.strip() else ""
        while balancer_state() != "alive":
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline + 60, log.read_text()[-3000:]
            time.sleep(1.0)

        # the job dies (SIGKILL): the worker says so and starts it again (issue 16: it kept running without it)
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 180
        while log.read_text().count("segcoord balancer: tiers _default_tier") < 2:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert "the Spark balancer exited (status -9); restarting in" in log.read_text()
        while balancer_state() != "alive":
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline + 60, log.read_text()[-3000:]
            time.sleep(1.0)
        child = int(log.read_text().split("Spark balancer restarted (pid ", 1)[1].split(")", 1)[0])
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
    assert code == 0, log.read_text()[-3000:]
    assert "\x1b" not in log.read_text() and "\r" not in log.read_text(), "escape codes or progress bars in the log"
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()
