"""The cluster as one planning run leaves it: updated after every decision, so a run never overshoots.

**Invariants.**
- A segment's *copies* on a tier are its loaded copies not being dropped plus its
  queued plain loads: a queued load counts as a copy (never assigned twice), the
  load half of a move does not (its source still counts: a move counts once).
- ``used_bytes`` of a server is its loaded bytes plus its queued loads.
- ``queued[server][purpose]`` counts queued loads by purpose, for the stage limits.
- Cost caches, built lazily per server, hold the projected placement: loaded
  segments, minus queued drops and move sources, plus queued loads. With a
  :class:`~coordinator.planner.cost_shelf.CostCacheShelf` they come from the
  shelf, reconciled to that placement, and the run's changes stay in them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.planner.cluster import ClusterView, Purpose, QueueItem
from coordinator.planner.cost_shelf import CostCacheShelf
from events.segment import SegmentDescriptor, SegmentId


@dataclass(slots=True)
class Copies:
    loaded: int = 0
    pending: int = 0

    @property
    def total(self) -> int:
        return self.loaded + self.pending


class Projection:
    def __init__(self, view: ClusterView, shelf: CostCacheShelf | None = None) -> None:
        self.view = view
        self.shelf = shelf
        self.tier_of = {name: s.server.tier for name, s in view.servers.items()}
        self.tiers: dict[str, list[str]] = {}
        for name in sorted(view.servers):
            self.tiers.setdefault(self.tier_of[name], []).append(name)
        self.decommissioning = {name for name in view.servers if view.decommissioning(name)}
        self.loaded: dict[str, set[SegmentId]] = {n: set(s.loaded) for n, s in view.servers.items()}
        self.dropping: dict[str, set[SegmentId]] = {n: set() for n in view.servers}
        self.loading: dict[str, dict[SegmentId, QueueItem]] = {n: {} for n in view.servers}
        self.queued: dict[str, Counter[str]] = {n: Counter() for n in view.servers}
        self.used_bytes: dict[str, int] = {}
        self.holders: dict[SegmentId, set[str]] = {}
        self.pending: dict[SegmentId, set[str]] = {}
        self.move_sources: dict[SegmentId, set[str]] = {}
        self._caches: dict[str, ServerCostCache] = {}
        self._changes: dict[str, dict[SegmentId, bool]] = {}  # per built cache: segment -> held after the change
        self.loaded_in: dict[SegmentId, Counter[str]] = {}  # tier -> loaded copies not being dropped
        self.pending_in: dict[SegmentId, Counter[str]] = {}  # tier -> queued plain loads
        self.active = {t: sum(1 for n in names if n not in self.decommissioning) for t, names in self.tiers.items()}
        spans = [(s.interval.start, s.interval.end) for s in view.segments.values()]
        self.window = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
        for name, state in view.servers.items():
            for sid in state.loaded:
                self.holders.setdefault(sid, set()).add(name)
            for item in state.queue:
                if item.action == "drop":
                    self.dropping[name].add(item.segment)
                else:
                    self._queue_load(name, item)
        for name, state in view.servers.items():
            self.used_bytes[name] = sum(self.size(s) for s in state.loaded) + sum(
                self.size(s) for s in self.loading[name])
            for sid in self.dropping[name]:
                self.holders.get(sid, set()).discard(name)
        for sid, names in self.holders.items():
            self.loaded_in[sid] = Counter(self.tier_of[n] for n in names)
        self.started_on = {sid: set(c) for sid, c in self.loaded_in.items() if c}

    # -- reading -----------------------------------------------------------------
    def segment(self, sid: SegmentId) -> SegmentDescriptor:
        return self.view.segments[sid]

    def size(self, sid: SegmentId) -> int:
        seg = self.view.segments.get(sid)
        return seg.size if seg is not None else 0

    def free_bytes(self, name: str) -> int:
        return self.view.servers[name].server.max_size_bytes - self.used_bytes[name]

    def copies(self, sid: SegmentId, tier: str) -> Copies:
        loaded, pending = self.loaded_in.get(sid), self.pending_in.get(sid)
        return Copies(loaded[tier] if loaded else 0, pending[tier] if pending else 0)

    def tiers_with_copies(self, sid: SegmentId) -> set[str]:
        loaded, pending = self.loaded_in.get(sid), self.pending_in.get(sid)
        return {t for c in (loaded, pending) if c for t, n in c.items() if n > 0}

    def anywhere(self, sid: SegmentId) -> bool:
        return bool(self.holders.get(sid)) or bool(self.pending.get(sid))

    def present(self, sid: SegmentId, name: str) -> bool:
        """Loaded (and not being dropped) or queued to load on the server."""
        return name in self.holders.get(sid, ()) or sid in self.loading[name]

    def queue_size(self, name: str) -> int:
        return len(self.loading[name])

    def cache(self, name: str) -> ServerCostCache:
        """The server's cost cache, built on first use; changes since then are applied in one batch."""
        cache = self._caches.get(name)
        changes = self._changes.pop(name, None)
        if cache is not None and changes:
            for sid, keep in changes.items():
                if not keep:
                    cache.remove(sid)
            cache.extend(self.segment(sid) for sid, keep in changes.items() if keep and sid in self.view.segments)
        if cache is None:
            gone = self.dropping[name]
            placed = [self.segment(s) for s in self.loaded[name] if s not in gone and s in self.view.segments
                      and name not in self.move_sources.get(s, ())]
            placed += [self.segment(s) for s in self.loading[name] if s in self.view.segments]
            if self.shelf is not None:
                cache = self.shelf.cache_for(name, placed, self.window)
            else:
                cache = ServerCostCache(window=self.window)
                cache.extend(placed)
            self._caches[name] = cache
        return cache

    # -- changing ----------------------------------------------------------------
    def _queue_load(self, name: str, item: QueueItem) -> None:
        self.loading[name][item.segment] = item
        self.queued[name][item.purpose] += 1
        if item.move_id is None:
            self.pending.setdefault(item.segment, set()).add(name)
            self.pending_in.setdefault(item.segment, Counter())[self.tier_of[name]] += 1
        elif item.source is not None:
            self.move_sources.setdefault(item.segment, set()).add(item.source)

    def load(self, name: str, sid: SegmentId, purpose: Purpose, move_id: str | None = None,
             source: str | None = None) -> None:
        self._queue_load(name, QueueItem("load", sid, purpose, move_id, source))
        self.used_bytes[name] += self.size(sid)
        self._note(name, sid, True)
        if source is not None:
            self._note(source, sid, False)

    def _note(self, name: str, sid: SegmentId, held: bool) -> None:
        if name in self._caches:
            self._changes.setdefault(name, {})[sid] = held

    def cancel(self, name: str, sid: SegmentId) -> QueueItem:
        item = self.loading[name].pop(sid)
        self.queued[name][item.purpose] -= 1
        self.used_bytes[name] -= self.size(sid)
        if item.move_id is None:
            self.pending.get(sid, set()).discard(name)
            self.pending_in[sid][self.tier_of[name]] -= 1
        elif item.source is not None:
            self.move_sources.get(sid, set()).discard(item.source)
            self._note(item.source, sid, True)
        self._note(name, sid, False)
        return item

    def drop(self, name: str, sid: SegmentId) -> None:
        self.dropping[name].add(sid)
        held = self.holders.get(sid, set())
        if name in held:
            held.discard(name)
            self.loaded_in[sid][self.tier_of[name]] -= 1
        self._note(name, sid, False)
