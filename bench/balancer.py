"""Benchmark: the Spark balancer's micro-batches against the pure planner's balancing stage, same placement.

100 servers (95 holding 100k hourly segments of 20 data sources at random, 5 new and
empty), one replica, Druid's defaults (smart segment loading: up to 1000 moves per run,
unlimited queues). In the same run:

- **pure**: :func:`coordinator.planner.planner.balance_tier` on the frozen placement, as
  the planner runs it every coordinator period (its cost caches built from scratch);
- **spark**: the job on a real local broker and local Spark; the placement arrives as
  events, an in-process executor answers the commands (announce / unannounce) so every
  batch after the first is a rolling update. Reported per micro-batch: Spark's trigger
  time (``triggerExecution``), the Python time inside the stateful processor, moves.

Run: ``.venv/bin/python -m bench.balancer`` (``--quick``: 20 servers, 10k segments).
Uses the broker named by ``SEGCOORD_BOOTSTRAP``, else starts a local one in a temp dir.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import orjson

from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import balance_tier
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Topics
from events.topics import COMMANDS
from streaming.admin import create_topics
from streaming.balancer import job
from streaming.consumer import EventConsumer
from streaming.producer import EventProducer
from tests.unit.balancer.balancer_events import TIER, ClusterSpec, Executor


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


def spark_batches(spec: ClusterSpec, bootstrap: str, batches: int, work: Path) -> list[dict[str, float]]:
    from streaming.spark import local_spark

    topics = Topics(f"bench{uuid.uuid4().hex[:8]}.")
    create_topics(bootstrap, topics, partitions=1)
    producer = EventProducer(bootstrap, topics)
    for env in spec.events():
        producer.send(env)
    producer.flush()
    executor = Executor.of(spec.placement())
    stop = threading.Event()

    def answer_loop() -> None:
        consumer = EventConsumer(bootstrap, topics, f"x-{uuid.uuid4().hex}", [COMMANDS])
        out = EventProducer(bootstrap, topics)
        try:
            while not stop.is_set():
                for env in executor.answer([r.envelope for r in consumer.poll(timeout=0.2)]):
                    out.send(env)
                out.flush()
        finally:
            consumer.close()
            out.close()

    thread = threading.Thread(target=answer_loop, daemon=True)
    thread.start()
    spark = local_spark("segcoord-bench-balancer")
    metrics = work / "metrics.jsonl"
    query = job.start(spark, bootstrap, topics, work / "ck", trigger_seconds=0.5, metrics_path=metrics)
    rows: list[dict[str, float]] = []
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 1800
        while len(rows) < batches and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.5)
            progress = query.lastProgress
            if not progress or progress["batchId"] in seen or not metrics.exists():
                continue
            summaries = {s["batch"]: s for s in map(orjson.loads, metrics.read_bytes().splitlines())}
            s = summaries.get(progress["batchId"])
            if s is None or not s["triggered"]:
                continue
            seen.add(progress["batchId"])
            rows.append({"batch": progress["batchId"], "trigger_s": progress["durationMs"]["triggerExecution"] / 1000,
                         "python_s": s["seconds"], "moves": s["moves"], "records": s["records"],
                         "cache_hit": float(s["cacheHit"])})
            print(f"  spark batch {rows[-1]['batch']}: {rows[-1]['trigger_s']:.2f} s (python {s['seconds']:.2f} s),"
                  f" {s['records']} records, {s['moves']} moves, live placement {'hit' if s['cacheHit'] else 'miss'}",
                  flush=True)
    finally:
        query.stop()
        stop.set()
        thread.join(30)
        spark.stop()
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    servers, hours, batches = (20, 500, 4) if quick else (100, 5000, 6)
    spec = ClusterSpec(servers=servers - servers // 20, new_servers=servers // 20, data_sources=20, hours=hours,
                       config={})
    n = spec.data_sources * spec.hours
    print(f"balancer benchmark: {servers} servers, {n} segments, Druid's defaults (smart loading)")
    seconds, pure_moves = pure(spec)
    print(f"pure balance_tier (caches built per run): {seconds:.2f} s, {pure_moves} moves, "
          f"{pure_moves / seconds:.0f} moves/s")
    bootstrap = os.environ.get("SEGCOORD_BOOTSTRAP")
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        if not bootstrap:
            from streaming.local_broker import LocalBroker

            broker = LocalBroker(Path(tmp) / "kafka")
            bootstrap = broker.start()
        try:
            rows = spark_batches(spec, bootstrap, batches, Path(tmp))
        finally:
            if broker is not None:
                broker.stop()
    if not rows:
        print("spark: no batch finished")
        return
    first, rest = rows[0], rows[1:] or rows[:1]
    trigger = statistics.median(r["trigger_s"] for r in rest)
    python = statistics.median(r["python_s"] for r in rest)
    moves = statistics.median(r["moves"] for r in rest)
    print(f"spark first batch (bootstrap: {int(first['records'])} records into state): {first['trigger_s']:.2f} s, "
          f"{int(first['moves'])} moves")
    print(f"spark rolling batches (median of {len(rest)}): {trigger:.2f} s per micro-batch "
          f"({python:.2f} s in the stateful processor), {moves:.0f} moves, {moves / trigger:.0f} moves/s")
    print(f"ratio spark rolling micro-batch / pure run latency: {trigger / seconds:.2f}; "
          f"moves/s spark / pure: {(moves / trigger) / (pure_moves / seconds):.2f}")


if __name__ == "__main__":
    main()
