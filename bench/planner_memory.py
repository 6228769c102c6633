"""The planner agent's memory on the soak's workload, without Kafka: what the elected worker holds, and if it grows.

``python -m bench.planner_memory [--seconds 1800] [--threaded] [--freeze] [--trace]`` runs a
:class:`~streaming.service.planner_agent.PlannerAgent` (a real RocksDB store) on an in-memory log shaped like
``tests/soak``'s: per simulated second 60 timeline events (``segment_stream``: publishes, announces, unannounces,
unused marks over 6 data sources), a ``wiki`` publish every 5 s (rules: 2 replicas on ``hot``), 3 historicals on
``hot`` that heartbeat every 5 s and answer every load or drop at once, a historical killed (silent, then lost,
then back with what it held) every 90 s. What the planner emits goes back to its input as Kafka would return it
(commands on ``commands``, its unannounces and marks on ``segments``, its ``server_lost`` on ``cluster``). Each
simulated second is one batch and one timer run at that second's clock, run as fast as the CPU allows.

``--threaded`` runs the agent on its own thread as the worker does (the planner pool), with ``--freeze`` the
worker's heap policy (:class:`~streaming.service.heap.FrozenHeap`: a young collection and ``gc.freeze()`` at
most once a second) on the main thread meanwhile. Every ``--sample`` simulated seconds it prints the process's
RSS, Python's traced memory (``--trace``: tracemalloc, with the top allocation sites at the end) and the size
of the planner's main structures.
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import threading
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

from events import Envelope, Interval, SegmentDescriptor, Topics, decode, encode
from events.cluster import DynamicConfigSet, RulesSet, ServerHeartbeat, ServerJoined, ServerLost
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS
from streaming.service.heap import FrozenHeap
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent
from streaming.service.state import AgentStateStore, AppliedWindow

DAY = 86_400_000
SERVERS = ("hs1", "hs2", "hs3")
PARTITIONS = 3


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Log:
    """Topics as lists of records per partition; the planner reads what it has not read yet, in append order."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics
        self.offsets: dict[tuple[str, int], int] = {}
        self.unread: list[InputRecord] = []

    def append(self, logical: str, env: Envelope[Event], at_ms: int) -> None:
        topic = self.topics.name(logical)
        part = zlib.crc32((env.key or "").encode()) % PARTITIONS
        offset = self.offsets.get((topic, part), 0)
        self.offsets[(topic, part)] = offset + 1
        self.unread.append(InputRecord(topic, part, offset, (env.key or "").encode(), encode(env), at_ms))

    def take(self, n: int = 1000) -> list[InputRecord]:
        out, self.unread = self.unread[:n], self.unread[n:]
        return out


