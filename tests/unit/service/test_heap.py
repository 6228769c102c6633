"""The worker's heap policy: state is frozen out of the collector's scans; garbage cycles are still reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streaming.service.heap import GEN0_THRESHOLD, FrozenHeap, release_free_memory


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_state_is_frozen_at_start_and_young_garbage_is_still_collected(restore_gc: None) -> None:
    clock = Clock()
    heap = FrozenHeap(refreeze_every_s=1.0, full_every_s=3600.0, clock=clock)
    state = [Node() for _ in range(1000)]
    heap.start()
    assert gc.get_threshold()[0] == GEN0_THRESHOLD
    assert gc.get_freeze_count() >= len(state)
    assert heap.full_collections == 1

    garbage = Node()
    ref = weakref.ref(garbage)
    del garbage
    clock.now = 0.5
    heap.after_batch()  # too soon: nothing happens
    assert heap.freezes == 1
    clock.now = 1.0
    heap.after_batch()  # young collection frees the new cycle, then the survivors are frozen
    assert ref() is None
    assert heap.freezes == 2


def test_cycles_that_die_after_being_frozen_are_reclaimed_by_the_periodic_full_collection(restore_gc: None) -> None:
    clock = Clock()
    heap = FrozenHeap(refreeze_every_s=1.0, full_every_s=10.0, clock=clock)
    node = Node()
    ref = weakref.ref(node)
    heap.start()  # node is frozen now
    del node
    clock.now = 5.0
    heap.after_batch()
    assert ref() is not None  # frozen garbage waits for the full collection
    clock.now = 10.0
    heap.after_batch()
    assert ref() is None
    assert heap.full_collections == 2


def test_free_memory_is_given_back_to_the_os_after_a_burst() -> None:
    """A burst of allocations freed again (as a planner's catch-up leaves them) is returned to the operating system:
    RSS falls back once the allocator is trimmed (glibc; elsewhere the call says it could not)."""
    import sys
    from pathlib import Path

    def rss_kb() -> int:
        return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmRSS:"))

    if not sys.platform.startswith("linux") or not release_free_memory():
        pytest.skip("no glibc malloc_trim")
    keep = [bytearray(600) for _ in range(200_000)]  # 600 B: past pymalloc, from malloc's heap
    pinned = keep[::500]  # a few survivors scattered through it, as the planner's view stays
    del keep
    before = rss_kb()
    assert release_free_memory()
    assert rss_kb() < before - 50_000, (before, rss_kb())
    assert len(pinned) == 400
