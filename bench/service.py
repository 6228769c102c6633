"""Benchmark: ``segcoord run`` (the Faust worker) on a real broker: agent throughput and visibility latency.

Three measurements, each against a fresh topic prefix and an empty state folder:

1. **Timeline agent throughput**: N segments events (publishes, announces, unannounces, marks unused over
   6 data sources) are produced first; then ``segcoord run`` starts as a subprocess and the clock runs until
   the ``timeline`` topic holds every visibility change a pure fold predicts. Reported: events/s from the
   process start (includes the worker's start-up) and from its first output (steady state). The worker of this
   run leads (it is alone), so its planner feed folds every ``segments`` record on its own thread beside the
   agents; the same measurement follows on a ``segcoord run --no-planner`` worker (the timeline path of a worker
   that does not plan), each against the pure fold of its own call. With ``SEGCOORD_BENCH_PROFILE=PATH`` each
   worker runs under py-spy (``PATH.timeline.raw``, ``PATH.timeline-noplanner.raw``).
2. **Lockbox agent throughput**: the same with M task requests (lifecycles of start, lock, allocate, publish,
   finish) and the ``locks`` topic.
3. **Visibility latency**: with the worker of (1) still running and caught up, a paced stream of publishes and
   announces (``--paced`` events at ``--rate`` per second); latency = time the visibility change is read by a
   consumer minus the time its input was produced (both wall clock in this process), p50 / p99 / max; and the
   p99 as a ratio against Druid's 60 s coordinator / metadata poll period.
4. **Placement latency** (``--only placement``): publish request -> ``load_segment`` on a cluster of ``--servers``
   holding ``--preload`` segments x 2 replicas, first with ``segcoord run --planner full`` (every run plans the
   whole cluster: the baseline) and then with the incremental planner, and the ratio of their p99s.
   ``--preload-via direct`` (the default above 10k segments) writes the preloaded placement into the planner's
   store before the worker starts; ``lockbox`` reaches it through lock requests and real loads. It also prints
   the worker's CPU seconds per second during the paced window and its CPU ms per publish (what the worker needs,
   steadier than latency on a shared machine); ``SEGCOORD_BENCH_PROFILE=PATH`` attaches py-spy to the worker for
   the paced window only (``PATH.full.raw``, ``PATH.incremental.raw``).

``--only agent``: the timeline agent alone in this process (no broker, no worker, a real RocksDB store), against
the same fold: what the agent adds to the fold, per CPU second. Both run under the worker's heap policy
(``FrozenHeap``; ``--heap default``: CPython's collector) and the agent's records are dropped after each batch, as
the worker does (docs/service.md, "The agent in process, seventh pass").

Baseline in the same run: a pure in-process fold of the same events (decode + ``Timelines.apply``, decode +
``Lockbox.handle``), printed with the service/fold ratio.

Run: ``.venv/bin/python -m bench.service [--segments 50000] [--requests 20000] [--paced 1000] [--rate 500]``.
With ``SEGCOORD_BOOTSTRAP`` set it uses that broker; otherwise it starts its own local broker (127.0.0.1 only)
under a temporary home and stops it at the end. It always stops by itself.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.broker import bench_broker
from bench.stages import topic_offsets
from coordinator.locks.lockbox import Lockbox
from coordinator.timeline.timelines import Timelines
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode, encode
from events.cluster import ServerHeartbeat, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.locks import LockGranted
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.tasks import LockRequested, PublishRequested, TaskStarted
from events.topics import COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from streaming.admin import create_topics
from streaming.offsets import watermarks
from streaming.producer import EventProducer
from tests.accepted import through_lockbox

SEGCOORD = str(Path(sys.executable).parent / "segcoord")
T0 = 1_795_219_200_000
DAY = 86_400_000
HOUR = 3_600_000


def segment_events(n: int, seed: int = 1) -> list[Envelope[Event]]:
    from tests.integration.test_service_timeline import segment_stream

    return segment_stream(random.Random(seed), n)


def request_events(n: int, seed: int = 2) -> list[Envelope[Event]]:
    from tests.integration.test_service_lockbox import request_stream

    out: list[Envelope[Event]] = []
    tasks = max(1, n // 5)
    while len(out) < n:
        out = [e for e in request_stream(random.Random(seed), tasks) if not isinstance(e, bytes)]
        tasks = int(tasks * 1.1) + 1
    return out


def fold_timeline(values: list[bytes], after_batch: Callable[[], None] | None = None,
                  batch: int = 2000) -> tuple[int, float, float]:
    """Visibility changes a pure fold emits, its events/s and its events per CPU second (decode included, as the
    agent decodes). ``after_batch``: called after every ``batch`` events, inside the time (the worker's heap policy,
    :meth:`FrozenHeap.after_batch`, as ``agent_in_process`` calls it after each of the agent's batches)."""
    started, cpu = time.perf_counter(), time.process_time()
    timelines, seen, changes = Timelines(), set(), 0
    for i in range(0, len(values), batch if after_batch is not None else max(1, len(values))):
        for v in values[i:i + batch] if after_batch is not None else values:
            e = decode(v)
            if e.event_id in seen:
                continue
            seen.add(e.event_id)
            changes += len(timelines.apply(e.event))
        if after_batch is not None:
            after_batch()
    return changes, len(values) / (time.perf_counter() - started), len(values) / (time.process_time() - cpu)


def fold_lockbox(values: list[bytes]) -> tuple[int, float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    box, seen, decisions = Lockbox(), set(), 0
    for v in values:
        e = decode(v)
        if e.event_id in seen:
            continue
        seen.add(e.event_id)
        decisions += len(box.handle(e))
    return decisions, len(values) / (time.perf_counter() - started), len(values) / (time.process_time() - cpu)


class BytesSink:
    """What the worker's producer does with the agent's outputs, minus the network: the bytes are made and kept."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.values.append(encode(envelope))

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.values.append(value or b"")

    def flush(self, timeout: float = 30.0) -> None:
        pass


def agent_in_process(values: list[bytes], batch: int = 2000, rounds: int = 2, heap: str = "worker") -> None:
    """The timeline agent alone, in this process, on a real RocksDB store, in batches of ``batch`` (the worker's
    fetch size), against the pure fold of the same run: the agent's own cost (dedupe, seal check, outputs, state
    staging, the write batch) without the broker, the other agents or the machine's other jobs in the figure.

    ``heap="worker"``: the fold and the agent both run under the worker's heap policy (``FrozenHeap``: the young
    threshold raised, a collection and a freeze after a batch at most once a second, as ``segcoord run`` does);
    ``"default"``: CPython's collector as it comes, where each full collection scans the whole fold (a few per
    round, at whatever moment the collector's thresholds say: the largest source of the spread between rounds).

    ``rounds`` runs of the fold and of the agent, alternating; the last line compares the best CPU rate of
    each (on a loaded machine a single pair moves by +-0.1)."""
    from streaming.service import timeline_agent
    from streaming.service.heap import FrozenHeap
    from streaming.service.intake import InputRecord
    from streaming.service.state import AgentStateStore

    topics = Topics("bench.")
    best_fold = best_agent = 0.0
    ratios: list[float] = []
    thresholds = gc.get_threshold()
    for run in range(1, rounds + 1):
        gc.collect()  # every round from the same heap: nothing of the last one left for the collector to scan
        policy = FrozenHeap() if heap == "worker" else None
        if policy is not None:
            policy.start()
        changes, fold_rate, fold_cpu_rate = fold_timeline(values, policy.after_batch if policy else None, batch)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        best_fold = max(best_fold, fold_cpu_rate)
        policy = FrozenHeap() if heap == "worker" else None
        with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp, \
                AgentStateStore(Path(tmp) / "timeline", timeline_agent.FORMAT_VERSION) as store:
            sink = BytesSink()
            agent = timeline_agent.TimelineAgent(store, topics, sink)
            name, wall, cpu = topics.name(SEGMENTS), 0.0, 0.0
            if policy is not None:
                policy.start()  # (the worker: after its stores are loaded)
            for i in range(0, len(values), batch):
                # each batch's records built before its call and dropped after it, as the worker does: holding all
                # of them (and the envelopes they keep) grew the heap the collector scans, a cost the worker does
                # not have
                records = [InputRecord(name, 0, j, None, values[j], 1000 + j)
                           for j in range(i, min(i + batch, len(values)))]
                started, cpu_started = time.perf_counter(), time.process_time()
                agent.process(records)
                if policy is not None:
                    policy.after_batch()  # (the worker's event loop, after each fetched batch)
                wall, cpu = wall + time.perf_counter() - started, cpu + time.process_time() - cpu_started
                del records
            gc.unfreeze()
            gc.set_threshold(*thresholds)
        assert len(sink.values) == changes, (len(sink.values), changes)
        del agent, sink  # (the next round's fold would run beside this agent's whole fold state)
        best_agent = max(best_agent, len(values) / cpu)
        ratios.append(len(values) / cpu / fold_cpu_rate)
        print(f"timeline agent in-process (run {run}): {len(values) / wall:,.0f} events/s, "
              f"{len(values) / cpu:,.0f} per CPU second; pure fold {fold_rate:,.0f} events/s, "
              f"{fold_cpu_rate:,.0f} per CPU second; agent/fold = {len(values) / cpu / fold_cpu_rate:.2f} (CPU)")
    print(f"best of {rounds} ({heap} heap policy): agent {best_agent:,.0f}, fold {best_fold:,.0f} events per CPU "
          f"second; agent/fold = {best_agent / best_fold:.2f} (CPU; median of the rounds' own ratios "
          f"{statistics.median(ratios):.2f})")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> tuple[float, float]:
    """A process's resident set now and at its peak, MB (Linux ``/proc``: VmRSS, VmHWM; 0 elsewhere)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0, 0.0
    kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if k in ("VmRSS", "VmHWM")}
    return kb.get("VmRSS", 0) / 1024, kb.get("VmHWM", 0) / 1024


