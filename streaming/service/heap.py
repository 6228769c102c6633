"""The worker's heap policy: keep CPython's cyclic collector from scanning the agents' long-lived state.

The agents hold their whole fold in memory (timelines, lockbox, planner view):
millions of objects at tens of thousands of segments. CPython's full (gen2)
collection walks every tracked object, so with default settings it paused the
worker for 90-170 ms every few seconds at 5k segments, and for longer at 50k:
the dominant share of the visibility latency's p99 (measured with
``bench.service``).

**Policy.**
- At start, after the state stores are loaded: one full collection, then
  ``gc.freeze()``: the restored state moves to the permanent generation, which
  the collector never scans.
- After a batch, at most every ``refreeze_every_s``: a young collection
  (generations 0 and 1: cheap, proportional to what the recent batches
  allocated, and it frees their garbage cycles), then ``gc.freeze()`` again, so
  the survivors (new state) join the permanent generation instead of piling up
  in generation 2.
- Every ``full_every_s`` (default one hour): ``gc.unfreeze()`` and one full
  collection, then freeze again. This bounds what freezing costs: a reference
  cycle that became garbage after it was frozen is only reclaimed here.

**Invariant.** Generation 2 only ever holds objects that survived since the last
freeze, so any automatic full collection scans at most ``refreeze_every_s``
worth of survivors, never the whole state. Nothing here changes what the agents
compute; it only moves when memory of garbage cycles is reclaimed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

GEN0_THRESHOLD = 20_000  # allocations between young collections (CPython's default: 700)


@dataclass(slots=True)
class FrozenHeap:
    refreeze_every_s: float = 1.0
    full_every_s: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    freezes: int = 0
    full_collections: int = 0
    _last_freeze: float = field(default=0.0, init=False)
    _last_full: float = field(default=0.0, init=False)

    def start(self) -> None:
        """After the state is loaded: collect everything once, freeze it, and raise the young threshold."""
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
        self._full()

    def after_batch(self) -> None:
        """Called by the worker after each applied batch (cheap when the last freeze is recent)."""
        now = self.clock()
        if now - self._last_full >= self.full_every_s:
            self._full()
        elif now - self._last_freeze >= self.refreeze_every_s:
            gc.collect(1)
            gc.freeze()
            self._last_freeze = now
            self.freezes += 1

    def _full(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._last_full = self._last_freeze = self.clock()
        self.full_collections += 1
        self.freezes += 1
