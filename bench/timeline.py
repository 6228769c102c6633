"""Benchmark: the segment timeline at 1M hourly segments over 10 data sources.

Per data source and hour: 6 append partitions of version v1 (numbered, 6 core
partitions); every 3rd hour a segment-lock compaction in the same version
(partitions 6,7 overshadowing 0..5, one atomic update group); every 9th hour a
second compaction (partition 8 overshadowing 6,7: a chain); every 4th hour a
timeChunk overwrite with a newer version (3 core partitions); every day a daily
v0 segment underneath (mixed granularities). Everything is used and online.

Prints: bulk build time, incremental operations per second (announce and
unannounce, each re-resolving its chunk and, when completeness flips, the
overlapping versions), lookup latency for a 1-day and a 30-day interval, and
memory per segment; with ratios against a baseline measured in the same run
(a naive lookup that scans every segment of the data source, which is what a
timeline without an index would do). Mutation rates are also given in CPU time
(``time.process_time``): on a shared machine the wall clock counts the time other
jobs held the cores.

Run: ``.venv/bin/python -m bench.timeline [--segments 1000000]``
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from coordinator.timeline.timeline import Timeline
from events import Interval, SegmentDescriptor

HOUR = 3_600_000
DAY = 24 * HOUR
BASE = 1_735_689_600_000  # 2025-01-01


def _numbered(p: int, core: int) -> dict[str, object]:
    return {"type": "numbered", "partitionNum": p, "partitions": core}


def hour_segments(ds: str, h: int) -> list[SegmentDescriptor]:
    iv = Interval(BASE + h * HOUR, BASE + (h + 1) * HOUR)
    out = [SegmentDescriptor(ds, iv, "v1", p, 50_000_000, shard_spec=_numbered(p, 6)) for p in range(6)]
    if h % 3 == 0:
        out += [SegmentDescriptor(ds, iv, "v1", p, 120_000_000, tuple(range(6)), (6, 7),
                                  shard_spec=_numbered(p, 6)) for p in (6, 7)]
        if h % 9 == 0:
            out.append(SegmentDescriptor(ds, iv, "v1", 8, 240_000_000, (6, 7), (8,), shard_spec=_numbered(8, 6)))
    if h % 4 == 0:
        out += [SegmentDescriptor(ds, iv, "v2", p, 90_000_000, shard_spec=_numbered(p, 3)) for p in range(3)]
    if h % 24 == 0:
        out.append(SegmentDescriptor(ds, Interval(iv.start, iv.start + DAY), "v0", 0, 900_000_000))
    return out


def dataset(total: int, sources: int) -> dict[str, list[SegmentDescriptor]]:
    per_source = total // sources
    data: dict[str, list[SegmentDescriptor]] = {}
    for i in range(sources):
        ds = f"ds_{i}"
        segs: list[SegmentDescriptor] = []
        h = 0
        while len(segs) < per_source:
            segs.extend(hour_segments(ds, h))
            h += 1
        data[ds] = segs
    return data


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def naive_lookup(segments: list[SegmentDescriptor], visible: set[object], q: Interval) -> int:
    return sum(1 for s in segments if s.id in visible and s.interval.overlaps(q))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--ops", type=int, default=200_000)
    args = parser.parse_args()

    data = dataset(args.segments, args.sources)
    total = sum(len(v) for v in data.values())
    hours = max(s.interval.end for s in data["ds_0"]) // HOUR - BASE // HOUR
    print(f"dataset: {total:,} segments, {args.sources} data sources, {hours:,} hours each, "
          f"versions v0 (daily) v1 (hourly, 2 compaction levels) v2 (hourly overwrite)")

    online = {ds: {s.id: (s, ("h1",)) for s in segs} for ds, segs in data.items()}
    gc.collect()
    rss_before = _rss()
    started = time.perf_counter()
    timelines = {ds: Timeline.build(ds, segs, online[ds]) for ds, segs in data.items()}
    build = time.perf_counter() - started
    del online
    gc.collect()
    timeline_bytes = _rss() - rss_before
    print(f"bulk build: {build:.1f} s ({total / build:,.0f} segments/s); timeline memory "
          f"{timeline_bytes / total:,.0f} bytes/segment on top of the descriptors (RSS delta)")
    # A long-lived heap of a million objects: keep the cyclic GC from rescanning it on every
    # collection (what a service does after loading its state).
    gc.freeze()
    states = [st for tl in timelines.values() for st in tl.states().values()]
    print("states: " + ", ".join(f"{k} {states.count(k):,}" for k in ("visible", "standby", "overshadowed")))

    # Incremental: unannounce then re-announce random segments (each op settles its chunk).
    rng = random.Random(7)
    tl = timelines["ds_0"]
    segs = data["ds_0"]
    picks = [segs[rng.randrange(len(segs))] for _ in range(args.ops // 2)]
    changes = 0
    started, cpu = time.perf_counter(), time.process_time()
    for s in picks:
        changes += len(tl.unannounce(s.id, "h1"))
        changes += len(tl.announce(s, "h1"))
    inc, inc_cpu = time.perf_counter() - started, time.process_time() - cpu
    ops = 2 * len(picks)
    print(f"incremental: {ops:,} announce/unannounce in {inc:.2f} s = {ops / inc:,.0f} ops/s "
          f"({changes:,} state changes); CPU time {ops / inc_cpu:,.0f} ops/s")

    # Publish of new hours at the end (new chunks, new coverage).
    new = [s for h in range(hours, hours + 2000) for s in hour_segments("ds_0", h)]
    started, cpu = time.perf_counter(), time.process_time()
    for s in new:
        tl.publish([s])
        tl.announce(s, "h1")
    pub, pub_cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"incremental publish+announce of new data: {2 * len(new) / pub:,.0f} ops/s; "
          f"CPU time {2 * len(new) / pub_cpu:,.0f} ops/s")

    visible = set(tl.visible())
    for days in (1, 30):
        queries = []
        for _ in range(2000):
            start = BASE + rng.randrange(hours - days * 24) * HOUR
            queries.append(Interval(start, start + days * DAY))
        lat = []
        gc.collect()
        for q in queries:
            t0 = time.perf_counter()
            tl.lookup(q)
            lat.append(time.perf_counter() - t0)
        naive = []
        for q in queries[:20]:
            t0 = time.perf_counter()
            naive_lookup(segs, visible, q)
            naive.append(time.perf_counter() - t0)
        p50, p99 = statistics.median(lat), sorted(lat)[int(len(lat) * 0.99)]
        base = statistics.median(naive)
        print(f"lookup {days:>2}-day: p50 {p50 * 1e6:,.1f} us, p99 {p99 * 1e6:,.1f} us "
              f"({len(tl.lookup(queries[0]))} segments); naive scan {base * 1e3:,.1f} ms; "
              f"ratio {base / p50:,.0f}x")


if __name__ == "__main__":
    main()
