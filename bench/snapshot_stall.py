"""Benchmark: what one timeline snapshot costs the worker's event loop, built on it or on the snapshot thread.

A partition of ``--segments`` segments (each published and announced, one data source, hourly intervals) is
folded through :class:`~streaming.service.timeline_agent.TimelineAgent` on a real RocksDB store, with the
worker's heap policy (the fold frozen out of the collector's scans). Then, alternating for ``--rounds``:

- **on the loop** (the baseline, how snapshots were built before): ``write_snapshots(force=True)`` with no
  executor; the caller is blocked for the whole build, encoding and compression;
- **off the loop** (how ``segcoord run`` builds them): the same call with a one-thread executor. Measured: how
  long the call holds the caller, then, while the snapshot thread builds, the caller runs small tasks of
  ``--task-us`` of CPU each, as the event loop would (it shares the GIL with that thread); the longest gap
  between two tasks beyond a task's own time is what the loop waited.

Printed per way: the median and worst caller stall in ms and their ratio to the baseline, and the build's own
time on the thread. Both ways send byte-identical snapshots (checked).

Run: ``.venv/bin/python -m bench.snapshot_stall [--segments 23000] [--rounds 5] [--task-us 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.snapshots import TOPICS, Sink, feed
from events import Envelope, Interval, SegmentDescriptor, encode
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import SEGMENTS
from streaming.service.heap import FrozenHeap
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent
from streaming.service.timeline_snapshots import SnapshotPolicy
from tests.accepted import through_lockbox

HOUR = 3_600_000
T0 = 1_795_219_200_000


def partition(segments: int) -> list[InputRecord]:
    """Publish then announce each of ``segments`` hourly segments of one data source, on partition 0."""
    out = []
    for i in range(segments):
        seg = SegmentDescriptor("wiki", Interval(T0 + i * HOUR, T0 + (i + 1) * HOUR), "v1", 0, 1000)
        for n, event in ((2 * i, SegmentsPublished(task_id=f"t{i}", segments=(seg,))),
                         (2 * i + 1, SegmentAnnounced(server=f"h{i % 10}", segment=seg))):
            env = through_lockbox(Envelope(event, f"e{n}", Instant(T0 + n), "wiki"))
            out.append(InputRecord(TOPICS.name(SEGMENTS), 0, n, b"wiki", encode(env)))
    return out


def on_loop(agent: TimelineAgent) -> float:
    agent._executor = None
    began = time.perf_counter()
    assert agent.write_snapshots(force=True) == 1
    return time.perf_counter() - began


def off_loop(agent: TimelineAgent, executor: ThreadPoolExecutor, task_s: float) -> tuple[float, float, float]:
    """(the call's stall, the longest wait between two tasks while the thread builds, the build's time)."""
    agent._executor = executor
    began = time.perf_counter()
    assert agent.write_snapshots(force=True) == 0  # started, not sent
    call = time.perf_counter() - began
    future = next(iter(agent._building.values()))[0]
    worst, last = 0.0, time.perf_counter()
    while not future.done():
        end = time.process_time() + task_s
        while time.process_time() < end:  # one task's CPU
            pass
        now = time.perf_counter()
        worst = max(worst, now - last - task_s)
        last = now
    built = time.perf_counter() - began
    assert agent.write_snapshots() == 1  # sent now
    return call, worst, built


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=23_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--task-us", type=int, default=200)
    args = ap.parse_args()
    records = partition(args.segments)
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "t", FORMAT_VERSION) as store, \
            ThreadPoolExecutor(1, thread_name_prefix="timeline-snapshots") as executor:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.enable_snapshots(SnapshotPolicy(every_records=10**9, every_ms=10**12), sink, "bench")
        feed(agent, records)
        FrozenHeap().start()
        loop_s: list[float] = []
        call_s: list[float] = []
        wait_s: list[float] = []
        built_s: list[float] = []
        sent: set[bytes] = set()
        for _ in range(args.rounds):
            agent._since[0] = 1  # due again (force takes every partition applied to since its last one)
            loop_s.append(on_loop(agent))
            sent.add(sink.snapshot)
            agent._since[0] = 1
            call, wait, built = off_loop(agent, executor, args.task_us / 1e6)
            call_s.append(call)
            wait_s.append(wait)
            built_s.append(built)
            sent.add(sink.snapshot)
        assert len(sent) == 1, "the two ways sent different snapshots"
    base = statistics.median(loop_s)
    print(f"partition: {args.segments} segments, snapshot {len(sent.pop()) / 1024:.0f} KB; {args.rounds} rounds, "
          f"alternating")
    print(f"on the loop (baseline): caller blocked {base * 1000:7.1f} ms median, {max(loop_s) * 1000:7.1f} ms worst")
    print(f"off the loop:           caller blocked {statistics.median(call_s) * 1000:7.2f} ms median "
          f"({statistics.median(call_s) / base:.3f} of the baseline), {max(call_s) * 1000:.2f} ms worst")
    print(f"                        then the longest wait between two {args.task_us} us tasks while the thread "
          f"built: {statistics.median(wait_s) * 1000:.1f} ms median ({statistics.median(wait_s) / base:.3f} of "
          f"the baseline), {max(wait_s) * 1000:.1f} ms worst")
    print(f"                        the build itself took {statistics.median(built_s) * 1000:.0f} ms (wall, "
          f"sharing the GIL with those tasks)")


if __name__ == "__main__":
    main()
