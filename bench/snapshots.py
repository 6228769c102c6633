"""Benchmark: taking over a partition of ``segments`` from a snapshot plus the tail, against replaying it all.

A worker that gains a partition either folds the partition's whole log (the baseline: what a worker with an
empty store did before snapshots) or decodes the latest snapshot, restores it and folds the tail after it. Both
run here on a real RocksDB store through :class:`~streaming.service.timeline_agent.TimelineAgent` (decode,
fold, store commit; the sink only collects), over a seeded stream of ``--events`` events on one partition with
a snapshot every ``--every`` events, the gainer arriving ``--tail`` events after the last snapshot.

Printed: the partition's segments and snapshot size, the time to take and encode one snapshot, and the take-over
time of each way with their ratio (snapshot + tail / full replay), all measured in the same run.

Run: ``.venv/bin/python -m bench.snapshots [--events 50000] [--every 10000] [--tail 5000]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from coordinator.timeline.snapshot import decode_snapshot, encode_snapshot
from events import Envelope, Topics, encode
from events.registry import Event
from events.topics import SEGMENTS, SNAPSHOTS
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent
from streaming.service.timeline_snapshots import SnapshotPolicy
from tests.integration.test_service_timeline import segment_stream

TOPICS = Topics("bench.")


class Sink:
    def __init__(self) -> None:
        self.snapshot = b""

    def send(self, envelope: Envelope[Event]) -> None:
        pass

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        if topic == TOPICS.name(SNAPSHOTS):  # (visibility changes come this way too)
            self.snapshot = value or b""

    def flush(self, timeout: float = 30.0) -> None:
        pass


def feed(agent: TimelineAgent, records: list[InputRecord], size: int = 2000) -> None:
    for i in range(0, len(records), size):
        agent.process(records[i:i + size])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--every", type=int, default=10_000)
    ap.add_argument("--tail", type=int, default=5_000)
    args = ap.parse_args()
    events = segment_stream(random.Random(16), args.events + args.tail)
    records = [InputRecord(TOPICS.name(SEGMENTS), 0, i, e.key.encode(), encode(e)) for i, e in enumerate(events)]
    with tempfile.TemporaryDirectory() as tmp:
        sink = Sink()
        with AgentStateStore(Path(tmp) / "owner", FORMAT_VERSION) as store:  # the owner: writes the snapshots
            owner = TimelineAgent(store, TOPICS, sink)
            owner.enable_snapshots(SnapshotPolicy(every_records=args.every, every_ms=10**12), sink, "owner")
            feed(owner, records[:args.events])
            began = time.perf_counter()
            data = encode_snapshot(owner.snapshot(0))
            take_s = time.perf_counter() - began
        if not sink.snapshot:  # every snapshot came out over the record limit (the log says so): none to take over
            raise SystemExit(f"no snapshot was written: the partition's ({len(data) / 1024:.0f} KB compressed at the "
                             f"end) did not fit in one record; try fewer --events")
        snap = decode_snapshot(sink.snapshot)
        tail = records[snap.next_offset:]

        began = time.perf_counter()
        with AgentStateStore(Path(tmp) / "replay", FORMAT_VERSION) as store:
            feed(TimelineAgent(store, TOPICS, Sink()), records)
        full_s = time.perf_counter() - began

        began = time.perf_counter()
        with AgentStateStore(Path(tmp) / "gainer", FORMAT_VERSION) as store:
            gainer = TimelineAgent(store, TOPICS, Sink())
            gainer.adopt(decode_snapshot(sink.snapshot))
            feed(gainer, tail)
        snap_s = time.perf_counter() - began
    print(f"partition: {len(records)} events, {len(snap.facts)} segments at the snapshot's offset "
          f"{snap.next_offset}; snapshot {len(data) / 1024:.0f} KB compressed, taken and encoded in "
          f"{take_s * 1000:.0f} ms")
    print(f"take-over by full replay:      {full_s:7.2f} s ({len(records)} events)")
    print(f"take-over by snapshot + tail:  {snap_s:7.2f} s ({len(tail)} events after the snapshot)")
    print(f"ratio snapshot+tail / replay:  {snap_s / full_s:7.3f}")


if __name__ == "__main__":
    main()
