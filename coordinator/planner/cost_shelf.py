"""Per-server cost caches kept across planning runs, so a run's cost work is proportional to what changed.

A planning run projects every server's placement (loaded segments, minus queued
drops and move sources, plus queued loads) and needs a
:class:`~coordinator.balancer.cost_cache.ServerCostCache` of it for every server
it scores. Built from scratch, that is O(n log n) in the cluster's segments per
run, which dominated a service that plans after every input batch. A shelf
keeps each server's cache from the previous run and *reconciles* it with the new
run's projected placement: segments no longer placed are removed, new ones
added, O(changes · log n) plus a set difference.

**Invariant.** :meth:`CostCacheShelf.cache_for` returns a cache holding exactly
the placement it is given, whatever the cache held before (a reconciliation,
not a trust in the caller's bookkeeping); so a shelf never changes what a run
decides, only how fast. Costs from a reconciled cache equal a fresh cache's up
to floating-point rounding (about 1e-16 relative), far inside the strategy's tie
tolerance. The shelf is plain data owned by one caller (the planner agent),
never shared between threads; servers that leave are forgotten with
:meth:`forget`.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.balancer.cost_cache import ServerCostCache
from events.segment import SegmentDescriptor


class CostCacheShelf:
    def __init__(self) -> None:
        self._caches: dict[str, ServerCostCache] = {}
        self.built = 0  # caches built from nothing
        self.added = 0  # segments added by reconciliation
        self.removed = 0  # segments removed by reconciliation

    def __len__(self) -> int:
        return len(self._caches)

    def cache_for(self, server: str, placed: Iterable[SegmentDescriptor],
                  window: tuple[int, int] | None = None) -> ServerCostCache:
        """The server's cache, holding exactly ``placed`` (built on the first call, reconciled after)."""
        cache = self._caches.get(server)
        if cache is None:
            cache = ServerCostCache(window=window)
            cache.extend(placed)
            self._caches[server] = cache
            self.built += 1
            return cache
        wanted = {seg.id: seg for seg in placed}
        held = set(cache.segment_ids())
        gone = held.difference(wanted)
        for sid in sorted(gone, key=lambda s: s.sort_key):
            cache.remove(sid)
        new = [wanted[sid] for sid in sorted(wanted.keys() - held, key=lambda s: s.sort_key)]
        cache.extend(new)
        self.removed += len(gone)
        self.added += len(new)
        return cache

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the caches of servers not in ``keep`` (servers that left the cluster)."""
        kept = set(keep)
        for name in [n for n in self._caches if n not in kept]:
            del self._caches[name]
