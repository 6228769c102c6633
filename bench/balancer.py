"""Benchmark: the Spark balancer's micro-batches and the planner's balancing run, each against its O(cluster) baseline.

**Balancing run** (no Spark; ``--balancing-sizes``, default 100k and 1M hourly segments, one replica, 20 servers of
which 2 are new and empty, ``maxSegmentsToMove`` 100): :func:`coordinator.planner.planner.balance_state` on a live
placement state whose cost caches are warm (as the planner agent and the Spark job keep them), against the same run
with the candidate selection it replaced (list every used segment of the tier with an active holder, sort, permute
them all: ``_ListingRun`` below), measured next on the same state (the first run's moves queued; two servers empty
enough that both runs make their 100 moves).

**Rolling batches without Spark** (``--rolling-sizes``, default the Spark sizes): the stateful processor's logic
on the live placement (fold the batch, balance, the store writes), CPU time per batch for the same steps of 100
records; CPU time, unlike the Spark figures, stays meaningful on a machine loaded far past its cores.

**Spark** (``--spark-sizes``, default 10k and 100k segments on 20 servers, one new and empty): the job on a real
local broker and local Spark, the placement arriving as events. After the first batch (every record of the cluster
into the state) the benchmark sends steps of 100 records (50 segments each unannounced by one server and announced
by another, as a historical restart would) and an in-process executor answers the job's moves; reported per size:
the first batch, the median trigger time and the median time inside the stateful processor of the triggered batches
that held a step, and moves/s. Baseline in the same run: the pure planner's balancing stage on the same placement
as a snapshot (:func:`coordinator.planner.planner.balance_tier`: state and cost caches built per run, what every
batch cost before rolling state), and the ratio of the sizes.

Each batch's line also shows where Spark's time went (its progress phases, the state store's commit).
``--changelog off`` runs the state store's commit as before changelog checkpointing (a snapshot and upload
of the database's new files per batch) for comparison.

Run: ``.venv/bin/python -m bench.balancer`` (``--quick``: 10k/100k balancing, 2k/10k Spark, fewer steps).
Uses the broker named by ``SEGCOORD_BOOTSTRAP``, else starts a local one in a temp dir.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.incremental import build
from coordinator.placement.state import PlacementState
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import _ID, _Run, balance_state, balance_tier
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Envelope, Topics
from events.registry import Event
from events.schema import Instant
from events.segment import SegmentId
from events.segments import SegmentAnnounced, SegmentUnannounced
from events.topics import COMMANDS
from streaming.admin import create_topics
from streaming.balancer import job
from streaming.balancer.batch import run_batch
from streaming.balancer.placement import BalancerPlacement
from streaming.consumer import EventConsumer
from streaming.producer import EventProducer
from tests.unit.balancer.balancer_events import T0, TIER, ClusterSpec, Executor

STEP = 100  # records per step after the first batch
REPEATS = 3  # indexed balancing runs per size (the median is reported)
CONFIG = {"smartSegmentLoading": False, "maxSegmentsToMove": 100, "maxSegmentsInNodeLoadingQueue": 0}


class _ListingRun(_Run):
    """The candidate selection before the fold's index: every used segment of the tier with an active holder,
    listed and sorted at the start of the run, then a full permutation of them (O(cluster) per run)."""

    def balance_candidates(self, tier: str) -> Sequence[SegmentId]:
        cached = self._listed.get(tier) if hasattr(self, "_listed") else None
        if cached is not None:
            return cached
        out = [sid for sid in sorted(self.p.used, key=_ID) if self.movable(sid, tier) and any(
            self.p.tier_of[n] == tier and n not in self.p.decommissioning for n in self.p.holders.get(sid, ()))]
        np.random.default_rng(0).permutation(len(out))  # what ordering them all cost
        self._listed = {**getattr(self, "_listed", {}), tier: out}
        return out


def balancing_state(n_segments: int, n_servers: int = 20, new: int = 2) -> PlacementState:
    """One replica of each segment on the first ``n_servers - new`` servers; ``new`` empty ones to balance onto."""
    st = build(n_segments, n_servers, T0, replicas=1, empty=new, start=T0)
    st.set_rules("_default", [{"type": "loadForever", "tieredReplicants": {TIER: 1}}], "rules")
    st.set_config(CONFIG)
    st.touched_segments, st.dirty = set(), set()
    return st


def balancing(n_segments: int) -> None:
    st = balancing_state(n_segments)
    t0 = time.perf_counter()
    for name in sorted(st.tier_of):
        st.cache(name)
    warm = time.perf_counter() - t0
    now = T0
    times = []
    for r in range(REPEATS):  # successive runs (other seeds) on the state the previous ones left: the median
        gc.collect()  # the build's garbage is not the run's (a long-running service collected it long ago)
        t0 = time.perf_counter()
        new = balance_state(st, TIER, now=now, run=1 + r)
        times.append(time.perf_counter() - t0)
    new_s = statistics.median(times)
    gc.collect()
    run = _ListingRun(st, now=now, run=1 + REPEATS, start=now, compute_cost=False, only_tier=TIER, scope=set(),
                      mark_overshadowed=False)
    t0 = time.perf_counter()
    run.balance(7, run.shares["balancing"], True, record=True)
    run.balance_blocked(10)
    run.balance(11, None, False, record=False)
    old_s = time.perf_counter() - t0
    moves = sum(1 for c in new.commands if c.type == "move")
    old_moves = sum(1 for c in run.commands if c.type == "move")
    print(f"balancing run, {n_segments:>9,} segments on 20 servers (caches built once: {warm:.1f} s): "
          f"{moves} moves in {new_s * 1e3:,.0f} ms (median of {REPEATS}; {moves / new_s:,.0f} moves/s); "
          f"listing baseline "
          f"{old_moves} moves in {old_s * 1e3:,.0f} ms; baseline / indexed = {old_s / new_s:,.1f}x", flush=True)


def pure(spec: ClusterSpec) -> tuple[float, int]:
    placement = spec.placement()
    segments = {s.id: s for held in placement.values() for s in held}
    view = ClusterView(
        now=spec.events()[-1].occurred_at,
        servers={n: ServerState(Server(n, TIER, 10**12), frozenset(s.id for s in held))
                 for n, held in placement.items()},
        segments=segments, used=frozenset(segments),
        rules=RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {TIER: 1}}]}),
        config=DynamicConfig.parse(spec.config), run=1)
    t0 = time.perf_counter()
    result = balance_tier(view, TIER)
    return time.perf_counter() - t0, len(result.commands)


def rolling(n_segments: int, steps: int) -> tuple[float, float]:
    """The job's per-batch logic without Spark (:func:`streaming.balancer.batch.run_batch` and the store writes it
    names, on the live placement, as the stateful processor runs them): the first batch (the whole cluster), then
    ``steps`` batches of the previous batch's moves, their answers and STEP relocation records. CPU seconds of
    this process, which a loaded machine inflates far less than wall time: (first batch, median step)."""
    spec = _spec(n_segments)
    placement = BalancerPlacement()
    executor = Executor.of(spec.placement())
    t0 = time.process_time()
    pending = run_batch(placement, spec.events(), 0, [TIER]).commands
    placement.changed()
    first = time.process_time() - t0
    rng, lock, times = random.Random(11), threading.Lock(), []
    for step in range(1, steps + 1):
        envelopes = pending + executor.answer(pending) + _relocations(executor, rng, lock, step)
        gc.collect()
        t0 = time.process_time()
        pending = run_batch(placement, envelopes, step, [TIER]).commands
        placement.changed()
        times.append(time.process_time() - t0)
    median = statistics.median(times)
    print(f"rolling batches without Spark, {n_segments:,} segments on 20 servers: first batch {first:.1f} s CPU; "
          f"steps of {len(envelopes)} records (median of {steps}): {median * 1e3:.0f} ms CPU per batch", flush=True)
    return first, median


def _spec(n_segments: int) -> ClusterSpec:
    return ClusterSpec(servers=19, new_servers=1, data_sources=20, hours=n_segments // 20,
                       config={**CONFIG, "maxSegmentsToMove": 10})


def _relocations(executor: Executor, rng: random.Random, lock: threading.Lock, step: int) -> list[Envelope[Event]]:
    """STEP records: STEP / 2 segments each unannounced by one old server and announced by another."""
    out: list[Envelope[Event]] = []
    with lock:
        names = sorted(n for n, held in executor.held.items() if held)
        for i in range(STEP // 2):
            a, b = rng.sample(names, 2)
            text = rng.choice(sorted(executor.held[a]))
            seg = executor.held[a].pop(text)
            executor.held[b][text] = seg
            at = Instant(T0 + 1_000_000 + step)
            out.append(Envelope(SegmentUnannounced(server=a, segment_id=text), f"r{step}-{i}-u", at, seg.data_source))
            out.append(Envelope(SegmentAnnounced(server=b, segment=seg), f"r{step}-{i}-a", at, seg.data_source))
    return out


def spark_batches(spec: ClusterSpec, bootstrap: str, steps: int, work: Path, spark: Any) -> list[dict[str, float]]:
    """The first batch, then one row per step (the triggered batch that folded the step's records)."""
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}.")
    create_topics(bootstrap, topics, partitions=1)
    producer = EventProducer(bootstrap, topics)
    for env in spec.events():
        producer.send(env)
    producer.flush()
    executor = Executor.of(spec.placement())
    lock = threading.Lock()
    stop = threading.Event()

    def answer_loop() -> None:
        consumer = EventConsumer(bootstrap, topics, f"x-{uuid.uuid4().hex}", [COMMANDS])
        out = EventProducer(bootstrap, topics)
        try:
            while not stop.is_set():
                records = consumer.poll(timeout=0.2)
                with lock:
                    answers = executor.answer([r.envelope for r in records])
                for env in answers:
                    out.send(env)
                out.flush()
        finally:
            consumer.close()
            out.close()

    thread = threading.Thread(target=answer_loop, daemon=True)
    thread.start()
    metrics = work / f"metrics-{topics.prefix}jsonl"

    def start() -> Any:
        return job.start(spark, bootstrap, topics, work / f"ck-{topics.prefix}", trigger_seconds=0.5,
                         metrics_path=metrics)

    query = start()
    rows: list[dict[str, float]] = []
    rng = random.Random(11)
    restarts = 0
    try:
        deadline = time.monotonic() + 1800
        last = -1
        while len(rows) < steps + 1 and time.monotonic() < deadline:
            failure = query.exception()
            if failure is not None:
                # Spark gives a Python worker it starts on the driver 10 s (hard-coded) to connect back; on a
                # machine loaded far past its cores that start can take longer and the query dies before any
                # batch. The checkpoint is intact: start again from it (a real deployment's supervisor does too).
                if "connect back" not in str(failure) or restarts >= 30:
                    break
                restarts += 1
                print(f"  query failed to start its Python worker in time (load); restart {restarts} from the "
                      f"checkpoint", flush=True)
                query = start()
                continue
            time.sleep(0.2)
            if not metrics.exists():
                continue
            summaries = [orjson.loads(line) for line in metrics.read_bytes().splitlines()]
            fresh = [x for x in summaries if x["batch"] > last and x["triggered"] and x["records"] >= STEP]
            if not fresh:
                continue
            s = fresh[0]
            last = max(x["batch"] for x in summaries)
            progress = None
            wait_until = time.monotonic() + 120  # the summary is written inside the batch, its progress after it
            while progress is None and time.monotonic() < wait_until and query.exception() is None:
                progress = {p["batchId"]: p for p in query.recentProgress}.get(s["batch"])
                time.sleep(0.05)
            trigger = progress["durationMs"]["triggerExecution"] / 1000 if progress else float("nan")
            restore, store = s.get("restoreSeconds", float("nan")), s.get("storeSeconds", float("nan"))
            rows.append({"batch": s["batch"], "trigger_s": trigger, "python_s": s["seconds"], "moves": s["moves"],
                         "records": s["records"], "cache_hit": float(s["cacheHit"]), "restore_s": restore})
            print(f"  batch {s['batch']}: {trigger:.2f} s (stateful processor: batch {s['seconds']:.3f} s, "
                  f"restore {restore:.3f} s, store writes {store:.3f} s), "
                  f"{s['records']} records, {s['moves']} moves, live placement {'hit' if s['cacheHit'] else 'miss'}"
                  f"; {_phases(progress)}", flush=True)
            for env in _relocations(executor, rng, lock, len(rows)):
                producer.send(env)
            producer.flush()
    finally:
        query.stop()
        stop.set()
        thread.join(30)
    return rows


