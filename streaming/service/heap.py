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

import contextlib
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (then back as it was): for a restore, which allocates millions of
    objects that all stay alive, so every collection it would trigger scans a growing heap and frees nothing (a
    third of the planner's restore CPU at 100k segments, more at 1M). :meth:`FrozenHeap.start` collects once after
    it. Changes nothing the agents compute."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def release_free_memory() -> bool:
    """Return the memory the C allocator holds free to the operating system (glibc's ``malloc_trim(0)``); False where
    there is no such call (another C library). It frees nothing that is in use and changes nothing the agents compute.

    Why: glibc keeps what a thread freed in that thread's arena, at its high-water mark. A newly elected planner's
    catch-up (tens of thousands of records folded at once, on the planner's threads and librdkafka's) left the
    worker's RSS that much higher for as long as it ran: in the soak's run 5 the leader held 251 MB, of which
    ``malloc_trim(0)`` gave back 58 MB (a former leader 32 of 178 MB, a follower 7 of 136 MB; docs/workers.md,
    "The planner's memory"). The planner feed calls it once a catch-up has ended."""
    global _trim
    if _trim is None:
        name = ctypes.util.find_library("c")
        try:
            _trim = ctypes.CDLL(name).malloc_trim if name else False
        except (OSError, AttributeError):
            _trim = False
    if _trim is False:
        return False
    _trim(0)
    return True


_trim: Callable[[int], int] | bool | None = None  # glibc's malloc_trim once looked up (False: none)
