"""Benchmark: upsert tables (seed 003) — filter size, strategy update cost, and visible-to-strategy latency.

1. **Filter size and build time** (pure): a table whose primary holds ``--primary-keys`` keys (100k) and whose
   append table holds ``--fresh`` (100) fresh keys. Our two-part filter (:func:`build_filter`, grouped by date)
   against the naive filter over every key's latest version (seed 003's first attempt: OR over key AND version):
   terms (selectors plus ``in`` values) and build time, with the ratio.
2. **Strategy update cost** (pure): the upsert agent's work for one re-ingest (its publish, its visibility
   change, the new strategy and filter) at 10k and at 1M tracked keys (``--tracked``), each the median of
   ``--updates`` re-ingests; the ratio of the large to the small (target: within 2x).
3. **Latency** (real broker, ``segcoord run``): ``--paced`` re-ingests at ``--rate`` per second, each a publish and
   an announce on ``segments``; latency = broker timestamp of the strategy record on ``upsert-strategy`` naming
   the re-ingest's version minus broker timestamp of the segment's ``visible`` change on ``timeline``; p50 / p99,
   and the p99 against seed 003's anchor (2 minutes to data availability). Skip with ``--no-broker``.

Run: ``.venv/bin/python -m bench.upserts [--tracked 10000 1000000] [--paced 200] [--rate 20] [--no-broker]``.
With ``SEGCOORD_BOOTSTRAP`` set it uses that broker, otherwise it starts its own local broker under a temporary
home and stops it at the end.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.broker import bench_broker
from coordinator.upserts import Strategy, UpsertState, build_filter, filter_terms, naive_filter
from coordinator.upserts.state import Latest
from coordinator.upserts.table import Key, UpsertTable
from events import (
    Envelope,
    Instant,
    Interval,
    SegmentAnnounced,
    SegmentDescriptor,
    SegmentsPublished,
    SegmentVisibilityChanged,
    Topics,
    UpsertPartition,
    UpsertTableSet,
    decode,
    format_instant,
)
from events.topics import TIMELINE, UPSERT_STRATEGY
from streaming.admin import create_topics
from streaming.producer import EventProducer

SEGCOORD = str(Path(sys.executable).parent / "segcoord")
T0 = 1_609_459_200_000  # 2021-01-01
DAY = 86_400_000
TABLE = UpsertTable("ads", "ads_append", "ads_primary", ("source", "date"), "version", "table_type", 0, 0)
DEFINE = UpsertTableSet(name="ads", append_data_source="ads_append", primary_data_source="ads_primary",
                        key_columns=("source", "date"), version_column="version", stale_grace_millis=3_600_000,
                        consolidation_period_millis=0)


def key(source: int, d: int) -> Key:
    return (("date", format_instant(T0 + d * DAY)[:10]), ("source", f"src{source:05d}"))


def filter_size(primary_keys: int, fresh: int) -> None:
    days = 365
    sources = max(1, primary_keys // days)
    latest: dict[Key, Latest] = {key(s, d): Latest("p1", True, False, ("p",)) for d in range(days)
                                 for s in range(sources)}
    fresh_keys = {key(s, d): Latest("a2", False, False, ("a",)) for d in range(days - 3, days)
                  for s in range(fresh // 3 + 1)}
    fresh_keys = dict(list(fresh_keys.items())[:fresh])
    latest.update(fresh_keys)
    reps = 5
    began = time.perf_counter()
    for _ in range(reps):
        ours = build_filter(TABLE, fresh_keys)
    ours_ms = (time.perf_counter() - began) * 1000 / reps
    began = time.perf_counter()
    naive = naive_filter(TABLE, latest)
    naive_ms = (time.perf_counter() - began) * 1000
    o, n = filter_terms(ours), filter_terms(naive)
    print(f"filter, {len(latest)} keys ({primary_keys} in the primary), {len(fresh_keys)} fresh: "
          f"{o} terms, {ours_ms:.3f} ms to build; naive OR over every key: {n} terms, {naive_ms:.1f} ms; "
          f"ratio ours/naive: terms {o / n:.5f}, time {ours_ms / naive_ms:.5f}")


def segment(ds: str, d: int, version: str, partition: int, parts: tuple[UpsertPartition, ...]) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + d * DAY, T0 + (d + 1) * DAY), version, partition, 100,
                             upsert_partitions=parts)


def visible(seg: SegmentDescriptor) -> SegmentVisibilityChanged:
    return SegmentVisibilityChanged(segment_id=str(seg.id), data_source=seg.data_source, interval=seg.interval,
                                    from_state="offline", to_state="visible")


def tracked_state(tracked: int, fresh: int) -> UpsertState:
    """A table with ``tracked`` keys consolidated into the primary (10k keys per primary segment) and ``fresh``
    keys re-ingested into the append table since."""
    st = UpsertState()
    st.apply(DEFINE, 0)
    per_segment = 10_000
    days = max(1, tracked // per_segment)
    sources = min(tracked, per_segment)
    for d in range(days):
        parts = tuple(UpsertPartition(key=dict(key(s, d)), version="v0000000", rows=1) for s in range(sources))
        seg = segment("ads_primary", d, "V1", 0, parts)
        st.apply(SegmentsPublished(task_id="p", segments=(seg,)), 1)
        st.apply(visible(seg), 1)
    for i in range(fresh):
        seg = segment("ads_append", i % days, "A", 1 + i,
                      (UpsertPartition(key=dict(key(i, i % days)), version="v0000001"),))
        st.apply(SegmentsPublished(task_id="a", segments=(seg,)), 2)
        st.apply(visible(seg), 2)
    return st


def update_cost(tracked: int, fresh: int, updates: int) -> float:
    """Median ms of one re-ingest's fold + strategy. As in the worker (streaming/service/heap.py), the built state
    is frozen out of the cyclic collector's scans; otherwise full collections over a million keys' objects land
    inside the measured updates."""
    st = tracked_state(tracked, fresh)
    gc.collect()
    gc.freeze()
    try:
        return _update_cost(st, tracked, fresh, updates)
    finally:
        gc.unfreeze()


def _update_cost(st: UpsertState, tracked: int, fresh: int, updates: int) -> float:
    days = max(1, tracked // 10_000)
    costs = []
    for i in range(updates):
        seg = segment("ads_append", i % days, "A", 100_000 + i,
                      (UpsertPartition(key=dict(key(i % fresh, i % days)), version=f"v{2 + i:07d}"),))
        began = time.perf_counter()
        changed = st.apply(SegmentsPublished(task_id="a", segments=(seg,)), 3)
        changed |= st.apply(visible(seg), 3)
        assert changed == {"ads"}, "a re-ingest of a fresh key with a newer version changes the strategy"
        for table in changed:
            fresh_now = st.fresh(table)
            intervals = {s: iv for lt in fresh_now.values() for s in lt.segments if (iv := st.interval_of(s))}
            Strategy.of(st.tables[table], fresh_now, intervals).to_json()
        costs.append(time.perf_counter() - began)
    return statistics.median(costs) * 1000


def latency(bootstrap: str, work: Path, paced: int, rate: float) -> None:
    topics = Topics(f"bench-upserts-{uuid.uuid4().hex[:8]}.")
    create_topics(bootstrap, topics)
    state, log = work / "state", work / "run.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix,
                                 "--state-dir", str(state)], stdout=out, stderr=subprocess.STDOUT)
    producer = EventProducer(bootstrap, topics)
    consumers = {}
    try:
        for logical in (TIMELINE, UPSERT_STRATEGY):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
            name = topics.name(logical)
            parts = sorted(c.list_topics(name, timeout=10).topics[name].partitions)
            c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in parts])
            consumers[logical] = c

        def send(event: object, k: str) -> None:
            producer.send(Envelope(event, uuid.uuid4().hex, Instant(int(time.time() * 1000)), k))  # type: ignore[arg-type]

        send(DEFINE, "upserts/ads")
        producer.flush()
        visible_at: dict[str, int] = {}  # segment id -> broker time of its visible change
        version_of: dict[str, str] = {}  # segment id -> the re-ingest's version
        strategy_at: dict[str, int] = {}  # version -> broker time of the first strategy naming it
        sources = 20

        def drain() -> None:
            for m in consumers[TIMELINE].consume(1000, 0.05):
                if m.error() is None:
                    ev = decode(m.value()).event
                    if isinstance(ev, SegmentVisibilityChanged) and ev.to_state == "visible":
                        visible_at.setdefault(ev.segment_id, m.timestamp()[1])
            for m in consumers[UPSERT_STRATEGY].consume(1000, 0.05):
                if m.error() is None:
                    for row in orjson.loads(m.value())["latest"]:
                        strategy_at.setdefault(row["version"], m.timestamp()[1])

        began = time.monotonic()
        for i in range(paced):
            d = i // sources
            version = f"v{i:06d}"
            seg = segment("ads_append", d, "A", 1 + i,
                          (UpsertPartition(key=dict(key(i % sources, d)), version=version, rows=10),))
            version_of[str(seg.id)] = version
            send(SegmentsPublished(task_id=f"t{i}", segments=(seg,)), "ads_append")
            send(SegmentAnnounced(server="h1", segment=seg), "ads_append")
            producer.flush()
            drain()
            pause = began + (i + 1) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        deadline = time.monotonic() + 120
        while len([s for s, v in version_of.items() if v in strategy_at and s in visible_at]) < paced:
            if proc.poll() is not None:
                raise SystemExit(f"segcoord run exited; see {log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"not every re-ingest reached upsert-strategy; see {log}")
            drain()
        lat = sorted(strategy_at[v] - visible_at[s] for s, v in version_of.items())
        p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(f"latency visible -> strategy, {paced} re-ingests at {rate:g}/s: p50 {p50} ms, p99 {p99} ms, "
              f"max {lat[-1]} ms; p99 / seed 003's 2-minute anchor = {p99 / 120_000:.5f}")
    finally:
        for c in consumers.values():
            c.close()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--primary-keys", type=int, default=100_000)
    parser.add_argument("--fresh", type=int, default=100)
    parser.add_argument("--tracked", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--paced", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--no-broker", action="store_true")
    args = parser.parse_args()

    filter_size(args.primary_keys, args.fresh)
    costs = []
    for n in args.tracked:
        began = time.perf_counter()
        cost = update_cost(n, args.fresh, args.updates)
        costs.append(cost)
        print(f"strategy update, {n} tracked keys ({args.fresh} fresh): median {cost:.3f} ms per re-ingest "
              f"(state built in {time.perf_counter() - began:.0f} s)")
    if len(costs) > 1:
        print(f"strategy update cost ratio {args.tracked[-1]} / {args.tracked[0]} keys = {costs[-1] / costs[0]:.2f}"
              " (target: within 2x)")
    if args.no_broker:
        return
    with tempfile.TemporaryDirectory(prefix="bench-upserts-") as tmp:
        work = Path(tmp)
        with bench_broker(work) as bootstrap:
            latency(bootstrap, work, args.paced, args.rate)


if __name__ == "__main__":
    main()