class Cluster:
    """The sink of the planner and the historicals that answer it (at once, while alive)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.alive = dict.fromkeys(SERVERS, True)
        self.disk: dict[str, dict[str, SegmentDescriptor]] = {s: {} for s in SERVERS}
        self.now = 0
        self.sent = 0

    def send(self, env: Envelope[Event]) -> None:
        self.sent += 1
        ev = env.event
        if isinstance(ev, LoadSegment | DropSegment | CancelSegmentLoad):
            self.log.append(COMMANDS, env, self.now)
            if not self.alive.get(ev.server, False):
                return
            if isinstance(ev, LoadSegment):
                self.disk[ev.server][str(ev.segment.id)] = ev.segment
                self.log.append(SEGMENTS, Envelope(SegmentAnnounced(server=ev.server, segment=ev.segment),
                                                   f"ann-{env.event_id}", Instant(self.now), ev.segment.data_source,
                                                   env.event_id), self.now)
            elif isinstance(ev, DropSegment) and self.disk[ev.server].pop(ev.segment_id, None) is not None:
                self.log.append(SEGMENTS, Envelope(SegmentUnannounced(server=ev.server, segment_id=ev.segment_id),
                                                   f"unann-{env.event_id}", Instant(self.now), "wiki", env.event_id),
                                self.now)
        elif isinstance(ev, ServerLost):
            self.log.append(CLUSTER, env, self.now)
        else:
            self.log.append(SEGMENTS, env, self.now)

    def flush(self, timeout: float = 30.0) -> None:
        pass

    def heartbeat(self, at: int) -> None:
        for s in SERVERS:
            if self.alive[s]:
                self.log.append(CLUSTER, Envelope(ServerHeartbeat(server=s, tier="hot"), f"hb-{s}-{at}",
                                                  Instant(at), s), at)

    def join(self, s: str, at: int) -> None:
        self.alive[s] = True
        self.log.append(CLUSTER, Envelope(ServerJoined(server=s, tier="hot", max_size_bytes=100 << 30),
                                          f"join-{s}-{at}", Instant(at), s), at)
        for text, seg in sorted(self.disk[s].items()):
            self.log.append(SEGMENTS, Envelope(SegmentAnnounced(server=s, segment=seg), f"re-{s}-{text}-{at}",
                                               Instant(at), seg.data_source), at)


def sizes(agent: PlannerAgent) -> dict[str, int]:
    st = agent.state
    return {"segments": len(st.segments), "used": len(st.used), "queue": len(st.queue),
            "held": sum(len(h) for h in st.held.values()), "pairs": len(st._pairs),
            "mark_pending": len(st.mark_pending), "deferred": len(agent.deferred),
            "index_rows": sum(len(i) for i in st.tier_indexes.values()),
            "gc_tracked": len(gc.get_objects()), "gc_frozen": gc.get_freeze_count()}


def main() -> None:
    from tests.integration.test_service_timeline import T0, segment_stream

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=1800)
    ap.add_argument("--rate", type=int, default=60)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--threaded", action="store_true", help="the agent on its own thread, as in the worker")
    ap.add_argument("--freeze", action="store_true", help="the worker's heap policy (FrozenHeap) meanwhile")
    ap.add_argument("--trace", action="store_true", help="tracemalloc (slower): traced memory and top sites")
    ap.add_argument("--catch-up", type=int, default=0,
                    help="first fold this many seconds of log at once with planning off, as a newly elected worker")
    args = ap.parse_args()

    if args.trace:
        tracemalloc.start(12)
    topics = Topics("m.")
    log = Log(topics)
    cluster = Cluster(log)
    rng = random.Random(20261125)
    stream = segment_stream(rng, args.seconds * args.rate, resend_within=60 * args.rate)
    wall0 = T0 + 6 * DAY
    heap = FrozenHeap() if args.freeze else None
    with tempfile.TemporaryDirectory() as tmp, \
            AgentStateStore(Path(tmp) / "planner", FORMAT_VERSION, AppliedWindow(50_000, 300_000)) as store:
        agent = PlannerAgent(store, topics, cluster)
        agent.epoch = 0
        log.append(CLUSTER, Envelope(DynamicConfigSet(config={"smartSegmentLoading": False, "maxSegmentsToMove": 0}),
                                     "config", Instant(wall0), "config"), wall0)
        log.append(CLUSTER, Envelope(RulesSet(data_source="wiki", rules=(
            {"type": "loadForever", "tieredReplicants": {"hot": 2}},)), "rules", Instant(wall0), "rules/wiki"),
            wall0)
        for s in SERVERS:
            cluster.join(s, wall0)
        if heap is not None:
            heap.start()
        pool_work: list[Any] = []
        began = time.perf_counter()
        killed: dict[str, int] = {}
        print(f"{'t(s)':>6} {'RSS MB':>7} {'traced MB':>9}  sizes")
        for second in range(args.seconds):
            now = wall0 + second * 1000
            cluster.now = now
            for e in stream[second * args.rate:(second + 1) * args.rate]:
                log.append(SEGMENTS, e, now)
            if second % 5 == 0:
                seg = SegmentDescriptor("wiki", Interval(T0 + second * DAY, T0 + (second + 1) * DAY), "v1", 0, 1000)
                from tests.accepted import through_lockbox
                log.append(SEGMENTS, through_lockbox(Envelope(SegmentsPublished(task_id=f"wiki{second}",
                                                                                segments=(seg,)),
                                                              f"wiki-{second}", Instant(now), "wiki")), now)
                cluster.heartbeat(now)
            if second % 90 == 45:  # a historical SIGKILLed: silent, decided lost after 30 s, back after 40 s
                victim = SERVERS[(second // 90) % len(SERVERS)]
                cluster.alive[victim] = False
                killed[victim] = second + 40
            for s, back in list(killed.items()):
                if second == back:
                    del killed[s]
                    cluster.join(s, now)

            def step(at: int = now) -> None:
                while log.unread:
                    agent.process(log.take())
                agent.tick(at)
                while agent.balancing_in_progress:
                    agent.balance_slice(at)

            if second < args.catch_up:  # the backlog a newly elected worker folds, in full batches, planning off
                agent.catching_up = True
                while len(log.unread) >= 1000 or (log.unread and second + 1 == args.catch_up):
                    agent.process(log.take())
                if second + 1 < args.catch_up:
                    continue
                agent.finish_catch_up()
                print(f"caught up {second + 1} s of log: RSS {rss_mb():.0f} MB", flush=True)
            if args.threaded:
                t = threading.Thread(target=step)
                t.start()
                while t.is_alive():
                    t.join(0.001)
                    if heap is not None:
                        heap.after_batch()
                pool_work.clear()
            else:
                step()
                if heap is not None:
                    heap.after_batch()
            if (second + 1) % args.sample == 0:
                traced = tracemalloc.get_traced_memory()[0] / 2**20 if args.trace else 0.0
                print(f"{second + 1:6d} {rss_mb():7.0f} {traced:9.1f}  {sizes(agent)}  "
                      f"({time.perf_counter() - began:.0f}s)", flush=True)
        if args.trace:
            snap = tracemalloc.take_snapshot()
            for stat in snap.statistics("traceback")[:12]:
                print(f"{stat.size / 2**20:8.1f} MB {stat.count:8d} blocks")
                for line in stat.traceback.format()[-8:]:
                    print("    " + line)
        print(f"emitted {cluster.sent}, decoded check {decode(encode(stream[0])).event_id}")


if __name__ == "__main__":
    main()
