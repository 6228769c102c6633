"""Per-stage timestamps of the worker's pipeline, for latency work (off unless ``SEGCOORD_STAGE_TRACE`` is set).

With ``SEGCOORD_STAGE_TRACE=PATH`` the worker appends one line per stage event to ``PATH``:
``<wall time s> <stage> <topic> <partition> <first offset> <last offset> <records>`` (topic ``-`` and offsets
``-1`` for stages that are not about input records, e.g. a producer flush, whose last field is then the
messages it waited for). Stages: ``fetched`` (the worker's consumer handed a batch over), ``begin:<agent>`` /
``done:<agent>`` (an agent's ``process`` of its share, flush and commit included), ``feed-fetched`` /
``feed-done`` (the planner feed's fetch and the planner's ``process`` of it), ``flush-begin:<producer>`` /
``flush-done:<producer>``. ``bench.service`` reads it back (``--trace``) and maps offsets to requests, so one
request's path is: sent, fetched, lockbox done, its ``segments_published`` fetched by the feed, planner done,
``load_segment`` read by the bench.

Off (the default), :func:`enabled` is False and no caller builds a line; the file is written by one lock-free
``write`` per line (whole lines of an append-mode file, from any thread).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
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
