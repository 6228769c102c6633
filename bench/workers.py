"""Benchmark: several ``segcoord run`` workers in one group on a real broker.

1. **Timeline-agent throughput with 1, 2 and 3 workers** on 3 partitions of ``segments``: the workers
   (own state folders and ``--worker-id``) are started on empty topics and left to form the group; then N
   segments events (the seeded stream of the timeline tests, 6 data sources) are produced and the clock
   runs from the first produce until the ``timeline`` topic holds every visibility change a pure fold
   predicts (counted by end offsets: a re-emission during a rebalance would only end the clock early, and
   none happens once the group is stable). Reported: events/s per worker count, and the ratio to 1 worker
   measured in the same run. On a 2-core machine the workers, the broker and this process share the cores,
   so the ratio says what adding workers costs or gains there, not what it gains on a machine with a core
   per worker.
2. **Visibility latency during a rebalance**: with 2 workers running and caught up, a paced stream of
   publish + announce pairs (``--paced`` events at ``--rate`` per second) on 3 data sources; latency = the
   time the visibility change is read minus the time its input was produced. Measured twice in the same
   run: once undisturbed (the baseline), once while a third worker joins (the group rebalances: every
   partition is revoked and re-assigned, and the gaining worker replays the partition it takes); the second
   figure covers the inputs sent from the joiner's start until 5 s after the group is stable again.
   Reported: p50 / p99 / max of both, and the ratio of the p99s.

Run: ``.venv/bin/python -m bench.workers [--segments 20000] [--paced 4000] [--rate 100]``. With
``SEGCOORD_BOOTSTRAP`` set it uses that broker; otherwise it starts its own local broker under a temporary
home and stops it at the end. It always stops what it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.broker import bench_broker
from bench.service import SEGCOORD, T0, fold_timeline, produce, segment_events
from events import Envelope, Interval, SegmentDescriptor, Topics, decode
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import TIMELINE
from streaming.admin import create_topics
from streaming.producer import EventProducer
from tests.accepted import through_lockbox

DAY = 86_400_000
PARTITIONS = 3


class Worker:
    def __init__(self, bootstrap: str, topics: Topics, work: Path, worker_id: str) -> None:
        self.log = work / f"{topics.prefix}{worker_id}.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix, "--state-dir",
                 str(work / f"{topics.prefix}{worker_id}"), "--worker-id", worker_id],
                stdout=out, stderr=subprocess.STDOUT)

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise SystemExit(f"segcoord run exited ({self.proc.returncode}); see {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def group_stable(bootstrap: str, topics: Topics, members: int, workers: list[Worker], timeout: float = 180) -> None:
    """Wait until the coordinator group is Stable with ``members`` members, each holding a partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"{topics.prefix}coordinator"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in workers:
            w.check()
        try:
            d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
            if str(d.state).endswith("STABLE") and len(d.members) == members and all(
                    m.assignment.topic_partitions for m in d.members):
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise SystemExit(f"group {group} not stable with {members} member(s) after {timeout:.0f}s")


