"""Benchmark: lockbox decisions per second with 10k live locks over 100 data sources.

Setup: 100 data sources x 100 running tasks, each holding one lock on its own
hour (a mix of timeChunk exclusive, append and segment locks). Measured: a
stream of requests against that state (new locks on free hours, conflicting
requests that wait or revoke, segment allocations, publishes, task ends and
starts), answered by ``Lockbox.handle``; against it, in the same run, the pure
``decide`` (which copies the whole lockbox per decision) and the replay fold
(``apply``) of the decisions.

Run: ``.venv/bin/python -m bench.lockbox``
"""

from __future__ import annotations

import random
import time

from coordinator.locks.lockbox import Lockbox, decide
from events import (
    Envelope,
    Event,
    Instant,
    Interval,
    LockRequested,
    PublishRequested,
    SegmentAllocated,
    SegmentAllocationRequested,
    TaskFinished,
    TaskStarted,
)

H = 3_600_000
BASE = 1_767_225_600_000
SOURCES = 100
TASKS_PER_SOURCE = 100


def hour(h: int) -> Interval:
    return Interval(BASE + h * H, BASE + (h + 1) * H)


def main() -> None:
    rng = random.Random(3)
    box = Lockbox()
    now = BASE + 400 * 24 * H
    seq = 0

    def env(event: Event, key: str) -> Envelope[Event]:
        nonlocal now, seq
        now += 1
        seq += 1
        return Envelope(event, f"e{seq}", Instant(now), key)

    kinds = ["exclusive", "append", "segment"]
    for d in range(SOURCES):
        ds = f"ds{d}"
        for t in range(TASKS_PER_SOURCE):
            task = f"{ds}-t{t}"
            box.handle(env(TaskStarted(task_id=task, group_id=task, task_type="index_parallel", data_source=ds), ds))
            kind = kinds[t % 3]
            box.handle(env(LockRequested(
                request_id=f"{task}-l", task_id=task, group_id=task, task_type="index_parallel", data_source=ds,
                interval=hour(t), granularity="segment" if kind == "segment" else "timeChunk",
                lock_type="exclusive" if kind == "segment" else kind,  # type: ignore[arg-type]
                partition_ids=(0,) if kind == "segment" else None), ds))
    live = sum(len(s.locks) for s in box.sources.values())
    print(f"state: {live:,} live locks over {len(box.sources)} data sources, {len(box.tasks):,} tasks")

    requests: list[Envelope[Event]] = []
    for i in range(20_000):
        d = rng.randrange(SOURCES)
        ds = f"ds{d}"
        task = f"{ds}-n{i}"
        r = rng.random()
        requests.append(env(TaskStarted(task_id=task, group_id=task, task_type=rng.choice(
            ["index_kafka", "compact", "index_parallel"]), data_source=ds), ds))
        if r < 0.4:  # a lock on a random hour: free, waiting, or revoking
            requests.append(env(LockRequested(
                request_id=f"{task}-l", task_id=task, group_id=task, task_type="index", data_source=ds,
                interval=hour(rng.randrange(200)), granularity="timeChunk", lock_type="exclusive"), ds))
        elif r < 0.8:  # a segment allocation (and its lock)
            requests.append(env(SegmentAllocationRequested(
                request_id=f"{task}-a", task_id=task, data_source=ds, timestamp=Instant(hour(150 + i % 50).start),
                sequence_name=task, interval=hour(150 + i % 50), lock_granularity="segment",
                lock_type="exclusive"), ds))
        requests.append(env(TaskFinished(task_id=task, status="success"), ds))

    scratch = box.copy()
    assert isinstance(scratch, Lockbox)
    started = time.perf_counter()
    pure = sum(len(decide(scratch, e)) for e in requests[:3000])
    pure_rate = 3000 / (time.perf_counter() - started)

    decisions: list[Event] = []
    handled = 0
    started = time.perf_counter()
    for e in requests:
        out = box.handle(e)
        handled += 1
        for d in out:  # a task publishes the segment it was allocated
            if isinstance(d, SegmentAllocated):
                out = out + box.handle(env(PublishRequested(request_id=f"{d.task_id}-p", task_id=d.task_id,
                                                            segments=(d.segment,)), e.key))
                handled += 1
        decisions.extend(out)
    rate = handled / (time.perf_counter() - started)
    accepted = sum(1 for d in decisions if type(d).__name__ == "PublishAccepted")
    started = time.perf_counter()
    replayed = Lockbox()
    for e in decisions:
        replayed.apply(e)
    fold_rate = len(decisions) / (time.perf_counter() - started)
    live = sum(len(s.locks) for s in box.sources.values())
    print(f"handle: {handled:,} requests ({accepted:,} publishes accepted) -> {len(decisions):,} decisions in "
          f"{handled / rate:.2f} s = {rate:,.0f} requests/s ({live:,} live locks at the end)")
    print(f"baseline, pure decide (copies the whole lockbox per request): {pure_rate:,.0f} requests/s "
          f"({pure} decisions); handle / decide = {rate / pure_rate:.1f}x")
    print(f"replay fold: {fold_rate:,.0f} decisions/s")


if __name__ == "__main__":
    main()
