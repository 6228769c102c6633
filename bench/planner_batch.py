"""Benchmark: the planner process's fixed CPU per batch, in this process, fed as ``segcoord run --planner-only``
feeds it at low rates (docs/service.md, "The planner process per batch").

A planner store is preloaded with ``--preload`` hourly segments x 2 replicas on ``--servers`` servers (as
``bench.service --only placement --preload-via direct`` does); then each of ``--publishes`` publishes of one new
segment goes through :meth:`PlannerAgent.process` as the split deployment's feed sees it at 200 publish
requests/s: three batches per publish (the ``segments_published`` alone, its two ``load_segment`` read back, the two
``segment_announced`` answering them). Around the agent, what the planner process adds per batch and per run:

- ``before``: each batch handed to the planner's pool thread and waited for (``on_pool`` on a
  ``ThreadPoolExecutor``), and every run reported at once (gauges, one ``metrics`` record per value through a
  producer, one INFO line to a log file), as the process did before;
- ``after``: each batch run on the feed's thread under a :class:`~streaming.service.planner_feed.PlannerThread`'s
  lock, and scoped runs reported together every ``--tick-s`` seconds (``ServiceMetrics.flush_runs``);
- ``direct`` and ``together``: one of the two changes alone.

The producer for the metrics points at a closed port (its messages queue; the encoding and ``produce`` call are
paid as in the service, the broker's side is not). Printed: CPU microseconds per publish (``time.process_time``:
every thread of this process) of each mode, median of ``--rounds`` alternated rounds, and their ratio.

Run: ``.venv/bin/python -m bench.planner_batch [--preload 10000] [--servers 10] [--publishes 2000] [--rounds 3]``.
No broker.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Producer

from bench.planner_agent import TOPICS, Records, _Sink, joins, publish_envelopes
from events import Envelope, Event, encode
from events.commands import LoadSegment
from events.schema import Instant
from events.segments import SegmentAnnounced
from events.topics import COMMANDS, SEGMENTS
from streaming.metrics import ServiceMetrics
from streaming.service import planner_agent
from streaming.service.delivery import on_pool
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent
from streaming.service.planner_feed import PlannerThread, _call
from streaming.service.state import AgentStateStore

MODES = ("before", "direct", "together", "after")


def one_round(store_dir: Path, servers: int, publishes: int, mode: str, now: int, tick_s: float) -> float:
    """CPU microseconds per publish of one mode (:data:`MODES`) on a copy of the preloaded store."""
    direct, together = mode in ("after", "direct"), mode in ("after", "together")
    work = Path(tempfile.mkdtemp(prefix="bench-planner-batch-"))
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "acks": "1", "linger.ms": 5,
                         "compression.type": "lz4", "log_level": 0})
    pool: ThreadPoolExecutor = PlannerThread() if direct else ThreadPoolExecutor(1, thread_name_prefix="planner")
    try:
        shutil.copytree(store_dir, work / "store")
        sink = _Sink(False)
        store = AgentStateStore(work / "store" / planner_agent.STORE_NAME, FORMAT_VERSION)
        agent = PlannerAgent(store, TOPICS, sink)
        metrics = ServiceMetrics(lambda key, value: producer.produce("bench.metrics", value=value, key=key))
        if together:
            agent.on_run = metrics.plan_run
        else:
            def report_each(*args: object) -> None:  # every run reported at once, as before
                metrics.plan_run(*args)  # type: ignore[arg-type]
                metrics.flush_runs()
            agent.on_run = report_each
        record = Records(now)

        def feed(records: list[InputRecord]) -> None:
            if direct:
                _call(pool, agent.process, records)
            else:
                on_pool(pool, agent.process, records)

        feed(joins(record, servers))
        agent.tick(now)  # the first timer run is a full one: behind us, as in the service's steady state
        metrics.flush_runs()
        sink.pending.clear()
        published = [encode(env) for env in publish_envelopes(publishes, now)]
        cpu = time.process_time()
        ticked = time.monotonic()
        for i, value in enumerate(published):
            feed([record(SEGMENTS, value)])
            readback: list[tuple[Envelope[Event], bytes]] = sink.pending
            sink.pending = []
            feed([record(COMMANDS, v) for _, v in readback])
            answers = [encode(Envelope(SegmentAnnounced(server=e.event.server, segment=e.event.segment),
                                       f"ann-{e.event_id}", Instant(now + i), e.event.server, e.event_id))
                       for e, _ in readback if isinstance(e.event, LoadSegment)]
            feed([record(SEGMENTS, v) for v in answers])
            sink.pending.clear()
            if time.monotonic() - ticked >= tick_s:  # the observer's timer
                ticked = time.monotonic()
                metrics.flush_runs()
            producer.poll(0)
        metrics.flush_runs()
        spent = time.process_time() - cpu
        assert agent.counters.emitted >= 2 * publishes, agent.counters.emitted
        store.close()
        return spent / publishes * 1e6
    finally:
        pool.shutdown()
        producer.purge()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preload", type=int, default=10_000)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tick-s", type=float, default=5.0, help="the observer's timer (plan_every_s)")
    args = parser.parse_args()
    from bench.service import preload_store

    now = int(time.time() * 1000)
    base = Path(tempfile.mkdtemp(prefix="bench-planner-batch-store-"))
    handler = logging.FileHandler(base / "planner.log")  # the service logs its INFO lines to its log file
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    planner_log = logging.getLogger("segcoord.planner")
    planner_log.addHandler(handler)
    planner_log.setLevel(logging.INFO)
    try:
        preload_store(base / "state", args.servers, args.preload, now)
        got: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                got[mode].append(one_round(base / "state", args.servers, args.publishes, mode, now, args.tick_s))
        median = {m: statistics.median(v) for m, v in got.items()}
        print(f"planner process per batch, {args.preload} segments x 2 on {args.servers} servers, {args.publishes} "
              f"publishes in 3 batches each: CPU per publish, median of {args.rounds} rounds: "
              + "; ".join(f"{m} {median[m]:.0f} us (ratio {median[m] / median['before']:.2f}; rounds "
                          f"{', '.join(f'{v:.0f}' for v in got[m])})" for m in MODES))
    finally:
        planner_log.removeHandler(handler)
        handler.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
