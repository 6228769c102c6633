"""Benchmark: one planning run at 300 servers, 1M segments, 2 tiers, 2 replicas, after 10% of servers died.

Segments are hourly, over 100 data sources; the rule loads one replica on each of
two tiers (hot, cold: 2 replicas in all) and every segment starts fully loaded.
Then 30 servers (15 per tier) disappear and one run of the planner decides the
reloads, with Druid's defaults (smart segment loading, round-robin assignment).
Balancing needs each tier's cost index (:class:`~coordinator.balancer.cost_index.ClusterCostIndex`, one
query per candidate for every server of the tier); the time to build them is reported apart, with the
run's wall time, its decisions, and decisions per second.

By default the run is split as the planner agent runs it: the full run without the balancing stages
(what a server, rule or config change costs before the next event is planned), then the balancing run in
slices of ``DEFAULT_SLICE_DRAWS`` candidates (total, moves, and the slice times: a slice is the longest an
event waits). ``--one-run`` runs every stage in one ``plan()`` run instead (the reference; the figure of
earlier sessions).

Baseline in the same run: a balancing candidate's cost query, the tier's index (one query for every
server) against the per-server cost caches (one tree walk per server: the planner before the index), over
the same ``--baseline-candidates`` candidates (default 100) of the hot tier after the run; building those
caches is timed apart.

The run's figure includes building the run (every used segment's rule target). As in the worker
(:class:`~streaming.service.heap.FrozenHeap`), the built state is frozen out of the cyclic collector's reach
before the run (``--no-freeze``: not). Beside wall time the bench prints the process's CPU time: on a shared
machine the CPU seconds move far less with other jobs than the wall seconds do.

The run's decisions are printed as a digest (SHA-256 of the commands, marks, deferred segments and metrics):
two builds of the planner decide alike on this scenario exactly when their digests are equal.
``--full-only`` stops after the full run (no balancing run, no baseline): what a comparison of the full run
between two builds needs, at a fraction of the time.

``--sweep`` then builds the same state again (the first one freed) and takes the same full run as the planner
agent's timer takes the periodic one: a :class:`~coordinator.planner.sweep.Sweep` in slices of ``SWEEP_CHUNK``
segments (``--chunk N``), each a scoped run. It prints the sweep's total (wall and CPU, against the full run's in
the same process: the ratio), its slices (median, p99, and the longest: what a publish waits behind at most) and
the longest slice as a fraction of the full run's wall time (baseline in the same run: the full run).

Run: ``.venv/bin/python -m bench.planner`` (``--quick``: 60 servers, 100k segments; ``--one-run``;
``--baseline-candidates N``, 0: none; ``--no-freeze``; ``--full-only``; ``--sweep [--chunk N]``).
"""

from __future__ import annotations

import gc
import hashlib
import statistics
import sys
import time

from coordinator.planner.balancing import DEFAULT_SLICE_DRAWS, BalancingRun
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import _Run, plan_state
from coordinator.planner.sweep import SWEEP_CHUNK, Sweep
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Interval, SegmentDescriptor, parse_instant
from streaming.service.heap import FrozenHeap

HOUR = 3_600_000