def end_offsets(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    try:
        return sum(int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in range(PARTITIONS))
    finally:
        c.close()


def throughput(bootstrap: str, work: Path, n_workers: int, events: list[Envelope]) -> float:  # type: ignore[type-arg]
    topics = Topics(f"bw{n_workers}{uuid.uuid4().hex[:6]}.")
    create_topics(bootstrap, topics, partitions=PARTITIONS)
    workers = [Worker(bootstrap, topics, work, f"w{i}") for i in range(n_workers)]
    try:
        group_stable(bootstrap, topics, n_workers, workers)
        began = time.perf_counter()
        values = produce(bootstrap, topics, events)
        want, _, _ = fold_timeline(values)
        topic = topics.name(TIMELINE)
        deadline = time.monotonic() + 900
        while end_offsets(bootstrap, topic) < want:
            for w in workers:
                w.check()
            if time.monotonic() > deadline:
                raise SystemExit(f"{n_workers} worker(s): fewer than {want} outputs after 900 s")
            time.sleep(0.1)
        took = time.perf_counter() - began
    finally:
        for w in workers:
            w.stop()
    rate = len(events) / took
    print(f"  {n_workers} worker(s): {len(events)} events -> {want} visibility changes in {took:.2f}s: "
          f"{rate:,.0f} events/s", flush=True)
    return rate


def paced_latency(bootstrap: str, topics: Topics, paced: int, rate: float, tag: str,
                  began: Callable[[], None] | None = None) -> list[tuple[float, float]]:
    """(time sent, latency ms) of ``paced`` inputs at ``rate``/s; ``began`` is called as the stream starts."""
    topic = topics.name(TIMELINE)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "fetch.wait.max.ms": 5,
                  "enable.auto.commit": False})
    starts = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    c.assign([TopicPartition(topic, p, starts[p]) for p in range(PARTITIONS)])
    sent_at: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and (len(seen) < paced):
            m = c.poll(0.05)
            if m is None or m.error() is not None:
                continue
            cause = decode(m.value()).causation_id
            if cause is not None and cause.startswith(tag):
                seen.setdefault(cause, time.time())

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(1.0)  # the reader is assigned and fetching
    producer = EventProducer(bootstrap, topics, extra={"linger.ms": 0})
    if began is not None:
        began()
    t0 = time.perf_counter()
    for i in range(paced // 2):
        ds = f"lat{i % 3}"
        day = 5000 + i + (0 if tag == "base" else 100_000)  # segments of their own per measurement
        seg = SegmentDescriptor(ds, Interval(T0 + day * DAY, T0 + (day + 1) * DAY), "v1", 0, 1000)
        for j, ev in enumerate((SegmentsPublished(task_id=f"{tag}{i}", segments=(seg,)),
                                SegmentAnnounced(server="h1", segment=seg))):
            event_id = f"{tag}{i}-{j}"
            sent_at[event_id] = time.time()
            # a publish as the lockbox seals it (only those change what is used: docs/security.md)
            producer.send(through_lockbox(Envelope(ev, event_id, Instant(int(time.time() * 1000)), ds)))
            producer._producer.poll(0)
            pause = t0 + (2 * i + j + 1) / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
    producer.flush(60)
    deadline = time.monotonic() + 180
    while len(seen) < len(sent_at) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    reader.join(10)
    c.close()
    return sorted((sent_at[k], (seen[k] - sent_at[k]) * 1000) for k in sent_at if k in seen)


def summary(lat: list[float]) -> tuple[float, str]:
    lat = sorted(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return p99, f"p50 {statistics.median(lat):.0f} ms, p99 {p99:.0f} ms, max {lat[-1]:.0f} ms ({len(lat)} inputs)"


def rebalance_latency(bootstrap: str, work: Path, paced: int, rate: float) -> None:
    """The third worker is started as the second stream begins; its window runs from that start until 5 s
    after the group is stable with 3 members (the joiner's start-up, the rebalance, its replay)."""
    topics = Topics(f"bwl{uuid.uuid4().hex[:6]}.")
    create_topics(bootstrap, topics, partitions=PARTITIONS)
    produce(bootstrap, topics, segment_events(3000, seed=5))  # some history for the gaining worker to replay
    workers = [Worker(bootstrap, topics, work, f"w{i}") for i in range(2)]
    joined_at: list[float] = []
    stable_at: list[float] = []
    try:
        group_stable(bootstrap, topics, 2, workers)
        base = paced_latency(bootstrap, topics, paced, rate, "base")

        def join() -> None:
            joined_at.append(time.time())
            workers.append(Worker(bootstrap, topics, work, "w2"))

            def watch() -> None:
                group_stable(bootstrap, topics, 3, workers, timeout=600)
                stable_at.append(time.time())

            threading.Thread(target=watch, daemon=True).start()

        during = paced_latency(bootstrap, topics, paced, rate, "rebal", join)
        deadline = time.monotonic() + 600
        while not stable_at and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for w in workers:
            w.stop()
    if not base or not during or not stable_at:
        raise SystemExit(f"latency: nothing to compare ({len(base)} undisturbed, {len(during)} during, "
                         f"group stable: {bool(stable_at)})")
    window_end = stable_at[0] + 5.0
    window = [ms for sent, ms in during if joined_at[0] <= sent <= window_end]
    if during[-1][0] < stable_at[0]:
        print(f"  (the stream ended before the group was stable again: raise --paced; "
              f"join took {stable_at[0] - joined_at[0]:.1f}s)")
    p99_base, text_base = summary([ms for _, ms in base])
    p99_during, text_during = summary(window or [ms for _, ms in during])
    print(f"visibility latency, 2 workers undisturbed (baseline): {text_base}")
    print(f"visibility latency from a 3rd worker's start to 5 s after the group is stable again "
          f"({stable_at[0] - joined_at[0]:.1f}s of rebalance): {text_during}")
    print(f"  p99 during the rebalance / baseline p99 = {p99_during / p99_base:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=20_000)
    parser.add_argument("--paced", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--only", choices=("throughput", "latency"), default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        work = Path(tmp)
        with bench_broker(work) as bootstrap:
            if args.only in (None, "throughput"):
                print(f"timeline agent throughput on {PARTITIONS} partitions ({os.cpu_count()} cores):")
                events = segment_events(args.segments)
                rates = {n: throughput(bootstrap, work, n, events) for n in args.workers}
                first = rates[args.workers[0]]
                print("  ratio to " + f"{args.workers[0]} worker(s): " + ", ".join(
                    f"{n} -> {r / first:.2f}" for n, r in rates.items()))
            if args.only in (None, "latency"):
                rebalance_latency(bootstrap, work, args.paced, args.rate)


if __name__ == "__main__":
    main()
