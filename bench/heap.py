"""Benchmark: the worker's frozen-heap policy (:mod:`streaming.service.heap`) with 1M and 5M segments in memory.

The state is what the agents hold: a map of segment id to descriptor (each a
handful of tracked objects). For each size it prints, in the same run:

- **full, unfrozen**: one ``gc.collect()`` over the whole state, the pause
  CPython's automatic full collections would impose (the baseline);
- **start**: :meth:`FrozenHeap.start` (one full collection, then ``gc.freeze()``);
- **full, frozen**: ``gc.collect()`` after the freeze, which scans only what is
  not frozen, with the ratio to the unfrozen pause;
- **after a batch**: :meth:`FrozenHeap.after_batch` (a young collection and a
  re-freeze) after 20k new segments, what the worker pays at most once a second.

Run: ``.venv/bin/python -m bench.heap`` (``--quick``: 100k and 500k segments).
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

from events import Interval, SegmentDescriptor
from events.segment import SegmentId
from streaming.service.heap import FrozenHeap

HOUR = 3_600_000
BASE = 1_735_689_600_000


def _state(n: int, offset: int = 0) -> dict[SegmentId, SegmentDescriptor]:
    out = {}
    for i in range(offset, offset + n):
        hour = BASE + (i // 100) * HOUR
        seg = SegmentDescriptor(f"ds{i % 100}", Interval(hour, hour + HOUR), "v1", partition_id=i % 100,
                                size=1 << 20, load_spec={"type": "local", "path": f"/s/{i}"})
        out[seg.id] = seg
    return out


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(n: int) -> None:
    gc.unfreeze()
    gc.collect()
    state = _state(n)
    unfrozen = _timed(gc.collect)
    heap = FrozenHeap(refreeze_every_s=0.0)
    start = _timed(heap.start)
    frozen = _timed(gc.collect)
    state.update(_state(20_000, offset=n))
    batch = _timed(heap.after_batch)
    print(f"  {n:>9,} segments ({gc.get_freeze_count():>11,} objects frozen): full unfrozen {unfrozen * 1e3:8.1f} ms   "
          f"start {start * 1e3:8.1f} ms   full frozen {frozen * 1e6:7.0f} µs (ratio {unfrozen / frozen:6.0f}x)   "
          f"after a batch of 20k {batch * 1e3:6.2f} ms")
    state.clear()
    gc.unfreeze()
    gc.collect()


def main() -> None:
    sizes = [100_000, 500_000] if "--quick" in sys.argv else [1_000_000, 5_000_000]
    print("the frozen-heap policy: collection pauses with the agents' state in memory")
    for n in sizes:
        measure(n)


if __name__ == "__main__":
    main()
