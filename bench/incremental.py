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

Also (``--burst N``): a burst of N publishes x 2 loads (each planned as the agent plans a publish, its loads
answered), then the tier's cost index refreshed (``tier_index``: the burst's 2N changes) and a balancing run of
up to 100 moves, at ``--burst-sizes`` segments (10 servers, 2 of them empty so that the run has moves to make;
300 servers at 1M), ``--rounds`` times, CPU and wall time of refresh + run. Baseline in the same run
(``--baseline-tree PATH``, e.g. a worktree of the code before the change): the same measure in a process
importing that tree, alternated with this tree's, each in its own process.

Run: ``.venv/bin/python -m bench.incremental [--sizes 10000,100000,1000000] [--publishes 200]``;
``.venv/bin/python -m bench.incremental --burst 2000 [--burst-sizes 100000] [--rounds 3] [--baseline-tree PATH]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from coordinator.placement.records import ServerFacts
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import plan_state
from coordinator.rules.dynamic_config import DynamicConfig
from events import Interval, SegmentDescriptor, parse_instant
from events.envelope import Envelope
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished

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


def measure_burst(n_segments: int, publishes: int, rounds: int, relist: bool = False) -> None:
    """Bursts of ``publishes`` publishes x 2 answered loads, each followed by the tier index's refresh and a
    balancing run of up to 100 moves: one line per round (CPU and wall seconds of refresh + run). ``relist``:
    every other round (the first included) drops the index before the refresh, so it is built again from every
    server's projected segments: what the code before the bulk update did after such a burst (a baseline in
    the same process, on the same state, for sizes where two processes would take too long)."""
    n_servers = 300 if n_segments >= 1_000_000 else 10
    st = build(n_segments, n_servers, empty=2)
    st.set_config({"maxSegmentsToMove": 100, "smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 0})
    st.config = DynamicConfig().updated({"maxSegmentsToMove": 100, "smartSegmentLoading": False,
                                         "maxSegmentsInNodeLoadingQueue": 0})
    gc.collect()
    gc.freeze()  # the state out of the collector's reach, as the worker's heap policy keeps it
    run = 1
    plan_state(st, NOW, run, NOW, balance=True, scope=set(), mark_overshadowed=False)  # builds the tier index
    next_hour = n_segments // 10
    for r in range(rounds):
        for _ in range(publishes):
            seg = SegmentDescriptor("ds0", Interval(T0 + next_hour * HOUR, T0 + (next_hour + 1) * HOUR), "v1", 0,
                                    1 << 20)
            next_hour += 1
            run += 1
            touched = st.evolve(Envelope(SegmentsPublished(task_id="t", segments=(seg,)), f"p{run}", Instant(NOW),
                                         "ds0"))
            result = plan_state(st, NOW, run, NOW, balance=False, scope=touched.segments, mark_overshadowed=False)
            for c in result.commands:  # answered at once, as a historical would: loaded, still projected
                if c.type == "load":
                    st.evolve(Envelope(SegmentAnnounced(server=c.server, segment=seg), f"a{c.command_id}",
                                       Instant(NOW), "ds0", c.command_id))
        gc.collect()
        run += 1
        baseline = relist and r % 2 == 0
        if baseline:
            st.tier_indexes.pop("_default_tier")
            st._index_delta.pop("_default_tier", None)
        cpu, wall = time.process_time(), time.perf_counter()
        st.tier_index("_default_tier")
        refresh_cpu, refresh_wall = time.process_time() - cpu, time.perf_counter() - wall
        balancing = plan_state(st, NOW, run, NOW, balance=True, scope=set(), mark_overshadowed=False)
        total_cpu, total_wall = time.process_time() - cpu, time.perf_counter() - wall
        moves = sum(1 for c in balancing.commands if c.type == "move")
        print(f"burst {n_segments:,} segments x 2 on {n_servers} servers, round {r + 1}"
              f"{' (relisted: the baseline)' if baseline else ''}: {publishes} publishes x 2 "
              f"loads, then refresh + balancing run ({moves} moves): {total_cpu:.3f} s CPU ({total_wall:.3f} s "
              f"wall), of which the index refresh {refresh_cpu:.3f} s CPU ({refresh_wall:.3f} s wall)", flush=True)


def _burst_in(tree: Path, n_segments: int, publishes: int, rounds: int) -> list[float]:
    """:func:`measure_burst` in a process importing ``tree``'s code (this file run against it): its CPU figures."""
    argv = ["-", "--burst", str(publishes), "--burst-sizes", str(n_segments), "--rounds", str(rounds), "--in-process"]
    script = str(Path(__file__).resolve())
    code = f"import runpy, sys; sys.argv = {argv!r}; runpy.run_path({script!r}, run_name='__main__')"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True,
                         text=True).stdout
    figures = []
    for line in out.splitlines():
        print(f"  [{tree}] {line}", flush=True)
        figures.append(float(line.split("moves): ")[1].split(" s CPU")[0]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--publishes", type=int, default=200)
    parser.add_argument("--burst", type=int, default=0, help="publishes per burst (0: the per-publish bench)")
    parser.add_argument("--burst-sizes", default="100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--relist", action="store_true",
                        help="baseline in the same process: every other round rebuilds the index from the projection")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.burst:
        for n in (int(x) for x in args.sizes.split(",")):
            measure(n, args.publishes)
        return
    for n in (int(x) for x in args.burst_sizes.split(",")):
        if args.in_process or args.baseline_tree is None:
            measure_burst(n, args.burst, args.rounds, args.relist)
            continue
        here = Path(__file__).resolve().parents[1]
        base: list[float] = []
        ours: list[float] = []
        for _ in range(2):  # alternated: baseline, this tree, baseline, this tree
            base += _burst_in(args.baseline_tree, n, args.burst, args.rounds)
            ours += _burst_in(here, n, args.burst, args.rounds)
        b, o = statistics.median(base), statistics.median(ours)
        print(f"burst at {n:,} segments, refresh + balancing run, median CPU over {len(base)} rounds: baseline "
              f"{b:.3f} s, this tree {o:.3f} s: ratio {o / b:.3f}", flush=True)


if __name__ == "__main__":
    main()
