"""Benchmark: one placement cost against a server holding N segments, brute force.

The vectorized numpy form (:func:`coordinator.balancer.cost.costs`) against the
scalar closed form in a Python loop, both exact, on hourly-aligned data and on
unaligned random starts, with the ratio measured in the same run. (The
per-server cost cache of issue 5, which answers in O(log n), is not built yet;
this is the baseline it will be measured against.)

Run: ``.venv/bin/python -m bench.cost``
"""

from __future__ import annotations

import time

import numpy as np

from coordinator.balancer.cost import CostModel, costs, interval_joint_cost
from events import Interval

HOUR = 3_600_000
BASE = 1_735_689_600_000


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    model = CostModel()
    rng = np.random.default_rng(1)
    x = Interval(BASE + 5000 * HOUR, BASE + 5001 * HOUR)
    for layout in ("aligned", "unaligned"):
        for n in (1_000, 10_000, 100_000, 1_000_000):
            if layout == "aligned":
                starts = BASE + rng.integers(0, 20_000, n).astype(np.int64) * HOUR
                ends = starts + HOUR
            else:
                starts = BASE + rng.integers(0, 20_000 * HOUR, n).astype(np.int64)
                ends = starts + rng.integers(1, 48 * HOUR, n).astype(np.int64)
            same = rng.random(n) < 0.1
            vec = _best(lambda s=starts, e=ends, m=same: float(np.sum(costs(x, s, e, m, model))), 3)
            sample = min(n, 20_000)
            pairs = list(zip(starts[:sample].tolist(), ends[:sample].tolist(), strict=True))
            loop = _best(lambda p=pairs: sum(interval_joint_cost(x.start, x.end, s, e, model.lam) for s, e in p),
                         1) * n / sample
            print(f"{layout:9s} N={n:>9,}: numpy {vec * 1e3:9.3f} ms   scalar loop {loop * 1e3:10.1f} ms"
                  f"{' (extrapolated)' if sample < n else ''}   ratio {loop / vec:6.1f}x")


if __name__ == "__main__":
    main()
