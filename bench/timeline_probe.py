"""Probe: best-of-5 CPU-time rates of the timeline on ``bench.timeline``'s data set, for A/B pairs.

Churn: one 100k-segment data source, 5 rounds of 10k unannounce + announce pairs, the best round.
Publish + announce: 3,000 new hours on a fresh 20k-segment timeline, 5 rounds, the best.
1-day lookups: p50 of wall clock per call, the best of 5 rounds of 2,000.

On a shared machine run it from two checkouts in turn, interleaved (base, new, base, new): the pairs are
what compare (docs/codec-and-timeline-performance.md, fourth pass).

Run: ``.venv/bin/python -m bench.timeline_probe [all|churn|lookup|publish]``
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time

from bench.timeline import BASE, DAY, HOUR, dataset, hour_segments
from coordinator.timeline.timeline import Timeline
from events import Interval

ROUNDS = 5


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    cpu = time.process_time
    out = []
    if what in ("all", "churn", "lookup"):
        segs = dataset(100_000, 1)["ds_0"]
        hours = max(s.interval.end for s in segs) // HOUR - BASE // HOUR
        tl = Timeline.build("ds_0", segs, {s.id: (s, ("h1",)) for s in segs})
        gc.collect()
        gc.freeze()
        rng = random.Random(7)
        if what in ("all", "churn"):
            best = 0.0
            for _ in range(ROUNDS):
                picks = [segs[rng.randrange(len(segs))] for _ in range(10_000)]
                t0 = cpu()
                for s in picks:
                    tl.unannounce(s.id, "h1")
                    tl.announce(s, "h1")
                best = max(best, 2 * len(picks) / (cpu() - t0))
            out.append(f"churn {best:,.0f}")
        if what in ("all", "lookup"):
            p50 = 1e9
            for _ in range(ROUNDS):
                lat = []
                for _ in range(2000):
                    start = BASE + rng.randrange(hours - 24) * HOUR
                    q = Interval(start, start + DAY)
                    t0 = time.perf_counter()
                    tl.lookup(q)
                    lat.append(time.perf_counter() - t0)
                p50 = min(p50, statistics.median(lat))
            out.append(f"lookup1 {p50 * 1e6:.1f}us")
    if what in ("all", "publish"):
        best = 0.0
        for _ in range(ROUNDS):
            segs = dataset(20_000, 1)["ds_0"]
            hours = max(s.interval.end for s in segs) // HOUR - BASE // HOUR
            tl = Timeline.build("ds_0", segs, {s.id: (s, ("h1",)) for s in segs})
            new = [s for h in range(hours, hours + 3000) for s in hour_segments("ds_0", h)]
            gc.collect()
            t0 = cpu()
            for s in new:
                tl.publish([s])
                tl.announce(s, "h1")
            best = max(best, 2 * len(new) / (cpu() - t0))
        out.append(f"publish {best:,.0f}")
    print("; ".join(out))


if __name__ == "__main__":
    main()