def end_offset(bootstrap: str, topic: str) -> int:
    """The end offset of ``topic``'s partition 0 (asked again while a loaded broker elects its leader)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    try:
        return watermarks(c, TopicPartition(topic, 0))[1]
    finally:
        c.close()


class Worker:
    def __init__(self, bootstrap: str, topics: Topics, state: Path, log: Path, planner: str = "incremental",
                 balancer: str = "planner", profile_all: bool = True, extra: tuple[str, ...] = ()) -> None:
        self.log = log
        # a py-spy raw profile of the worker goes there (placement: of the paced window only, see attach_profile)
        profile = os.environ.get("SEGCOORD_BENCH_PROFILE") if profile_all else None
        self.profiled = bool(profile)
        flags = os.environ.get("SEGCOORD_BENCH_PROFILE_FLAGS", "").split()  # e.g. --gil: samples holding the GIL
        wrap = [_py_spy(), "record", "-r", "50", "-f", "raw", *flags, "-o",
                f"{profile}.{log.stem}.raw", "--"] if profile else []
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*wrap, SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix, "--state-dir",
                 str(state), "--planner", planner, "--balancer", balancer, *extra], stdout=out,
                stderr=subprocess.STDOUT)
        self.started = time.perf_counter()

    def pids(self) -> list[int]:
        return [self.proc.pid]

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, what: str, done: Callable[[], bool], deadline: float) -> None:
        """Poll ``done`` until it holds; exit the benchmark if the worker died or ``deadline`` (monotonic) passed."""
        while not done():
            if self.exited():
                raise SystemExit(f"segcoord run exited; see {self.log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: not reached in time; see {self.log}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            # profiled: stop the worker under py-spy, which then writes its profile and exits
            for pid in _children(self.proc.pid) if self.profiled else [self.proc.pid]:
                os.kill(pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class SplitWorker(Worker):
    """The worker split in two processes (docs/workers.md, "A planner in its own process"): ``segcoord run
    --planner-only`` on ``state`` (the planner's store, preloaded there) and a ``--no-planner`` worker for the
    agents on a folder of its own. It is measured as one: its CPU and memory are both processes' sums."""

    def __init__(self, bootstrap: str, topics: Topics, state: Path, log: Path, planner: str = "incremental",
                 balancer: str = "planner") -> None:
        self.agents = Worker(bootstrap, topics, state.with_name(state.name + "-agents"),
                             log.with_name(log.stem + "-agents.log"), planner, balancer, profile_all=False,
                             extra=("--no-planner",))
        super().__init__(bootstrap, topics, state, log, planner, balancer, profile_all=False,
                         extra=("--planner-only",))

    def pids(self) -> list[int]:
        return [self.proc.pid, self.agents.proc.pid]

    def exited(self) -> bool:
        return super().exited() or self.agents.exited()

    def stop(self) -> None:
        self.agents.stop()
        super().stop()


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core (Linux ``/proc/stat``; zeros elsewhere)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + fields[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def broker_pid(work: Path) -> int | None:
    """The pid of the bench's own local broker (a java process whose command line names ``work``), if any."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"java" in cmdline and str(work).encode() in cmdline:
            return int(proc.name)
    return None


def cpu_of(worker: Worker) -> float:
    return sum(cpu_seconds(pid) for pid in worker.pids())


def memory_of(worker: Worker) -> tuple[float, float]:
    """The resident sets (now, peak) summed over the worker's processes, MB."""
    now, peak = zip(*(memory_mb(pid) for pid in worker.pids()), strict=True)
    return sum(now), sum(peak)


def attach_profile(worker: Worker, label: str, seconds: float) -> subprocess.Popen[bytes] | None:
    """With ``SEGCOORD_BENCH_PROFILE=PATH``: py-spy records the running worker (every thread,
    ``SEGCOORD_BENCH_PROFILE_RATE`` samples/s, 100 unless set, with ``SEGCOORD_BENCH_PROFILE_FLAGS``) for
    ``seconds`` into ``PATH.<label>.raw`` (one line per stack, py-spy's raw format), so the profile covers the
    measured window only, not the start-up and restore. Returns the py-spy process (None when unset)."""
    profile = os.environ.get("SEGCOORD_BENCH_PROFILE")
    if not profile:
        return None
    flags = os.environ.get("SEGCOORD_BENCH_PROFILE_FLAGS", "").split()  # e.g. --gil: samples holding the GIL
    rate = os.environ.get("SEGCOORD_BENCH_PROFILE_RATE", "100")  # samples per second
    return subprocess.Popen([_py_spy(), "record", "-r", rate, "-f", "raw", *flags,
                             "--threads", "-d", str(max(1, int(seconds))), "-p", str(worker.proc.pid), "-o",
                             f"{profile}.{label}.raw"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _py_spy() -> str:
    """py-spy named by SEGCOORD_PY_SPY, else the one beside this interpreter, else the one on PATH."""
    named = os.environ.get("SEGCOORD_PY_SPY")
    if named:
        return named
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("SEGCOORD_BENCH_PROFILE needs py-spy (pip install py-spy)")
    return found


def _children(pid: int) -> list[int]:
    """The process's child pids (Linux), empty when it has none or is gone."""
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    except OSError:
        return []


def wait_output(bootstrap: str, topic: str, want: int, worker: Worker,
                timeout: float) -> tuple[float, float, float]:
    """Seconds from the worker's start until ``topic`` holds ``want`` records and until its first record, and the
    worker's CPU seconds between the two."""
    first = None
    first_cpu = 0.0
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if worker.proc.poll() is not None:
            raise SystemExit(f"segcoord run exited ({worker.proc.returncode}); see {worker.log}")
        got = end_offset(bootstrap, topic)
        now = time.perf_counter() - worker.started
        if got and first is None:
            first, first_cpu = now, cpu_seconds(worker.proc.pid)
        if got >= want:
            return now, first or now, cpu_seconds(worker.proc.pid) - first_cpu
        time.sleep(0.05)
    raise SystemExit(f"{topic}: fewer than {want} records after {timeout:.0f}s; see {worker.log}")


def produce(bootstrap: str, topics: Topics, events: list[Envelope[Event]]) -> list[bytes]:
    producer = EventProducer(bootstrap, topics)
    values = []
    for e in events:
        values.append(encode(e))
        producer.send(e)
    producer.flush(120)
    return values


def throughput(bootstrap: str, work: Path, logical_in: str, logical_out: str, events: list[Envelope[Event]],
               fold, label: str, extra: tuple[str, ...] = (),  # type: ignore[no-untyped-def]
               title: str | None = None) -> tuple[Worker, Topics]:
    """``label``'s agent on a fresh topic prefix: the worker (``segcoord run`` + ``extra``) against the pure fold
    of the same events, measured in this call; printed under ``title`` (default ``<label> agent``)."""
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}.")
    create_topics(bootstrap, topics, partitions=1)
    values = produce(bootstrap, topics, events)
    outputs, fold_rate, fold_cpu_rate = fold(values)
    worker = Worker(bootstrap, topics, work / f"state-{label}", work / f"{label}.log", extra=extra)
    try:
        total, first, steady_cpu = wait_output(bootstrap, topics.name(logical_out), outputs, worker, timeout=600)
    except BaseException:
        worker.stop()  # not yet the caller's to stop: never leave it running
        raise
    rate, steady = len(values) / total, len(values) / max(total - first, 1e-9)
    print(f"{title or label + ' agent'}: {len(values)} {logical_in} events -> {outputs} {logical_out} records in "
          f"{total:.2f}s from process start (first output at {first:.2f}s): {rate:,.0f} events/s overall, "
          f"{steady:,.0f} events/s after the first output")
    print(f"  baseline pure fold in-process: {fold_rate:,.0f} events/s; service/fold = {steady / fold_rate:.2f} "
          f"(steady), {rate / fold_rate:.2f} (overall)")
    if steady_cpu > 0:  # per CPU second: steadier than wall clock on a machine shared with other jobs
        per_cpu = len(values) / steady_cpu
        print(f"  per CPU second (every thread of the worker, after the first output): {per_cpu:,.0f} events; "
              f"pure fold {fold_cpu_rate:,.0f}; service/fold = {per_cpu / fold_cpu_rate:.2f}")
    return worker, topics


def latency(bootstrap: str, topics: Topics, paced: int, rate: float) -> None:
    """Publish + announce pairs at ``rate`` events/s; latency from produce to the visibility change being read."""
    topic = topics.name(TIMELINE)
    start_at = end_offset(bootstrap, topic)
    sent_at: dict[str, float] = {}
    seen: dict[str, float] = {}
    emitted: dict[str, float] = {}  # the output's CreateTime: when the worker produced it
    expected = paced
    stop = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                      "fetch.wait.max.ms": 5, "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, start_at)])
        try:
            while not stop.is_set() and len(seen) < expected:
                m = c.poll(0.05)  # returns at the first message (consume(n, t) would wait t unless n arrive)
                if m is None or m.error() is not None:
                    continue
                cause = decode(m.value()).causation_id
                if cause is not None:
                    seen.setdefault(cause, time.time())
                    emitted.setdefault(cause, m.timestamp()[1] / 1000)
        finally:
            c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(1.0)  # the reader is assigned and fetching
    producer = EventProducer(bootstrap, topics, extra={"linger.ms": 0})
    # connected, with its idempotence id, before the clock runs (a fresh producer's first sends wait for both)
    producer.send_raw(topics.name(TIMELINE) + ".warmup", None, b"warm-up")
    producer.flush()
    began = time.perf_counter()
    for i in range(paced // 2):
        iv = Interval(T0 + (1000 + i) * DAY, T0 + (1001 + i) * DAY)
        seg = SegmentDescriptor("latency", iv, "v1", 0, 1000)
        for j, ev in enumerate((SegmentsPublished(task_id=f"lat{i}", segments=(seg,)),
                                SegmentAnnounced(server="h1", segment=seg))):
            event_id = f"lat{i}-{j}"
            sent_at[event_id] = time.time()
            # a publish as the lockbox seals it (only those change what is used: docs/security.md)
            producer.send(through_lockbox(Envelope(ev, event_id, Instant(int(time.time() * 1000)), "latency")))
            producer._producer.poll(0)
            target = began + (2 * i + j + 1) / rate
            pause = target - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
    producer.flush()
    reader.join(30)
    stop.set()
    lat = sorted((seen[k] - sent_at[k]) * 1000 for k in sent_at if k in seen)
    if not lat:
        print("latency: no visibility change observed")
        return
    p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"visibility latency, produce -> change read ({len(lat)}/{len(sent_at)} inputs at {rate:.0f}/s): "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms; p99 / 60 s Druid poll = {p99 / 60_000:.5f}")
    announces = sorted((seen[k] - sent_at[k]) * 1000 for k in sent_at if k in seen and k.endswith("-1"))
    print(f"  announce -> visible alone: p50 {statistics.median(announces):.1f} ms, "
          f"p99 {announces[min(len(announces) - 1, int(len(announces) * 0.99))]:.1f} ms")
    inside = sorted((emitted[k] - sent_at[k]) * 1000 for k in sent_at if k in emitted)
    print(f"  of which produce -> worker's output produced: p50 {statistics.median(inside):.1f} ms, "
          f"p99 {inside[min(len(inside) - 1, int(len(inside) * 0.99))]:.1f} ms")
    return p99


class Historicals:
    """Stands in for the data servers in one thread: every LoadSegment on ``commands`` is answered at once with
    a SegmentAnnounced (causation = the command's id), every DropSegment with a SegmentUnannounced; it records
    when each LoadSegment was read, by segment id. Every ``HEARTBEAT_S`` it sends a ``server_heartbeat`` of each of
    ``servers`` (without them the planner decides every server lost ``serverTimeoutMillis`` after the last
    announce, unannounces 100k segments in the measured window and loads nothing more: docs/liveness.md)."""

    HEARTBEAT_S = 3.0

    def __init__(self, bootstrap: str, topics: Topics, servers: list[str] | None = None) -> None:
        self.bootstrap, self.topics = bootstrap, topics
        self.servers = list(servers or [])
        self.loads_read: dict[str, float] = {}
        self.loads_created: dict[str, float] = {}
        self.loads = 0
        self.first_copies: dict[str, int] = {}  # segment id -> plain (non-move) loads answered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                      "fetch.wait.max.ms": 5, "enable.auto.commit": False})
        c.assign([TopicPartition(self.topics.name(COMMANDS), 0, 0)])
        out = EventProducer(self.bootstrap, self.topics, extra={"linger.ms": 1})
        beat_at, beats = 0.0, 0
        try:
            while not self._stop.is_set():
                if self.servers and time.monotonic() >= beat_at:
                    beat_at, beats = time.monotonic() + self.HEARTBEAT_S, beats + 1
                    now = Instant(int(time.time() * 1000))
                    for name in self.servers:
                        out.send(Envelope(ServerHeartbeat(server=name, tier="_default_tier", max_size_bytes=10**15),
                                          f"hb-{name}-{beats}", now, name))
                m = c.poll(0.05)
                if m is None or m.error() is not None:
                    continue
                env = decode(m.value())
                ev = env.event
                at = Instant(int(time.time() * 1000))
                if isinstance(ev, LoadSegment):
                    sid = str(ev.segment.id)
                    self.loads_read.setdefault(sid, time.time())
                    self.loads_created.setdefault(sid, m.timestamp()[1] / 1000)
                    self.loads += 1
                    if ev.move_id is None:
                        self.first_copies[sid] = self.first_copies.get(sid, 0) + 1
                    out.send(Envelope(SegmentAnnounced(server=ev.server, segment=ev.segment),
                                      f"ann-{env.event_id}", at, ev.segment.data_source, env.event_id))
                elif isinstance(ev, DropSegment):
                    out.send(Envelope(SegmentUnannounced(server=ev.server, segment_id=ev.segment_id),
                                      f"unann-{env.event_id}", at, ev.segment_id.split("_")[0], env.event_id))
        finally:
            out.flush()
            c.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def await_lock_version(bootstrap: str, topics: Topics, request_id: str, timeout: float = 60,
                       worker: Worker | None = None) -> str:
    """The version of the lock granted to ``request_id``; exits the benchmark when ``timeout`` passes first or the
    ``worker`` (the process that answers) exited."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    c.assign([TopicPartition(topics.name(LOCKS), 0, 0)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if worker is not None and worker.exited():
                raise SystemExit(f"segcoord run exited before granting {request_id}; see {worker.log}")
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                ev = decode(m.value()).event
                if isinstance(ev, LockGranted) and ev.request_id == request_id:
                    return ev.lock.version
    finally:
        c.close()
    raise SystemExit(f"no LockGranted for {request_id} within {timeout:.0f}s")


def preload_entries(servers: int, preload: int, now: int) -> Iterator[tuple[str, str, bytes]]:
    """The planner store's entries (:mod:`coordinator.placement.codec`, meta ``{"runs": 0}``) of the state
    :func:`bench.incremental.build` makes (``preload`` hourly segments over 10 data sources, each held by 2 of
    ``servers`` round robin), written out directly instead of folding that state and listing it: the same entries
    (``tests/unit/placement/test_preload_entries.py``), unsorted, one at a time. At 1M segments folding that state
    and listing its entries took 95 s of CPU and 7 GB; this keeps nothing."""
    import orjson

    from bench.incremental import T0 as START
    from coordinator.placement.records import ServerFacts
    from events.schema import encode_record

    names = [f"h{i:03d}" for i in range(servers)]
    facts = orjson.dumps(ServerFacts("_default_tier", 1 << 50).to_json())
    for n in names:
        yield "srv", n, facts
    per_source = preload // 10
    k = 0
    for d in range(10):
        for h in range(per_source):
            seg = SegmentDescriptor(f"ds{d}", Interval(START + h * HOUR, START + (h + 1) * HOUR), "v1", 0,
                                    1 << 20)
            text = str(seg.id)
            yield "seg", text, orjson.dumps({"segment": encode_record(seg), "used": True})
            yield "held", f"{names[k % servers]}\x00{text}", b""
            yield "held", f"{names[(k + 1) % servers]}\x00{text}", b""
            k += 1
    yield "meta", "", orjson.dumps({"start": now, "lastEventAt": now, "runs": 0})


def preload_store(state_dir: Path, servers: int, preload: int, now: int) -> None:
    """Write the planner agent's store as a worker that already placed ``preload`` hourly segments x 2 replicas on
    ``servers`` servers would have left it (:func:`preload_entries`: the state of :func:`bench.incremental.build`
    in the placement codec's stored form, the one stored form), so a 1M-segment cluster is reached in a minute
    instead of hours of loads through the broker. The worker restores it at start; its other agents start empty."""
    from streaming.service import planner_agent
    from streaming.service.state import AgentStateStore

    with AgentStateStore(state_dir / planner_agent.STORE_NAME, planner_agent.FORMAT_VERSION) as store:
        batch = store.batch()
        for n, (family, key, value) in enumerate(preload_entries(servers, preload, now), 1):
            batch.put(f"{family}/{key}".encode(), value)
            if n % 100_000 == 0:
                store.commit(batch)
                batch = store.batch()
        store.commit(batch)


def published_at(bootstrap: str, topics: Topics, data_source: str) -> dict[str, float]:
    """Segment id -> log-append time (s) of its ``segments_published`` on ``segments``, for one data source."""
    prefix = f"{data_source}_"
    return {sid: at for sid, (_, at) in topic_offsets(bootstrap, topics.name(SEGMENTS)).items()
            if sid.startswith(prefix)}


def placement_latency(bootstrap: str, work: Path, servers: int, preload: int, paced: int, rates: list[float],
                      planner: str = "incremental", direct: bool = False, balancer: str = "planner",
                      split: bool = False, warmup_s: float = 0.0) -> float | None:
    """Publish request -> LoadSegment latency, on a cluster of ``servers`` holding ``preload`` segments.

    A task locks ten years of one dataSource; ``preload`` hourly segments are published (in requests of 500) and
    loaded (2 replicas, Druid's default rule; :class:`Historicals` answers every command at once), or, with
    ``direct``, restored by the worker from a planner store written before it starts (:func:`preload_store`:
    the same state, reached in a minute instead of hours at 1M segments); then
    ``paced`` PublishRequested of one new segment each at each of ``rates`` per second in turn (one window per rate
    on the same worker, settled in between; the load average printed beside each), the first returned. Latency =
    the LoadSegment of the segment read on ``commands`` minus the time its publish request was produced (it goes
    request -> lockbox agent -> SegmentsPublished -> planner agent -> LoadSegment). With ``split`` the worker is
    two processes (:class:`SplitWorker`). With ``warmup_s``, a first window of ``warmup_s`` seconds at the first
    rate is sent, settled and reported apart, and not counted: the measured windows see a service whose code paths
    already ran at that rate (the local broker's JVM compiles its hot paths in its first windows of load: its JIT
    compiler threads took 0.40 of its 0.80 CPU s/s in a cold first window at 1000/s, on a 2-core machine shared by
    everything)."""
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}.")
    create_topics(bootstrap, topics, partitions=1)
    label = f"{planner}{'-split' if split else ''}"
    state_dir = work / f"state-placement-{label}"
    if direct:
        t0 = time.perf_counter()
        preload_store(state_dir, servers, preload, int(time.time() * 1000))
        print(f"placement: the planner's store preloaded with {preload} segments x 2 on {servers} servers "
              f"in {time.perf_counter() - t0:.1f}s")
    worker = (SplitWorker(bootstrap, topics, state_dir, work / f"placement-{label}.log", planner, balancer) if split
              else Worker(bootstrap, topics, state_dir, work / f"placement-{label}.log", planner, balancer,
                          profile_all=False))
    spy = None
    broker = broker_pid(work)  # None: a broker of $SEGCOORD_BOOTSTRAP, not measured
    hist = Historicals(bootstrap, topics, [f"h{i:03d}" for i in range(servers)])
    producer = EventProducer(bootstrap, topics, extra={"linger.ms": 0})
    try:
        def at() -> Instant:
            return Instant(int(time.time() * 1000))

        for i in range(servers):
            producer.send(Envelope(ServerJoined(server=f"h{i:03d}", tier="_default_tier",
                                                max_size_bytes=10**15), f"join-{i}", at(), f"h{i:03d}"))
        ds = "placement"
        producer.send(Envelope(TaskStarted(task_id="t1", group_id="g1", task_type="index", data_source=ds),
                               "task-t1", at(), ds))
        span = Interval(T0, T0 + 3660 * DAY)
        producer.send(Envelope(LockRequested(request_id="lock-1", task_id="t1", group_id="g1", task_type="index",
                                             data_source=ds, interval=span, granularity="timeChunk",
                                             lock_type="exclusive"), "lock-1", at(), ds))
        producer.flush()
        # the worker answers once it restored every store: at 100k segments 10-20 CPU seconds for the planner's, which
        # took more than the 170 s allowed before while the machine gave the worker a tenth of a core; now the wait is
        # as long as the worker lives, within a ceiling of 1 s per 200 segments (an hour at 1M)
        waited = time.perf_counter()
        version = await_lock_version(bootstrap, topics, "lock-1", timeout=300 + preload / 200, worker=worker)
        print(f"placement: the worker restored its stores and granted the lock {time.perf_counter() - waited:.1f}s "
              f"after it was requested ({time.perf_counter() - worker.started:.1f}s after it started, "
              f"{cpu_of(worker):.1f} CPU seconds; RSS {memory_of(worker)[0]:,.0f} MB)")

        def seg(hour: int) -> SegmentDescriptor:
            return SegmentDescriptor(ds, Interval(T0 + hour * HOUR, T0 + (hour + 1) * HOUR), version, 0, 1_000_000)

        started = time.perf_counter()
        deadline = time.monotonic() + 3600
        if not direct:
            for b in range(0, preload, 500):
                segs = tuple(seg(d) for d in range(b, min(preload, b + 500)))
                producer.send(Envelope(PublishRequested(request_id=f"pre-{b}", task_id="t1", segments=segs),
                                       f"pre-{b}", at(), ds))
            producer.flush()
            deadline = time.monotonic() + 900
            worker.wait("the preload loaded", lambda: sum(n >= 2 for n in list(hist.first_copies.values())) >= preload,
                        deadline)
            print(f"placement: {servers} servers, {preload} segments x 2 replicas loaded "
                  f"({hist.loads} loads) in {time.perf_counter() - started:.1f}s")
        else:  # two probes: the planner restored its store and plans, and its first timer run is behind it
            from streaming.service.app import PLAN_EVERY_S

            probe = seg(0)
            producer.send(Envelope(PublishRequested(request_id="probe", task_id="t1", segments=(probe,)),
                                   "probe", at(), ds))
            producer.flush()
            worker.wait("a load of the probe", lambda: str(probe.id) in hist.loads_read, deadline)
            print(f"placement: the worker restored and planned a probe {time.perf_counter() - started:.1f}s "
                  "after the lock was granted")
            # the first probe is planned incrementally, before the worker's first timer run, which is a full run
            # (at 1M segments tens of seconds on the planner's thread: it held up a whole paced window). The timer
            # fires every PLAN_EVERY_S once a batch was applied; a probe published after that waits for the run
            time.sleep(PLAN_EVERY_S + 1.0)
            after = time.perf_counter()
            probe = seg(1)
            producer.send(Envelope(PublishRequested(request_id="probe-2", task_id="t1", segments=(probe,)),
                                   "probe-2", at(), ds))
            producer.flush()
            worker.wait("a load of the second probe", lambda: str(probe.id) in hist.loads_read, deadline)
            print(f"placement: a second probe, published after the worker's first timer run (a full run) began, "
                  f"was planned {time.perf_counter() - after:.1f}s later")
        windows: list[_Window] = []
        first = 2 if direct else preload
        plan = [(rates[0], max(1, round(rates[0] * warmup_s)), True)] if warmup_s > 0 else []
        plan += [(rate, paced, False) for rate in rates]
        measured = 0
        for rate, count, warm in plan:
            # settle: the worker reads the answers and its own commands back; measure a caught-up service
            quiet_since, last = time.monotonic(), None
            while time.monotonic() - quiet_since < 5.0 and time.monotonic() < deadline:
                now_ends = (end_offset(bootstrap, topics.name(SEGMENTS)),
                            end_offset(bootstrap, topics.name(COMMANDS)))
                if now_ends != last:
                    quiet_since, last = time.monotonic(), now_ends
                time.sleep(0.5)
            time.sleep(5.0)
            print(f"  settled {time.perf_counter() - started:.1f}s after the preload began")
            w = _Window(rate, os.getloadavg()[0], warmup=warm)
            if not warm and measured == 0:
                spy = attach_profile(worker, label, count / rate + 1)
            measured += not warm
            parts_began = [cpu_seconds(pid) for pid in worker.pids()]
            others_began = (time.process_time(), cpu_seconds(broker) if broker else 0.0, *machine_busy())
            began = time.perf_counter()
            n = len(windows)
            for i in range(count):
                s = seg(first + i)
                w.sent_at[str(s.id)] = time.time()
                producer.send(Envelope(PublishRequested(request_id=f"pub-{n}-{i}", task_id="t1", segments=(s,)),
                                       f"pub-{n}-{i}", at(), ds))
                producer._producer.poll(0)
                pause = began + (i + 1) / rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            first += count
            producer.flush()
            until = time.monotonic() + 60 + preload / 1000  # a full run at 1M segments takes about a minute
            while any(k not in hist.loads_read for k in w.sent_at) and time.monotonic() < until:
                time.sleep(0.1)
            w.seconds = time.perf_counter() - began
            busy, total = machine_busy()
            w.client_busy = (time.process_time() - others_began[0]) / w.seconds
            w.broker_busy = ((cpu_seconds(broker) if broker else 0.0) - others_began[1]) / w.seconds
            w.machine_busy = (busy - others_began[2]) / max(1e-9, total - others_began[3])
            w.busy_parts = [(cpu_seconds(pid) - b) / w.seconds for pid, b in zip(worker.pids(), parts_began,
                                                                                   strict=True)]
            w.busy = sum(w.busy_parts)
            w.load_after = os.getloadavg()[0]
            w.rss_mb, w.peak_mb = memory_of(worker)
            windows.append(w)
        if spy is not None:
            spy.wait(120)
        published = published_at(bootstrap, topics, ds)
        trace = os.environ.get("SEGCOORD_STAGE_TRACE")  # the worker's stage lines (streaming/service/stage_trace.py)
        if trace:
            from bench.stages import report

            for w in windows:
                report(bootstrap, topics, Path(trace), w.sent_at, hist.loads_created, hist.loads_read,
                       f"{label}, {w.rate:.0f}/s{', warm-up' if w.warmup else ''}")
    finally:
        hist.stop()
        worker.stop()
    reported = [(w, _report(w, hist, published, label, servers, preload)) for w in windows]
    p99s = [p99 for w, p99 in reported if not w.warmup]
    if not p99s or p99s[0] is None:
        print(f"placement latency: no LoadSegment observed ({hist.loads} loads in all); see {worker.log}")
    return p99s[0] if p99s else None


def _parts(busy: list[float], seconds: float, paced: int) -> str:
    """The split worker's share per process (planner, agents); nothing for one process."""
    if len(busy) != 2:
        return ""
    return (f" (the planner process {busy[0]:.2f} CPU s/s, {busy[0] * seconds / paced * 1000:.2f} ms per publish; "
            f"the agents' worker {busy[1]:.2f} CPU s/s, {busy[1] * seconds / paced * 1000:.2f} ms per publish)")


@dataclass
class _Window:
    """One paced window of publish requests: its rate, when each was sent, the worker's CPU, the load average."""

    rate: float
    load_before: float
    warmup: bool = False  # the warm-up window: reported, not counted
    sent_at: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    busy: float = 0.0
    busy_parts: list[float] = field(default_factory=list)  # per process of the worker (split: planner, agents)
    client_busy: float = 0.0  # this process (the bench's client and its historicals), CPU s/s
    broker_busy: float = 0.0  # the bench's local broker, CPU s/s
    machine_busy: float = 0.0  # the share of every core's time busy (any process)
    load_after: float = 0.0
    rss_mb: float = 0.0  # the worker's resident set at the window's end, and its peak so far
    peak_mb: float = 0.0


def _report(w: _Window, hist: Historicals, published: dict[str, float], planner: str, servers: int,
            preload: int) -> float | None:
    """Print one window's figures; its p99 (None: no load seen)."""
    sent_at, rate, paced = w.sent_at, w.rate, len(w.sent_at)
    lat = sorted((hist.loads_read[k] - sent_at[k]) * 1000 for k in sent_at if k in hist.loads_read)
    if not lat:
        return None
    inside = sorted((hist.loads_created[k] - sent_at[k]) * 1000 for k in sent_at if k in hist.loads_created)
    p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    # CPU per publish: what the worker needs, steadier than latency on a shared machine. The agents' Python code
    # shares one GIL: at 1000/s, 1 ms per publish (much of it under the GIL) is a whole core, and queues build
    print(f"  the worker used {w.busy:.2f} CPU seconds per second from the first publish to the last load read "
          f"({w.seconds:.1f}s): {w.busy * w.seconds / paced * 1000:.2f} CPU ms per publish"
          f"{_parts(w.busy_parts, w.seconds, paced)}; load average "
          f"{w.load_before:.1f} before, {w.load_after:.1f} after; the worker's RSS {w.rss_mb:,.0f} MB "
          f"(peak {w.peak_mb:,.0f} MB)")
    print(f"  beside it: the bench's client and historicals {w.client_busy:.2f} CPU s/s, the broker "
          f"{w.broker_busy:.2f} CPU s/s; the machine's {os.cpu_count()} cores were {w.machine_busy:.0%} busy")
    print(f"[{planner} planner]{' warm-up (not counted):' if w.warmup else ''} placement latency, publish request "
          "-> LoadSegment read "
          f"({len(lat)}/{len(sent_at)} at {rate:.0f}/s, "
          f"{servers} servers, {preload} segments): p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms; "
          f"p99 / 60 s Druid poll = {p99 / 60_000:.5f}")
    print(f"  of which request -> worker's LoadSegment produced: p50 {statistics.median(inside):.1f} ms, "
          f"p99 {inside[min(len(inside) - 1, int(len(inside) * 0.99))]:.1f} ms")
    lockbox = sorted((published[k] - sent_at[k]) * 1000 for k in sent_at if k in published)
    planner_s = sorted((hist.loads_created[k] - published[k]) * 1000 for k in sent_at
                       if k in published and k in hist.loads_created)
    if lockbox and planner_s:
        print(f"  request -> segments_published (lockbox agent): p50 {statistics.median(lockbox):.1f} ms, "
              f"p99 {lockbox[min(len(lockbox) - 1, int(len(lockbox) * 0.99))]:.1f} ms; "
              f"segments_published -> load_segment (planner agent): p50 {statistics.median(planner_s):.1f} ms, "
              f"p99 {planner_s[min(len(planner_s) - 1, int(len(planner_s) * 0.99))]:.1f} ms")
    return p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=50_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--paced", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--also-rates", type=float, nargs="*", default=[],
                        help="placement: further paced windows at these rates on the same worker after --rate's")
    parser.add_argument("--warmup", type=float, default=0.0, metavar="SECONDS",
                        help="placement: first a window of this many seconds at --rate, reported apart and not "
                             "counted (the local broker's JVM compiles its hot paths under the first load)")
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--preload", type=int, default=10_000)
    parser.add_argument("--only", choices=("timeline", "placement", "lockbox", "agent"), default=None,
                        help="agent: the timeline agent in this process against its fold (no broker, no worker)")
    parser.add_argument("--timeline-workers", choices=("both", "leading", "no-planner"), default="both",
                        help="timeline: the leading worker (planner on), a --no-planner worker, or both in turn")
    parser.add_argument("--rounds", type=int, default=2, help="agent: alternating runs of the fold and the agent")
    parser.add_argument("--heap", choices=("worker", "default"), default="worker",
                        help="agent: the fold and the agent under the worker's heap policy (FrozenHeap), or under "
                             "CPython's default collector")
    parser.add_argument("--planner", choices=("both", "full", "incremental"), default="both",
                        help="placement: the full-plan baseline, the incremental planner, or both (the ratio)")
    parser.add_argument("--balancer", choices=("planner", "external"), default="planner",
                        help="placement: who balances (external: the planner agent never balances, as with the Spark "
                             "balancer; at 1M segments a timer balancing run takes minutes and delays publishes)")
    parser.add_argument("--deployment", choices=("one", "split", "both"), default="one",
                        help="placement: one worker process (segcoord run), the worker split in two (a "
                             "--planner-only process beside a --no-planner worker), or both in turn (their ratio)")
    parser.add_argument("--preload-via", choices=("lockbox", "direct"), default=None,
                        help="how the placement preload is reached: through the lockbox and real loads, or "
                             "written into the planner's store before it starts (default: direct above 10k)")
    args = parser.parse_args()
    if args.only == "agent":
        agent_in_process([encode(e) for e in segment_events(args.segments)], rounds=args.rounds, heap=args.heap)
        return

    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        work = Path(tmp)
        with bench_broker(work) as bootstrap:
            workers: list[Worker] = []
            try:
                seg_events = segment_events(args.segments) if args.only in (None, "timeline") else []
                if args.only in (None, "timeline") and args.timeline_workers in ("both", "leading"):
                    tl_worker, tl_topics = throughput(bootstrap, work, SEGMENTS, TIMELINE, seg_events, fold_timeline,
                                                      "timeline")
                    workers.append(tl_worker)
                    latency(bootstrap, tl_topics, args.paced, args.rate)
                    tl_worker.stop()
                if args.only in (None, "timeline") and args.timeline_workers in ("both", "no-planner"):
                    # the timeline path of a worker that does not plan (segcoord run --no-planner): no planner
                    # feed folding every segments record on its thread beside the timeline agent
                    np_worker, _ = throughput(bootstrap, work, SEGMENTS, TIMELINE, seg_events, fold_timeline,
                                              "timeline-noplanner", ("--no-planner",),
                                              "timeline agent, --no-planner worker")
                    workers.append(np_worker)
                    np_worker.stop()
                if args.only in (None, "placement"):
                    direct = (args.preload_via or ("direct" if args.preload > 10_000 else "lockbox")) == "direct"
                    rates = [args.rate, *args.also_rates]
                    splits = {"one": [False], "split": [True], "both": [False, True]}[args.deployment]
                    p99s: dict[tuple[str, bool], float | None] = {}
                    for split in splits:
                        for mode in ("full", "incremental"):
                            if args.planner in ("both", mode):
                                p99s[(mode, split)] = placement_latency(bootstrap, work, args.servers, args.preload,
                                                                        args.paced, rates, mode, direct,
                                                                        args.balancer, split, args.warmup)
                    for split in splits:
                        base, p99 = p99s.get(("full", split)), p99s.get(("incremental", split))
                        if base and p99:
                            print(f"placement p99{' (split)' if split else ''}: incremental / full-plan baseline = "
                                  f"{p99 / base:.4f} ({p99:.1f} ms vs {base:.1f} ms)")
                    one, two = p99s.get(("incremental", False)), p99s.get(("incremental", True))
                    if one and two:
                        print(f"placement p99, incremental: split in two processes / one worker = {two / one:.4f} "
                              f"({two:.1f} ms vs {one:.1f} ms)")
                if args.only in (None, "lockbox"):
                    lb_worker, _ = throughput(bootstrap, work, LOCK_REQUESTS, LOCKS, request_events(args.requests),
                                              fold_lockbox, "lockbox")
                    workers.append(lb_worker)
            finally:
                for w in workers:
                    w.stop()


if __name__ == "__main__":
    main()