def main() -> None:
    quick = "--quick" in sys.argv
    split = "--one-run" not in sys.argv
    n_servers, n_segments, sources = (60, 100_000, 20) if quick else (300, 1_000_000, 100)
    start = parse_instant("2024-01-01")
    per_source = n_segments // sources
    t0 = time.perf_counter()
    segments = {}
    for d in range(sources):
        for h in range(per_source):
            seg = SegmentDescriptor(f"ds{d}", Interval(start + h * HOUR, start + (h + 1) * HOUR), "v1", 0, 1 << 20)
            segments[seg.id] = seg
    ids = sorted(segments)
    tiers = {"hot": [f"hot{i:03d}" for i in range(n_servers // 2)],
             "cold": [f"cold{i:03d}" for i in range(n_servers // 2)]}
    loaded: dict[str, set] = {name: set() for names in tiers.values() for name in names}
    for names in tiers.values():
        for i, sid in enumerate(ids):
            loaded[names[i % len(names)]].add(sid)
    dead = {name for names in tiers.values() for name in names[: len(names) // 10]}
    servers = {name: ServerState(Server(name, tier, 1 << 50), frozenset(loaded[name]))
               for tier, names in tiers.items() for name in names if name not in dead}
    rules = RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1, "cold": 1}}]})
    view = ClusterView(parse_instant("2026-01-01"), servers, segments, frozenset(ids), rules, DynamicConfig())
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = view.placement()
    placement_s = time.perf_counter() - t0
    for tier in sorted(tiers):
        state.tier_index(tier)
    caches = time.perf_counter() - t0
    t0 = time.perf_counter()
    if "--no-freeze" not in sys.argv:
        FrozenHeap().start()  # the worker's heap policy once its state is loaded
    frozen = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    run = _Run(state, now=view.now, run=view.run, start=view.coordinator_start, compute_cost=False,
               balancing=not split)
    result = run.run()
    planning, planning_cpu = time.perf_counter() - t0, time.process_time() - c0
    decisions = result.metrics["decisions"]
    assert isinstance(decisions, int)
    loads = sum(1 for c in result.commands if c.type == "load")
    moves = sum(1 for c in result.commands if c.type == "move")
    print(f"{len(servers)} live servers ({len(dead)} died), {len(ids):,} segments x 2 tiers, one replica each")
    print(f"  setup {setup:6.1f} s   placement state {placement_s:6.1f} s   "
          f"tier cost indexes {caches - placement_s:6.1f} s "
          f"(both built once and kept current by the planner agent); heap frozen in {frozen:.1f} s")
    what = "stages 0-6, 8, 9, 12, 13 (the planner agent's full run)" if split else "one run of every stage (plan())"
    print(f"  {what} {planning:6.2f} s ({planning_cpu:.2f} s CPU): {decisions:,} decisions ({loads:,} loads, "
          f"{moves:,} moves), {decisions / planning:,.0f} decisions/s   "
          f"target < 10 s: {'met' if planning < 10 else 'missed'}")
    digest = hashlib.sha256()
    for part in (result.commands, result.mark_unused, sorted(map(str, result.deferred)),
                 sorted(result.metrics.items(), key=str)):
        digest.update(repr(part).encode())
    print(f"  decisions digest {digest.hexdigest()[:16]}")
    if "--sweep" in sys.argv and split:
        del run, result, state
        gc.collect()
        sweep(view, tiers, planning, planning_cpu, decisions, _option("--chunk", SWEEP_CHUNK))
    if "--full-only" in sys.argv:
        return
    if split:  # the balancing stages as the agent takes them: one run in slices, events planned between them
        balancing = BalancingRun(state, now=view.now, run=view.run + 1, start=view.coordinator_start)
        slices: list[float] = []
        moved = 0
        t0 = time.perf_counter()
        while not balancing.done:
            began = time.perf_counter()
            moved += len(balancing.step(view.now, DEFAULT_SLICE_DRAWS).commands)
            slices.append(time.perf_counter() - began)
        total = time.perf_counter() - t0
        slices.sort()
        print(f"  balancing run (stages 7, 10, 11) in {len(slices):,} slices of {DEFAULT_SLICE_DRAWS} candidates: "
              f"{total:6.2f} s for {moved:,} moves ({moved / max(total, 1e-9):,.0f} moves/s); a slice (the longest "
              f"an event waits for one): median {1000 * statistics.median(slices):.1f} ms, "
              f"p99 {1000 * slices[int(0.99 * (len(slices) - 1))]:.1f} ms, max {1000 * slices[-1]:.1f} ms")
        print(f"  both: {planning + total:6.1f} s (one run of every stage did the same work before)")
    print(f"  with the cost indexes' build: {planning + caches:6.1f} s")
    baseline(run, _option("--baseline-candidates", 100))


def sweep(view: ClusterView, tiers: dict[str, list[str]], full_s: float, full_cpu: float, full_decisions: int,
          chunk: int) -> None:
    """The same full run as a sweep in slices of ``chunk`` segments, on the same state built again."""
    t0 = time.perf_counter()
    state = view.placement()
    for tier in sorted(tiers):
        state.tier_index(tier)
    built = time.perf_counter() - t0
    if "--no-freeze" not in sys.argv:
        FrozenHeap().start()
    run = Sweep(run=view.run, started=view.now)
    slices: list[float] = []
    decisions = loads = marking = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while not run.done:
        began = time.perf_counter()
        piece = run.next_slice(state, chunk)
        if piece.mark_sources is not None:
            state.mark_all = False  # the whole-cluster marking under way, source by source (as the agent does)
        part = plan_state(state, view.now, view.run, view.coordinator_start, False, balance=False,
                          scope=piece.scope, mark_overshadowed=piece.mark_sources is not None, drained=run.drained,
                          mark_sources=piece.mark_sources)
        slices.append(time.perf_counter() - began)
        marking += piece.mark_sources is not None
        decisions += len(part.commands) + len(part.mark_unused)
        loads += sum(1 for c in part.commands if c.type == "load")
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    longest = max(slices)
    at = slices.index(longest)
    kind = "marking" if at >= len(slices) - marking else "with the tail" if at == len(slices) - marking - 1 else \
        "planning"
    slices.sort()
    print(f"  the same as a sweep (state built again in {built:.1f} s) in {len(slices):,} slices of {chunk:,} "
          f"segments: {total:6.2f} s ({cpu:.2f} s CPU), {decisions:,} decisions ({loads:,} loads); against the full "
          f"run: wall {total / full_s:.2f}x, CPU {cpu / full_cpu:.2f}x, decisions {decisions - full_decisions:+,}")
    print(f"  a slice ({marking} of them marking): median {1000 * statistics.median(slices):.1f} ms, "
          f"p99 {1000 * slices[int(0.99 * (len(slices) - 1))]:.1f} ms, max {1000 * longest:.1f} ms = "
          f"{longest / full_s:.4f} of the full run's {full_s:.2f} s (the longest a publish waits behind: slice "
          f"{at + 1}, {kind})")


def _option(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def baseline(run: _Run, n: int) -> None:
    """One candidate's cost query both ways, on the same ``n`` balancing candidates of the hot tier."""
    if n <= 0:
        return
    state = run.p
    names = state.tiers["hot"]
    t0 = time.perf_counter()
    for name in names:
        state.cache(name)
    built = time.perf_counter() - t0
    candidates = [sid for sid in state.balanceable["hot"][:: max(1, len(state.balanceable["hot"]) // n)]][:n]
    timings = {}
    for per_server in (True, False):
        run.per_server_caches = per_server
        t0 = time.perf_counter()
        for sid in candidates:
            holders = [h for h in state.holders.get(sid, ()) if state.tier_of[h] == "hot"]
            run.server_costs("hot", sid, holders, [n for n in names if n not in holders])
        timings[per_server] = (time.perf_counter() - t0) / len(candidates)
    run.per_server_caches = False
    print(f"  baseline, one balancing candidate's costs on the hot tier's {len(names)} servers: per-server cost "
          f"caches {timings[True] * 1e3:.2f} ms (tree walks; the caches built in {built:.1f} s), tier index "
          f"{timings[False] * 1e3:.2f} ms (one query): ratio index / caches {timings[False] / timings[True]:.3f}")

if __name__ == "__main__":
    main()
