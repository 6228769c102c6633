"""Benchmark: the cost of one placement against a server holding N segments, brute force vs the cost cache.

- **Query**: brute-force numpy (:class:`~coordinator.balancer.server_costs.ServerSegments`,
  every held segment, vectorized) against :class:`~coordinator.balancer.cost_cache.ServerCostCache`
  (coverage profiles: two point values per sum), for N = 1e3 .. 1e6, on hourly-aligned
  data and on unaligned random starts and lengths (1 ms .. 48 h), and on mixed
  granularities (hour, day, 30-day aligned, unaligned 1 ms .. 1 year, a few "all
  time"), with the ratio measured in the same run and the largest relative difference
  between the two answers; and the tree walks the profiles replaced
  (:class:`~coordinator.balancer.coverage.CoverageTree`, one of every segment and one
  per data source), same run, same probes. CPU time of the process per query.
- **Updates**: add and remove alone, then each followed by a query (the cache absorbs the change before it
  answers), against the trees' O(log n) updates and walks in the same run; then queries alone on the cache as
  those updates left it.
- **Choosing a server**: the cheapest of 300 servers holding 3M segments in
  total (100 data sources): one brute-force pass over all 3M (the baseline), the
  :class:`~coordinator.balancer.cost_index.ClusterCostIndex` (one vectorized pass
  over every candidate, built in bulk from the arrays), and one
  :class:`~coordinator.balancer.cost_cache.ServerCostCache` query per server (with
  those 300 caches' build time).

Run: ``.venv/bin/python -m bench.cost`` (``--quick`` stops at N = 1e5 and 30 servers;
``--only choose|queries|updates`` runs one section, ``--sizes N,N`` sets the query sizes, ``--no-caches``
skips the 300 per-server caches of the choosing section, the slowest part to build, ``--no-trees`` the tree-walk
baselines of the query and update sections).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from coordinator.balancer.cost import CostModel, costs
from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.balancer.cost_index import ClusterCostIndex
from coordinator.balancer.coverage import CoverageTree
from coordinator.balancer.server_costs import ServerSegments
from events import ETERNITY, Interval, SegmentDescriptor

HOUR = 3_600_000
BASE = 1_735_689_600_000


def _per_call(fn: Callable[..., object], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _cpu_per_call(fn: Callable[..., object], calls: int) -> float:
    """CPU seconds a call (the process's, so other load on the machine does not count)."""
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t0) / calls


