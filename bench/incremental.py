"""Benchmark: the incremental planner's cost for one published segment, against a full run, as the cluster grows.

For each size (10k, 100k, 1M hourly segments over 10 data sources, 2 replicas on ``_default_tier``,
Druid's default rule, fully loaded on 10 servers at 10k / 100k and 300 servers at 1M) the placement state
is built once; then ``--publishes`` new segments are published one at a time, each folded in and planned
with the segment as the run's scope (what the planner agent does per publish), and the median and p99 of
that fold + plan are reported. Baseline in the same run: one full planning run over the same state (every
segment looked at: what every publish cost before), and the ratio full / incremental.
Also: a balancing run (the timer's) limited to 100 moves, at each size: the first builds the tier's cost index
(once per process: the planner agent keeps it current), the next one is what a timer run costs. Baseline in the
same run: the same two runs costed by the per-server cost caches (a tree walk per server and candidate: the
planner before the index), and the ratio of the warm runs.

Run: ``.venv/bin/python -m bench.incremental [--sizes 10000,100000,1000000] [--publishes 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from coordinator.placement.records import ServerFacts
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import plan_state
from coordinator.rules.dynamic_config import DynamicConfig
from events import Interval, SegmentDescriptor, parse_instant
from events.envelope import Envelope
from events.schema import Instant
from events.segments import SegmentsPublished

HOUR = 3_600_000
T0 = parse_instant("2024-01-01")
NOW = parse_instant("2026-01-01")


def build(n_segments: int, n_servers: int, now: int = NOW, *, replicas: int = 2, empty: int = 0,
          start: int = T0) -> PlacementState:
    """A placement of ``n_segments`` hourly segments (10 data sources from ``start``), each loaded on ``replicas``
    of the first ``n_servers - empty`` servers (round robin); the last ``empty`` servers hold nothing."""
    st = PlacementState()
    names = [f"h{i:03d}" for i in range(n_servers)]
    for name in names:
        st.set_server(name, ServerFacts("_default_tier", 1 << 50))
    holding = n_servers - empty
    per_source = n_segments // 10
    k = 0
    for d in range(10):
        for h in range(per_source):
            seg = SegmentDescriptor(f"ds{d}", Interval(start + h * HOUR, start + (h + 1) * HOUR), "v1", 0, 1 << 20)
            st.learn(seg, True)
            for r in range(replicas):
                st.hold(names[(k + r) % holding], seg.id, True)
            k += 1
    st.touched_segments = set()
    st.dirty = set()
    st.start = st.last_event_at = now
    return st


def measure(n_segments: int, publishes: int) -> None:
    n_servers = 300 if n_segments >= 1_000_000 else 10
    t0 = time.perf_counter()
    st = build(n_segments, n_servers)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = plan_state(st, NOW, 1, NOW, balance=False, mark_overshadowed=False)
    full_s = time.perf_counter() - t0
    assert not full.commands, "the preloaded cluster should need nothing"
    costs = []
    per_source = n_segments // 10
    for i in range(publishes):
        seg = SegmentDescriptor("ds0", Interval(T0 + (per_source + i) * HOUR, T0 + (per_source + i + 1) * HOUR),
                                "v1", 0, 1 << 20)
        env = Envelope(SegmentsPublished(task_id="t", segments=(seg,)), f"p{i}", Instant(NOW), "ds0")
        t0 = time.perf_counter()
        touched = st.evolve(env)
        result = plan_state(st, NOW, 2 + i, NOW, balance=False, scope=touched.segments, mark_overshadowed=False)
        costs.append(time.perf_counter() - t0)
        assert sum(1 for c in result.commands if c.type == "load") == 2, result.commands
    costs.sort()
    p50, p99 = statistics.median(costs), costs[min(len(costs) - 1, int(len(costs) * 0.99))]
    st.set_config({"maxSegmentsToMove": 100, "smartSegmentLoading": False})
    st.config = DynamicConfig().updated({"maxSegmentsToMove": 100, "smartSegmentLoading": False})
    t0 = time.perf_counter()
    balancing = plan_state(st, NOW, 10_000, NOW, balance=True, scope=set(), mark_overshadowed=False)
    bal_s = time.perf_counter() - t0  # builds every server's cost cache first (once per process, then kept)
    t0 = time.perf_counter()
    warm = plan_state(st, NOW, 10_001, NOW, balance=True, scope=set(), mark_overshadowed=False)
    warm_s = time.perf_counter() - t0
    moves = sum(1 for c in balancing.commands if c.type == "move")
    warm_moves = sum(1 for c in warm.commands if c.type == "move")
    t0 = time.perf_counter()
    plan_state(st, NOW, 10_002, NOW, balance=True, scope=set(), mark_overshadowed=False, per_server_caches=True)
    trees_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    trees = plan_state(st, NOW, 10_003, NOW, balance=True, scope=set(), mark_overshadowed=False,
                       per_server_caches=True)
    trees_s = time.perf_counter() - t0
    tree_moves = sum(1 for c in trees.commands if c.type == "move")
    print(f"{n_segments:>9,} segments x 2 on {n_servers} servers (setup {setup:.1f} s): one publish "
          f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms; full run {full_s * 1e3:,.0f} ms; "
          f"full / incremental p50 = {full_s / p50:,.0f}x; balancing run {bal_s:.2f} s with the tier index's build "
          f"({moves} moves), next run {warm_s:.2f} s ({warm_moves} moves); baseline per-server caches "
          f"{trees_cold:.2f} s with their build, next run {trees_s:.2f} s ({tree_moves} moves): "
          f"index / caches = {warm_s / trees_s:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--publishes", type=int, default=200)
    args = parser.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        measure(n, args.publishes)


if __name__ == "__main__":
    main()
