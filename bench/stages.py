"""Where publish -> ``load_segment`` latency accumulates: the worker's stage trace joined with the bench's times.

``bench.service --only placement`` with ``SEGCOORD_STAGE_TRACE=PATH`` set (the worker inherits it and writes
:mod:`streaming.service.stage_trace` lines) calls :func:`report` per paced window before the broker stops. Each
request of the window is followed through its stages by offset (``lock-requests`` offset of its request,
``segments`` offset of its ``segments_published``), and the report gives, per stage, the p50 / p99 of the time
since the request was sent, and of the step from the stage before:

    sent -> request created (the client's producer) -> fetched by the worker -> lockbox begins -> lockbox done
    (flush and commit) -> segments_published created -> fetched by the planner feed -> the planner's thread
    begins -> planner done (flush and commit) -> load_segment created -> the feed's thread has it back ->
    load_segment read by the bench

plus, for the window, each consumer's batches per second and records per batch, and each producer's flushes
per second and flush time.
"""

from __future__ import annotations

import bisect
import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from events import Topics, decode
from events.segments import SegmentsPublished
from events.tasks import PublishRequested
from events.topics import LOCK_REQUESTS, SEGMENTS


@dataclass(frozen=True)
class Line:
    at: float
    stage: str
    topic: str
    partition: int
    first: int
    last: int
    n: int


def read_trace(path: Path) -> list[Line]:
    out = []
    for raw in path.read_text().splitlines():
        f = raw.split()
        if len(f) != 7:
            continue
        out.append(Line(float(f[0]), f[1], f[2], int(f[3]), int(f[4]), int(f[5]), int(f[6])))
    return out


