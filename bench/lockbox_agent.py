"""Benchmark: the lockbox agent's CPU per publish request in this process, as the worker feeds it.

The shape of ``bench.service --only placement``: one task holds an exclusive lock on ten years of one data
source; ``--published`` hourly segments are published first (requests of 500, not measured); then
``--requests`` ``publish_requested`` of one new segment each go through :meth:`LockboxAgent.process` on a real
RocksDB store in batches of ``--batch`` (what one fetch brings at 1000 requests/s). The sink encodes what the
agent sends, as the producer does. Printed: CPU microseconds per request (``time.process_time``), and against
it, in the same run, the pure fold of the same requests (decode + ``Lockbox.handle``): the agent's own cost
(dedupe, the ``segments_published`` twin and its seal, encoding the outputs, the write batch) is the
difference. The agent's periodic snapshots fall in the measured requests as in the worker (``--snapshot-every``,
default the agent's own, ``SNAPSHOT_EVERY`` or ``SEGCOORD_LOCKBOX_SNAPSHOT_EVERY``); the slowest batch (wall
time, ms) and the snapshots written are printed too: a snapshot stalls the worker's event loop for its batch.

Run: ``.venv/bin/python -m bench.lockbox_agent [--requests 5000] [--batch 20] [--published 10000] [--rounds 3]
[--snapshot-every N]``. No broker. ``--profile PATH`` writes a cProfile of the last agent round.
``--snapshot-cost`` measures instead the wall time of a batch that writes the snapshot against one that does
not, alternated (``--rounds`` times each, at least 5) after ``--published`` segments.
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coordinator.locks.lockbox import Lockbox
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode, encode
from events.locks import LockGranted
from events.schema import Instant
from events.tasks import LockRequested, PublishRequested, TaskStarted
from events.topics import LOCK_REQUESTS
from streaming.service import lockbox_agent
from streaming.service.heap import FrozenHeap
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore

HOUR = 3_600_000
DAY = 24 * HOUR
T0 = 1_795_219_200_000
TOPICS = Topics("bench.")
KEY = b"bench-publish-key-of-32-bytes..."
DS = "placement"


class _Sink:
    """Encodes what the agent sends, as the producer does, and keeps the bytes."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.envelopes: list[Envelope[Event]] = []

    def send(self, env: Envelope[Event]) -> None:
        self.values.append(encode(env))
        self.envelopes.append(env)

    def send_encoded(self, env: Envelope[Event], value: bytes) -> None:  # as EventProducer.send_encoded
        self.values.append(value)
        self.envelopes.append(env)

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.values.append(value or b"")

    def flush(self, timeout: float = 30.0) -> None:
        pass


def _env(event: Event, n: int) -> Envelope[Event]:
    return Envelope(event, f"req-{n}", Instant(T0 + n), DS)


def _requests(sink: _Sink, agent: lockbox_agent.LockboxAgent, published: int, requests: int) -> list[bytes]:
    """Start the task and take its lock through ``agent``, publish ``published`` segments; the measured requests."""
    task = TaskStarted(task_id="t1", group_id="g1", task_type="index", data_source=DS)
    lock = LockRequested(request_id="lock-1", task_id="t1", group_id="g1", task_type="index", data_source=DS,
                         interval=Interval(T0, T0 + 3660 * DAY), granularity="timeChunk", lock_type="exclusive")
    offset = 0

    def feed(values: list[bytes]) -> None:
        nonlocal offset
        agent.process([InputRecord(TOPICS.name(LOCK_REQUESTS), 0, offset + i, DS.encode(), v, T0 + offset + i)
                       for i, v in enumerate(values)])
        offset += len(values)

    feed([encode(_env(task, 0)), encode(_env(lock, 1))])
    version = next(e.event.lock.version for e in sink.envelopes if isinstance(e.event, LockGranted))

    def seg(hour: int) -> SegmentDescriptor:
        return SegmentDescriptor(DS, Interval(T0 + hour * HOUR, T0 + (hour + 1) * HOUR), version, 0, 1_000_000)

    for b in range(0, published, 500):
        segs = tuple(seg(h) for h in range(b, min(published, b + 500)))
        feed([encode(_env(PublishRequested(request_id=f"pre-{b}", task_id="t1", segments=segs), 2 + b))])
    return [encode(_env(PublishRequested(request_id=f"pub-{i}", task_id="t1", segments=(seg(published + i),)),
                        10_000_000 + i)) for i in range(requests)]


@dataclass(frozen=True)
class Round:
    """One round's figures: CPU us per request of the agent and of the pure fold, the slowest batch's wall time
    (ms) and the snapshots the agent wrote during the measured requests."""

    agent_us: float
    fold_us: float
    max_batch_ms: float
    snapshots: int