def _phases(progress: dict[str, Any] | None) -> str:
    """Where a micro-batch's time went, from Spark's progress: its phases and the state store's commit."""
    if not progress:
        return "no progress"
    parts = [f"{k} {v / 1000:.2f} s" for k, v in sorted(progress["durationMs"].items())
             if k != "triggerExecution" and v >= 50]
    for op in progress.get("stateOperators", []):
        parts.append(f"state rows {op.get('numRowsTotal')}, commit {op.get('commitTimeMs', 0) / 1000:.2f} s")
        custom = op.get("customMetrics", {})
        parts += [f"{k} {v / 1000:.2f} s" for k, v in sorted(custom.items())
                  if ("Latency" in k or k.endswith("TimeMs")) and v >= 50]
    return "; ".join(parts)


def spark_size(n_segments: int, bootstrap: str, steps: int, work: Path, spark: Any) -> dict[str, float]:
    spec = _spec(n_segments)
    pure_s, pure_moves = pure(spec)
    print(f"spark, {n_segments:,} segments on 20 servers; baseline: the pure balancing stage on a snapshot "
          f"(state and caches built per run) {pure_s:.2f} s, {pure_moves} moves", flush=True)
    rows = spark_batches(spec, bootstrap, steps, work, spark)
    if len(rows) < 2:
        raise SystemExit("spark: too few batches finished")
    first, rest = rows[0], rows[1:]
    out = {"first_s": first["trigger_s"], "trigger_s": statistics.median(r["trigger_s"] for r in rest),
           "python_s": statistics.median(r["python_s"] for r in rest),
           "records": statistics.median(r["records"] for r in rest),
           "moves": statistics.median(r["moves"] for r in rest), "pure_s": pure_s}
    hits = sum(1 for r in rest if r["cache_hit"])
    print(f"  first batch ({int(first['records'])} records into state): {first['trigger_s']:.2f} s; steady batches "
          f"(median of {len(rest)}, {out['records']:.0f} records, {hits} on the live placement): "
          f"{out['trigger_s']:.2f} s per micro-batch, "
          f"{out['python_s'] * 1e3:.0f} ms in the stateful processor, {out['moves']:.0f} moves, "
          f"{out['moves'] / out['trigger_s']:.1f} moves/s; baseline / micro-batch = "
          f"{pure_s / out['trigger_s']:.2f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--balancing-sizes", default=None)
    parser.add_argument("--spark-sizes", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--rolling-sizes", default=None,
                        help="segment counts for the rolling batches without Spark (default: the Spark sizes)")
    parser.add_argument("--no-rolling", action="store_true")
    parser.add_argument("--changelog", choices=("on", "off"), default="on",
                        help="RocksDB changelog checkpointing (on: what the job runs; off: the commit as before)")
    args = parser.parse_args()
    balancing_sizes = args.balancing_sizes or ("10000,100000" if args.quick else "100000,1000000")
    spark_sizes = args.spark_sizes or ("2000,10000" if args.quick else "10000,100000")
    steps = args.steps or (4 if args.quick else 8)
    for n in (int(x) for x in balancing_sizes.split(",")):
        balancing(n)
    if not args.no_rolling:
        rolling_sizes = [int(x) for x in (args.rolling_sizes or spark_sizes).split(",")]
        rolled = [rolling(n, 2 * steps) for n in rolling_sizes]
        print(f"rolling batches without Spark {rolling_sizes[-1]:,} / {rolling_sizes[0]:,} segments: "
              f"{rolled[-1][1] / rolled[0][1]:.2f}x per batch (target within 2x); first batch "
              f"{rolled[-1][0] / rolled[0][0]:.1f}x", flush=True)
    if args.no_spark:
        return
    bootstrap = os.environ.get("SEGCOORD_BOOTSTRAP")
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        if not bootstrap:
            from streaming.local_broker import LocalBroker

            broker = LocalBroker(Path(tmp) / "kafka")
            bootstrap = broker.start()
        from streaming.spark import local_spark

        spark = local_spark("segcoord-bench-balancer")
        spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                       "true" if args.changelog == "on" else "false")
        print(f"spark: RocksDB changelog checkpointing {args.changelog}", flush=True)
        try:
            sizes = [int(x) for x in spark_sizes.split(",")]
            results = [spark_size(n, bootstrap, steps, Path(tmp), spark) for n in sizes]
        finally:
            spark.stop()
            if broker is not None:
                broker.stop()
    small, big = results[0], results[-1]
    print(f"spark steady micro-batch {sizes[-1]:,} / {sizes[0]:,} segments: "
          f"{big['trigger_s'] / small['trigger_s']:.2f}x "
          f"(stateful processor {big['python_s'] / small['python_s']:.2f}x)"
          f"; first batch {big['first_s'] / small['first_s']:.1f}x; pure snapshot baseline "
          f"{big['pure_s'] / small['pure_s']:.1f}x")


if __name__ == "__main__":
    main()