def _segments(layout: str, n: int, rng: np.random.Generator, sources: int = 10,
              hours: int | None = None) -> list[SegmentDescriptor]:
    span = hours or max(1000, n // sources)
    if layout == "aligned":
        starts = BASE + rng.integers(0, span, n).astype(np.int64) * HOUR
        ends = starts + HOUR
    elif layout == "mixed":  # hour, day and 30-day aligned, unaligned 1 ms .. 1 year, and 0.01% "all time"
        kind = rng.integers(0, 4, n)
        grain = np.array([HOUR, 24 * HOUR, 720 * HOUR, 0], dtype=np.int64)[kind]
        starts = BASE + rng.integers(0, span, n).astype(np.int64) * HOUR
        ends = starts + grain
        free = kind == 3
        starts[free] = BASE + rng.integers(0, span * HOUR, int(free.sum()))
        ends[free] = starts[free] + rng.integers(1, 8760 * HOUR, int(free.sum()))
        eternal = rng.random(n) < 1e-4
        starts[eternal], ends[eternal] = ETERNITY.start, ETERNITY.end
    else:
        starts = BASE + rng.integers(0, span * HOUR, n).astype(np.int64)
        ends = starts + rng.integers(1, 48 * HOUR, n).astype(np.int64)
    ds = rng.integers(0, sources, n)
    return [SegmentDescriptor(f"ds{d}", Interval(s, e), f"v{i}")
            for i, (s, e, d) in enumerate(zip(starts.tolist(), ends.tolist(), ds.tolist(), strict=True))]


class _TreeCosts:
    """The cache before the coverage profiles (the baseline of the query section, same run): one
    :class:`~coordinator.balancer.coverage.CoverageTree` of every segment and one per data source, a tree walk each
    per query (probes are never held, so no self-exclusion)."""

    def __init__(self, held: list[SegmentDescriptor], model: CostModel) -> None:
        self.model = model
        self.every = CoverageTree(model.lam)
        self.every.add_many([s.interval.start for s in held], [s.interval.end for s in held])
        by_source: dict[str, tuple[list[int], list[int]]] = {}
        for s in held:
            starts, ends = by_source.setdefault(s.data_source, ([], []))
            starts.append(s.interval.start)
            ends.append(s.interval.end)
        self.by_source: dict[str, CoverageTree] = {}
        for source, (starts, ends) in by_source.items():
            tree = self.by_source[source] = CoverageTree(model.lam)
            tree.add_many(starts, ends)

    def change(self, segment: SegmentDescriptor, count: int) -> None:
        """Add (1) or remove (-1) a segment: one O(log n) update of two trees."""
        start, end = segment.interval.start, segment.interval.end
        tree = self.by_source.setdefault(segment.data_source, CoverageTree(self.model.lam))
        for t in (self.every, tree):
            t.add(start, end) if count > 0 else t.remove(start, end)

    def cost_of(self, segment: SegmentDescriptor) -> float:
        x0, x1 = segment.interval.start, segment.interval.end
        total = self.every.total(x0, x1)
        tree = self.by_source.get(segment.data_source)
        if tree is not None:
            total += (self.model.same_source_factor - 1.0) * tree.total(x0, x1)
        return total


def queries(sizes: list[int], trees: bool = True) -> None:
    """One placement's cost: brute force, the cache (coverage profiles), and the tree walks it replaced (same run)."""
    rng = np.random.default_rng(1)
    print("one placement cost against a server holding N segments (CPU time per query; wall in brackets)")
    for layout in ("aligned", "unaligned", "mixed"):
        for n in sizes:
            held = _segments(layout, n, rng)
            brute = ServerSegments()
            for s in held:
                brute.add(s)
            probes = _segments(layout, 200, rng, hours=max(1000, n // 10))
            c0 = time.process_time()
            cache = ServerCostCache()
            cache.extend(held)
            cache.cost_of(probes[0])  # the first query builds the profiles
            build = time.process_time() - c0
            fast = _cpu_per_call(lambda c=cache, ps=probes: [c.cost_of(p) for p in ps], 5) / len(probes)
            fast_wall = _per_call(lambda c=cache, ps=probes: [c.cost_of(p) for p in ps], 1) / len(probes)
            sample = probes[:10]
            slow = _cpu_per_call(lambda b=brute, ps=sample: [b.cost_of(p) for p in ps], 1) / len(sample)
            refs = [brute.cost_of(p) for p in sample]
            worst = max(abs(cache.cost_of(p) - r) / r for p, r in zip(sample, refs, strict=True))
            line = (f"  {layout:9s} N={n:>9,}: brute {slow * 1e3:8.3f} ms   cache {fast * 1e6:6.1f} µs "
                    f"[{fast_wall * 1e6:6.1f}]   ratio {slow / fast:8.0f}x   max rel diff {worst:.1e}   "
                    f"(built in {build:5.2f} s CPU)")
            if trees:
                c0 = time.process_time()
                walker = _TreeCosts(held, cache.model)
                tree_build = time.process_time() - c0
                walk = _cpu_per_call(lambda w=walker, ps=probes: [w.cost_of(p) for p in ps], 2) / len(probes)
                tree_worst = max(abs(walker.cost_of(p) - r) / r for p, r in zip(sample, refs, strict=True))
                line += (f"\n  {'':22s} tree walks (before) {walk * 1e6:6.1f} µs   cache / walks "
                         f"{fast / walk:5.3f}   max rel diff {tree_worst:.1e}   (trees: {tree_build:5.2f} s CPU)")
            print(line, flush=True)


def updates(n: int, trees: bool = True) -> None:
    """Adds and removes alone, then each followed by a query (the planner's pattern: the cache must absorb the
    change before it answers), against the tree walks (O(log n) node updates) in the same run."""
    rng = np.random.default_rng(2)
    print(f"cache updates on a server holding {n:,} segments (CPU time)")
    for layout in ("aligned", "unaligned"):
        held = _segments(layout, n, rng)
        cache = ServerCostCache()
        cache.extend(held)
        extra = _segments(layout, 2000, rng, hours=max(1000, n // 10))
        extra = [SegmentDescriptor(s.data_source, s.interval, f"x{i}") for i, s in enumerate(extra)]
        probes = _segments(layout, 2000, rng, hours=max(1000, n // 10))
        cache.cost_of(probes[0])
        c0 = time.process_time()
        for s in extra:
            cache.add(s)
        add = (time.process_time() - c0) / len(extra)
        c0 = time.process_time()
        for s in extra:
            cache.remove(s.id)
        remove = (time.process_time() - c0) / len(extra)
        c0 = time.process_time()
        for s, p in zip(extra, probes, strict=True):
            cache.add(s)
            cache.cost_of(p)
        for s, p in zip(extra, probes, strict=True):
            cache.remove(s.id)
            cache.cost_of(p)
        pair = (time.process_time() - c0) / (2 * len(extra))
        c0 = time.process_time()
        for p in probes:
            cache.cost_of(p)
        after = (time.process_time() - c0) / len(probes)
        line = (f"  {layout:9s}: add {add * 1e6:5.1f} µs   remove {remove * 1e6:5.1f} µs   "
                f"an update then a query {pair * 1e6:7.1f} µs   then queries alone {after * 1e6:5.1f} µs")
        if trees:
            walker = _TreeCosts(held, cache.model)
            c0 = time.process_time()
            for s, p in zip(extra, probes, strict=True):
                walker.change(s, 1)
                walker.cost_of(p)
            for s, p in zip(extra, probes, strict=True):
                walker.change(s, -1)
                walker.cost_of(p)
            walk_pair = (time.process_time() - c0) / (2 * len(extra))
            line += f"   (tree walks before: {walk_pair * 1e6:7.1f} µs, ratio {pair / walk_pair:5.2f})"
        print(line, flush=True)


def choose_server(servers: int, total: int, per_server_caches: bool = True) -> None:
    """The cheapest of ``servers`` for one segment: one brute-force pass over every segment (the baseline), the
    cluster index (one vectorized pass over all candidates), and one cache query per server."""
    rng = np.random.default_rng(3)
    print(f"the cheapest of {servers} servers holding {total:,} segments (100 data sources, hourly)")
    segments = _segments("aligned", total, rng, sources=100, hours=total // 100)
    owner = rng.integers(0, servers, total)
    starts = np.array([s.interval.start for s in segments], dtype=np.int64)
    ends = np.array([s.interval.end for s in segments], dtype=np.int64)
    codes = np.array([int(s.data_source[2:]) for s in segments], dtype=np.int64)
    names = [f"h{k:04d}" for k in range(servers)]
    t0, c0 = time.perf_counter(), time.process_time()
    index = ClusterCostIndex(names, starts, ends, owner.astype(np.int64), codes, [f"ds{d}" for d in range(100)],
                             segments)
    index_build, index_cpu = time.perf_counter() - t0, time.process_time() - c0
    probes = _segments("aligned", 20, rng, sources=100, hours=total // 100)
    model = CostModel()

    def brute_costs(p: SegmentDescriptor) -> np.ndarray:
        values = costs(p.interval, starts, ends, codes == int(p.data_source[2:]), model)
        return np.bincount(owner, weights=values, minlength=servers)

    slow = _per_call(lambda: [int(np.argmin(brute_costs(p))) for p in probes[:5]], 1) / 5
    fast = _per_call(lambda: [index.cheapest(p) for p in probes], 1) / len(probes)
    slow_cpu = _cpu_per_call(lambda: [int(np.argmin(brute_costs(p))) for p in probes[:5]], 1) / 5
    fast_cpu = _cpu_per_call(lambda: [index.cheapest(p) for p in probes], 5) / len(probes)
    agree = all(index.cheapest(p) == names[int(np.argmin(brute_costs(p)))] for p in probes[:5])
    worst = max(float(np.max(np.abs(index.costs_of(p) - brute_costs(p)) / brute_costs(p))) for p in probes[:5])
    print(f"  brute {slow * 1e3:8.1f} ms/segment   index {fast * 1e3:7.3f} ms/segment   ratio {slow / fast:7.0f}x   "
          f"same choice: {agree}   max rel diff {worst:.1e}   (index built in bulk in {index_build:5.1f} s, "
          f"{index_cpu:5.1f} s of CPU)")
    print(f"  CPU time: brute {slow_cpu * 1e3:8.1f} ms/segment   index {fast_cpu * 1e3:7.3f} ms/segment   "
          f"ratio {slow_cpu / fast_cpu:7.0f}x")
    if not per_server_caches:
        return
    t0, c0 = time.perf_counter(), time.process_time()
    caches = [ServerCostCache() for _ in range(servers)]
    for k in range(servers):
        caches[k].extend([segments[i] for i in np.flatnonzero(owner == k).tolist()])
        caches[k].cost_of(probes[0])  # the first query builds its profiles: part of building the cache
    build, build_cpu = time.perf_counter() - t0, time.process_time() - c0

    def by_cache(p: SegmentDescriptor) -> int:
        return int(np.argmin([c.cost_of(p) for c in caches]))

    walks = _per_call(lambda: [by_cache(p) for p in probes[:5]], 1) / 5
    agree = all(names[by_cache(p)] == index.cheapest(p) for p in probes[:5])
    print(f"  one cache query per server: {walks * 1e3:7.2f} ms/segment   ratio {slow / walks:5.1f}x   "
          f"same choice: {agree}   ({servers} ServerCostCache built in {build:5.1f} s, {build_cpu:5.1f} s of CPU)")


def main() -> None:
    """``--quick``: smaller sizes; ``--only choose|queries|updates``: one section; ``--sizes 1000,1000000``: the
    query section's server sizes."""
    quick = "--quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    sizes = [1_000, 10_000, 100_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    if "--sizes" in sys.argv:
        sizes = [int(n) for n in sys.argv[sys.argv.index("--sizes") + 1].split(",")]
    if only in (None, "queries"):
        queries(sizes, trees="--no-trees" not in sys.argv)
    if only in (None, "updates"):
        updates(100_000 if quick else 1_000_000, trees="--no-trees" not in sys.argv)
    if only in (None, "choose"):
        caches = "--no-caches" not in sys.argv
        choose_server(30, 300_000, caches) if quick else choose_server(300, 3_000_000, caches)


if __name__ == "__main__":
    main()
