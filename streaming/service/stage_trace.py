"""Per-stage timestamps of the worker's pipeline, for latency work (off unless ``SEGCOORD_STAGE_TRACE`` is set).

With ``SEGCOORD_STAGE_TRACE=PATH`` the worker appends one line per stage event to ``PATH``:
``<wall time s> <stage> <topic> <partition> <first offset> <last offset> <n>``; for stages about input records
``n`` is their number, others have topic ``-`` and offsets ``-1``. Stages:

- ``fetch-wait``: the event loop starts waiting for its consumer's next batch; ``fetched``: the batch handed over;
- ``begin:<agent>`` / ``done:<agent>``: an agent's batch, its flush and commit included. The lockbox is staged
  (streaming/service/delivery.py): ``staged:lockbox`` when it decided and sent, its ``done`` after the other
  agents' work and its own flush and commit;
- ``cpu:<agent>``: ``n`` is the thread CPU time of that batch in microseconds;
- ``feed-fetched`` / ``feed-done``: the planner feed's fetch and the planner's batch back on the feed's thread;
  ``begin:planner`` / ``done:planner`` on the planner's own thread;
- ``flush-begin:<producer>`` (``n``: messages in the producer, queued or not yet reported) and
  ``flush-done:<producer>``;
- ``hold:<job>``: a job that held a thread others wait for (a job on the planner's thread, a timer run or the
  heap's collection on the event loop), marked when it ends; ``n`` is how long it held it, in microseconds
  (:func:`held`).

``bench.service --only placement`` with the variable set (the worker inherits it) joins the lines with its own
times by offset (``bench/stages.py``): sent, fetched, lockbox done, its ``segments_published`` fetched by the
feed, planner done, ``load_segment`` read by the bench. Off (the default) :func:`enabled` is False and the callers
build nothing; on, each line is one buffered ``write`` under a lock (the event loop, the planner's thread and the
feed's write to the same file).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO

ENV = "SEGCOORD_STAGE_TRACE"

_out: IO[str] | None = None
_lock = threading.Lock()


def _open() -> IO[str] | None:
    path = os.environ.get(ENV)
    return open(path, "a", buffering=1) if path else None  # lives as long as the process


_out = _open()


def enabled() -> bool:
    return _out is not None


def mark(stage: str, topic: str = "-", partition: int = -1, first: int = -1, last: int = -1, n: int = 0) -> None:
    """One stage line (no-op unless enabled)."""
    if _out is None:
        return
    line = f"{time.time():.6f} {stage} {topic} {partition} {first} {last} {n}\n"
    with _lock:
        _out.write(line)


@contextlib.contextmanager
def held(job: str) -> Iterator[None]:
    """Mark ``hold:<job>`` with the block's wall time in microseconds when it ends (no-op unless enabled)."""
    if _out is None:
        yield
        return
    began = time.perf_counter()
    try:
        yield
    finally:
        mark(f"hold:{job}", n=int((time.perf_counter() - began) * 1e6))


def records(stage: str, recs: Sequence[object]) -> None:
    """One stage line per (topic, partition) of ``recs`` (InputRecords, in offset order per partition)."""
    if _out is None or not recs:
        return
    spans: dict[tuple[str, int], list[int]] = {}
    for r in recs:
        key = (r.topic, r.partition)  # type: ignore[attr-defined]
        off: int = r.offset  # type: ignore[attr-defined]
        span = spans.get(key)
        if span is None:
            spans[key] = [off, off, 1]
        else:
            span[1] = off
            span[2] += 1
    now = time.time()
    with _lock:
        for (topic, partition), (first, last, n) in spans.items():
            _out.write(f"{now:.6f} {stage} {topic} {partition} {first} {last} {n}\n")
