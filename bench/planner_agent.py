"""Benchmark: the planner agent's CPU per publish in this process, fed as the planner feed feeds it.

A planner store is preloaded with ``--preload`` hourly segments x 2 replicas on ``--servers`` servers (as
``bench.service --only placement --preload-via direct`` does); then ``--publishes`` publishes of one new segment
each go through :meth:`PlannerAgent.process` in batches of ``--batch`` publishes, each batch also holding the
previous batch's commands read back from ``commands`` and the announces answering the batch before (the
historicals answer at once): per publish one ``segments_published``, two ``load_segment`` read back and two
``segment_announced``, the records the elected worker's planner reads for one publish in
``bench.service --only placement``. The sink encodes what the agent sends, as the producer does. Printed: CPU
microseconds per publish (``time.process_time``, this thread only does the work).

Two modes, each on a fresh copy of the same store, alternated ``--rounds`` times:

- ``decode``: every record decoded by the planner (a worker without shared envelopes: the baseline);
- ``shared``: :mod:`streaming.service.shared_envelopes` configured as ``segcoord run`` configures it: the
  publish and the commands are taken from what this process produced, the announces from the decode of the
  worker's own consumer (done outside the measured agent, as the timeline agent does it in the worker).

Run: ``.venv/bin/python -m bench.planner_agent [--preload 10000] [--servers 10] [--publishes 2000] [--rounds 2]``.
No broker. ``--profile PATH`` writes a cProfile of the last shared round.
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, encode
from events.cluster import ServerJoined
from events.commands import LoadSegment
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import CLUSTER, COMMANDS, SEGMENTS
from streaming.service import planner_agent
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent
from streaming.service.shared_envelopes import SHARED
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox

HOUR = 3_600_000
T0 = 1_795_219_200_000
TOPICS = Topics("bench.")


class _Sink:
    """Encodes what the agent sends (as the producer does) and keeps it for the next batch's read-back."""

    def __init__(self, share: bool) -> None:
        self.share = share
        self.pending: list[tuple[Envelope[Event], bytes]] = []

    def send(self, env: Envelope[Event]) -> None:
        value = encode(env)
        self.pending.append((env, value))
        if self.share:
            SHARED.produced(TOPICS.name(env.event.event_topic), value, env)

    def flush(self, timeout: float = 30.0) -> None:
        pass


class Records:
    """Input records of the planner's topics at consecutive offsets (partition 0), all at ``now``."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.offsets: dict[str, int] = {}

    def __call__(self, logical: str, value: bytes) -> InputRecord:
        topic = TOPICS.name(logical)
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        return InputRecord(topic, 0, offset, b"k", value, self.now)


def joins(record: Records, servers: int) -> list[InputRecord]:
    """``servers`` servers joining the default tier (h000, h001, ...)."""
    return [record(CLUSTER, encode(Envelope(
        ServerJoined(server=f"h{i:03d}", tier="_default_tier", max_size_bytes=1 << 50), f"join-{i}",
        Instant(record.now), f"h{i:03d}"))) for i in range(servers)]


def publish_envelopes(publishes: int, now: int) -> list[Envelope[Event]]:
    """One sealed ``segments_published`` of one new hourly segment of ``pl`` per publish."""
    return [through_lockbox(Envelope(SegmentsPublished(task_id="t", segments=(
        SegmentDescriptor("pl", Interval(T0 + i * HOUR, T0 + (i + 1) * HOUR), "v1", 0, 1_000_000),)),
        f"pub-{i}", Instant(now + i), "pl")) for i in range(publishes)]


def one_round(store_dir: Path, servers: int, publishes: int, batch: int, share: bool, now: int,
              profile: str | None) -> float:
    """CPU microseconds per publish of one mode on a copy of the preloaded store."""
    work = Path(tempfile.mkdtemp(prefix="bench-planner-agent-"))
    try:
        shutil.copytree(store_dir, work / "store")
        SHARED.configure({TOPICS.name(SEGMENTS): 2, TOPICS.name(CLUSTER): 2, TOPICS.name(COMMANDS): 1}
                         if share else {})
        sink = _Sink(share)
        store = AgentStateStore(work / "store" / planner_agent.STORE_NAME, FORMAT_VERSION)
        agent = PlannerAgent(store, TOPICS, sink)
        record = Records(now)
        agent.process(joins(record, servers))
        agent.tick(now)  # the first timer run is a full one: behind us, as in the service's steady state
        sink.pending.clear()
        published = [(env, encode(env)) for env in publish_envelopes(publishes, now)]
        readback: list[tuple[Envelope[Event], bytes]] = []
        answers: list[Envelope[Event]] = []
        prof = cProfile.Profile() if profile else None
        cpu = time.process_time()
        if prof is not None:
            prof.enable()
        for b in range(0, publishes + 2 * batch, batch):
            records = []
            for env, value in published[b:b + batch]:
                if share:  # the lockbox agent of this process produced it
                    SHARED.produced(TOPICS.name(SEGMENTS), value, env)
                records.append(record(SEGMENTS, value))
            records += [record(COMMANDS, value) for _, value in readback]
            for env in answers:
                value = encode(env)
                if share:  # the worker's consumer (timeline agent) decoded it first
                    SHARED.decoded(TOPICS.name(SEGMENTS), value, env)
                records.append(record(SEGMENTS, value))
            answers = [Envelope(SegmentAnnounced(server=e.event.server, segment=e.event.segment), f"ann-{e.event_id}",
                                Instant(now + b), e.event.server, e.event_id)
                       for e, _ in readback if isinstance(e.event, LoadSegment)]
            if records:
                agent.process(records)
            readback, sink.pending = sink.pending, []
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)  # type: ignore[arg-type]
        spent = time.process_time() - cpu
        assert agent.counters.emitted >= 2 * publishes, agent.counters.emitted
        store.close()
        return spent / publishes * 1e6
    finally:
        SHARED.configure({})
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preload", type=int, default=10_000)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=20, help="publishes per batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    from bench.service import preload_store

    now = int(time.time() * 1000)
    base = Path(tempfile.mkdtemp(prefix="bench-planner-agent-store-"))
    try:
        preload_store(base, args.servers, args.preload, now)
        got: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for share in (False, True):
                last = r == args.rounds - 1 and share
                got[share].append(one_round(base, args.servers, args.publishes, args.batch, share, now,
                                            args.profile if last else None))
        decode, shared = statistics.median(got[False]), statistics.median(got[True])
        print(f"planner agent, {args.preload} segments x 2 on {args.servers} servers, {args.publishes} publishes in "
              f"batches of {args.batch}: CPU per publish (publish + 2 loads read back + 2 announces), median of "
              f"{args.rounds}: every record decoded {decode:.0f} us, shared envelopes {shared:.0f} us; "
              f"ratio {shared / decode:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