def topic_offsets(bootstrap: str, topic: str) -> dict[str, tuple[int, float]]:
    """Segment id -> (offset, CreateTime s) of the first record naming it on partition 0 of ``topic``: a
    ``publish_requested`` on ``lock-requests``, a ``segments_published`` on ``segments``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    tp = TopicPartition(topic, 0, 0)
    end = int(c.get_watermark_offsets(tp, timeout=10)[1])
    c.assign([tp])
    out: dict[str, tuple[int, float]] = {}
    try:
        pos = 0
        while pos < end:
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                continue
            off, v = m.offset(), m.value()
            if off is None or v is None:
                continue
            pos = off + 1
            if b'"publish_requested"' not in v and b'"segments_published"' not in v:
                continue
            ev = decode(v).event
            if isinstance(ev, PublishRequested | SegmentsPublished):
                for seg in ev.segments:
                    out.setdefault(str(seg.id), (off, m.timestamp()[1] / 1000))
    finally:
        c.close()
    return out


class _Index:
    """The first trace line of one stage whose offset span holds an offset, per topic."""

    def __init__(self, lines: Iterable[Line]) -> None:
        self.by_topic: dict[str, tuple[list[int], list[Line]]] = {}
        grouped: dict[str, list[Line]] = defaultdict(list)
        for ln in lines:
            grouped[ln.topic].append(ln)
        for topic, lns in grouped.items():
            lns.sort(key=lambda ln: (ln.last, ln.at))
            self.by_topic[topic] = ([ln.last for ln in lns], lns)

    def at(self, topic: str, offset: int) -> float | None:
        found = self.by_topic.get(topic)
        if found is None:
            return None
        lasts, lns = found
        i = bisect.bisect_left(lasts, offset)
        while i < len(lns) and lns[i].first > offset:
            i += 1
        return lns[i].at if i < len(lns) and lns[i].first <= offset <= lns[i].last else None


def _pct(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    return f"{statistics.median(xs):8.1f} {xs[min(len(xs) - 1, int(len(xs) * 0.99))]:8.1f}"


def report(bootstrap: str, topics: Topics, trace: Path, sent_at: dict[str, float], loads_created: dict[str, float],
           loads_read: dict[str, float], label: str) -> None:
    """Print the stage breakdown of one window (``sent_at``: segment id -> time its request was sent)."""
    lines = read_trace(trace)
    if not sent_at or not lines:
        print(f"  stages ({label}): no trace")
        return
    req_topic, seg_topic = topics.name(LOCK_REQUESTS), topics.name(SEGMENTS)
    requests, published = topic_offsets(bootstrap, req_topic), topic_offsets(bootstrap, seg_topic)
    stages: dict[str, list[Line]] = defaultdict(list)
    for ln in lines:
        stages[ln.stage].append(ln)
    idx = {s: _Index(lns) for s, lns in stages.items() if not s.startswith("flush")}

    def on(stage: str, topic: str, offset: int | None) -> float | None:
        index = idx.get(stage)
        return None if index is None or offset is None else index.at(topic, offset)

    names = ["sent", "request created", "worker fetched", "lockbox begins", "lockbox done",
             "published created", "feed fetched", "planner begins", "planner done", "load created",
             "feed done", "load read"]
    since: dict[str, list[float]] = defaultdict(list)
    step: dict[str, list[float]] = defaultdict(list)
    for sid, sent in sent_at.items():
        req = requests.get(sid)
        pub = published.get(sid)
        r_off = req[0] if req else None
        p_off = pub[0] if pub else None
        times = [sent, req[1] if req else None, on("fetched", req_topic, r_off), on("begin:lockbox", req_topic, r_off),
                 on("done:lockbox", req_topic, r_off), pub[1] if pub else None,
                 on("feed-fetched", seg_topic, p_off), on("begin:planner", seg_topic, p_off),
                 on("done:planner", seg_topic, p_off), loads_created.get(sid), on("feed-done", seg_topic, p_off),
                 loads_read.get(sid)]
        prev = sent
        for name, t in zip(names, times, strict=True):
            if t is None:
                continue
            since[name].append((t - sent) * 1000)
            step[name].append((t - prev) * 1000)
            prev = t
    print(f"  stages ({label}), ms: since sent p50 p99 | step from the stage before p50 p99")
    for name in names[1:]:
        print(f"    {name:18s} {_pct(since[name])} | {_pct(step[name])}   ({len(since[name])} requests)")
    lo, hi = min(sent_at.values()), max(loads_read.get(s, 0.0) for s in sent_at) or max(sent_at.values())
    span = max(hi - lo, 1e-9)
    for stage in ("fetched", "feed-fetched"):
        batches: dict[float, int] = {}
        for ln in stages.get(stage, []):
            if lo <= ln.at <= hi:
                batches[ln.at] = batches.get(ln.at, 0) + ln.n
        if batches:
            sizes = list(batches.values())
            print(f"    {stage}: {len(sizes) / span:.0f} batches/s, records per batch mean "
                  f"{statistics.mean(sizes):.1f}, max {max(sizes)}")
    for stage in sorted(s for s in stages if s.startswith("begin:")):
        agent = stage.split(":", 1)[1]
        begins = [ln for ln in stages[stage] if lo <= ln.at <= hi]
        dones = [ln for ln in stages.get(f"done:{agent}", []) if lo <= ln.at <= hi]
        b_at = sorted({ln.at for ln in begins})
        d_at = sorted({ln.at for ln in dones})
        took = [(d - b) * 1000 for b, d in zip(b_at, d_at, strict=False) if d >= b]
        print(f"    agent {agent}: {len(b_at) / span:.0f} batches/s, process+flush+commit p50 p99 {_pct(took)} ms")
        staged = sorted({ln.at for ln in stages.get(f"staged:{agent}", []) if lo <= ln.at <= hi})
        if staged:  # a staged agent's begin -> done spans the other agents' work; its own part is begin -> staged
            own = [(s - b) * 1000 for b, s in zip(b_at, staged, strict=False) if s >= b]
            print(f"      of which staged (decide and send, before the other agents) p50 p99 {_pct(own)} ms")
    waits = sorted(ln.at for ln in stages.get("fetch-wait", []) if lo <= ln.at <= hi)
    got = sorted({ln.at for ln in stages.get("fetched", []) if lo <= ln.at <= hi})
    waited = []
    for t in got:  # the wait that ended in this fetch: the last fetch-wait before it
        i = bisect.bisect_right(waits, t) - 1
        if i >= 0:
            waited.append((t - waits[i]) * 1000)
    if waited:
        print(f"    worker's event loop waiting for a fetch: {sum(waited) / 1000 / span:.0%} of the window, "
              f"p50 p99 {_pct(waited)} ms per fetch")
    for stage in sorted(s for s in stages if s.startswith("cpu:")):
        cpu = [ln.n / 1000 for ln in stages[stage] if lo <= ln.at <= hi]
        if cpu:
            print(f"    {stage}: {sum(cpu) / 1000 / span:.2f} CPU s/s of its thread, p50 p99 {_pct(cpu)} ms per batch")
    for stage in sorted(s for s in stages if s.startswith("hold:")):
        holds = [ln.n / 1000 for ln in stages[stage] if lo <= ln.at <= hi]
        if holds:
            print(f"    {stage}: {len(holds)} in the window, {sum(holds):.0f} ms in all, longest {max(holds):.1f} ms")
    for stage in sorted(s for s in stages if s.startswith("flush-begin:")):
        name = stage.split(":", 1)[1]
        f_begins = sorted(ln.at for ln in stages[stage] if lo <= ln.at <= hi)
        f_dones = sorted(ln.at for ln in stages.get(f"flush-done:{name}", []) if lo <= ln.at <= hi)
        took = [(d - b) * 1000 for b, d in zip(f_begins, f_dones, strict=False) if d >= b]
        print(f"    flush {name}: {len(f_begins) / span:.0f}/s, took p50 p99 {_pct(took)} ms")