def _round(published: int, requests: int, batch: int, profile: str | None,
           snapshot_every: int | None = None) -> Round:
    """One agent run and one fold run on the same requests."""
    with tempfile.TemporaryDirectory(prefix="bench-lockbox-agent-") as tmp, \
            AgentStateStore(Path(tmp) / lockbox_agent.STORE_NAME, lockbox_agent.FORMAT_VERSION) as store:
        sink = _Sink()
        agent = lockbox_agent.LockboxAgent(store, TOPICS, sink, snapshot_every=snapshot_every, publish_key=KEY)
        values = _requests(sink, agent, published, requests)
        first = sum(agent.next_offsets().values())
        # the pure fold's lockbox: the same state, restored from the agent's store before the measured requests
        box = lockbox_agent.load_lockbox(store).lockbox
        records = [InputRecord(TOPICS.name(LOCK_REQUESTS), 0, first + i, DS.encode(), v, T0 + i)
                   for i, v in enumerate(values)]
        sink.values.clear()
        sink.envelopes.clear()
        heap = FrozenHeap()  # the worker's heap policy: the restored state frozen out of the collector's scans
        heap.start()
        prof = cProfile.Profile() if profile else None
        snapshots = agent.snapshots_written
        slowest = 0.0
        cpu = time.process_time()
        if prof:
            prof.enable()
        for i in range(0, len(records), batch):
            wall = time.perf_counter()
            agent.process(records[i:i + batch])
            slowest = max(slowest, time.perf_counter() - wall)
            heap.after_batch()
        if prof:
            prof.disable()
            prof.dump_stats(profile)  # type: ignore[arg-type]
        agent_us = (time.process_time() - cpu) / requests * 1e6
        snapshots = agent.snapshots_written - snapshots
        assert agent.counters.dead_lettered == 0, agent.counters.last_reasons
        outputs = len(sink.values)
    heap.start()
    cpu = time.process_time()
    decisions = 0
    for v in values:
        decisions += len(Lockbox.handle(box, decode(v)))
    fold_us = (time.process_time() - cpu) / requests * 1e6
    assert outputs == decisions + requests, (outputs, decisions)  # each accepted publish: a decision and its twin
    return Round(agent_us, fold_us, slowest * 1000, snapshots)


def _snapshot_cost(published: int, batch: int, rounds: int) -> None:
    """Wall time of a batch of ``batch`` requests that writes the agent's snapshot against one that does not,
    alternated ``rounds`` times each after ``published`` segments were committed (the gc frozen, as the worker's
    heap policy has it): what a snapshot adds to the event loop's stall."""
    with tempfile.TemporaryDirectory(prefix="bench-lockbox-agent-") as tmp, \
            AgentStateStore(Path(tmp) / lockbox_agent.STORE_NAME, lockbox_agent.FORMAT_VERSION) as store:
        sink = _Sink()
        agent = lockbox_agent.LockboxAgent(store, TOPICS, sink, publish_key=KEY)
        values = _requests(sink, agent, published, 2 * rounds * batch)
        first = sum(agent.next_offsets().values())
        records = [InputRecord(TOPICS.name(LOCK_REQUESTS), 0, first + i, DS.encode(), v, T0 + i)
                   for i, v in enumerate(values)]
        heap = FrozenHeap()
        heap.start()
        plain: list[float] = []
        snapshot: list[float] = []
        for r in range(2 * rounds):
            agent.snapshot_every = 1 if r % 2 else 1 << 62  # every other batch writes the snapshot
            wall = time.perf_counter()
            agent.process(records[r * batch:(r + 1) * batch])
            (snapshot if r % 2 else plain).append((time.perf_counter() - wall) * 1000)
            heap.after_batch()
        size = len(store.get(lockbox_agent.SNAPSHOT_KEY) or b"")
    print(f"{published} segments committed: a batch of {batch} without the snapshot median "
          f"{statistics.median(plain):.1f} ms (max {max(plain):.1f}), with it {statistics.median(snapshot):.1f} ms "
          f"(max {max(snapshot):.1f}); "
          f"snapshot {size / 1000:.1f} kB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--published", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--snapshot-every", type=int, default=None,
                        help="the agent's snapshot interval in requests (default: the agent's own)")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--snapshot-cost", action="store_true",
                        help="instead: a batch writing the snapshot against one that does not, --rounds times each")
    args = parser.parse_args()
    if args.snapshot_cost:
        _snapshot_cost(args.published, args.batch, max(args.rounds, 5))
        return
    rounds: list[Round] = []
    for r in range(1, args.rounds + 1):
        got = _round(args.published, args.requests, args.batch, args.profile if r == args.rounds else None,
                     args.snapshot_every)
        rounds.append(got)
        print(f"round {r}: lockbox agent {got.agent_us:.1f} us CPU per publish request, pure fold (decode + handle) "
              f"{got.fold_us:.1f} us; agent / fold = {got.agent_us / got.fold_us:.2f}; slowest batch "
              f"{got.max_batch_ms:.1f} ms, {got.snapshots} snapshots", flush=True)
    a, f = statistics.median(x.agent_us for x in rounds), statistics.median(x.fold_us for x in rounds)
    slowest = statistics.median(x.max_batch_ms for x in rounds)
    print(f"median of {args.rounds}: agent {a:.1f} us, fold {f:.1f} us per publish request "
          f"(batches of {args.batch}, {args.published} segments published before); agent / fold = {a / f:.2f}; "
          f"slowest batch {slowest:.1f} ms")


if __name__ == "__main__":
    main()
