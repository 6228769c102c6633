"""The exact per-server cost cache: Σ cost(X, Y) over a server's segments in O(log n), updates in O(log n).

A :class:`ServerCostCache` keeps one :class:`~coordinator.balancer.coverage.CoverageTree`
for all the server's segments and one per data source. The cost of placing X is

    Σ_all I(X, Y) + (same_source_factor - 1) · Σ_{Y in X's data source} I(X, Y)

in hours², which is seed 000's cost with the factor 2 for the same data source.
Unlike Druid's balancer it ignores no segment (Druid skips those more than 45
days away) and needs no aligned intervals: the answer equals the brute-force
sum (:class:`~coordinator.balancer.server_costs.ServerSegments`) to about 1e-15
relative, on any data.

**Invariants.** ``cost_of(X)`` never includes X's own contribution: when the
server holds X it is taken out of the trees for the query and put back (an
exact operation, since tree nodes are recomputed, never decremented), so a
holder and a candidate are scored alike (Druid's rule). ``size_bytes`` is the
sum of held segment sizes. Not thread-safe.

>>> from events import Interval, SegmentDescriptor
>>> cache = ServerCostCache()
>>> a = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1")
>>> b = SegmentDescriptor("wiki", Interval.parse("2026-01-02/P1D"), "v1")
>>> cache.add(a)
>>> round(cache.cost_of(b), 6), cache.cost_of(a)
(599.434267, 0.0)
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.balancer.cost import MILLIS_PER_HOUR, CostModel
from coordinator.balancer.coverage import CoverageTree
from events.segment import SegmentDescriptor, SegmentId


class ServerCostCache:
    def __init__(self, model: CostModel | None = None, leaf_millis: int = MILLIS_PER_HOUR,
                 window: tuple[int, int] | None = None) -> None:
        """``window`` (ms, optional): the span the segments are expected in, so the trees need not grow."""
        self.model = model or CostModel()
        self._lam = self.model.lam
        self._leaf = leaf_millis
        self._window = window
        self._all = CoverageTree(self._lam, leaf_millis, window)
        self._by_source: dict[str, CoverageTree] = {}
        self._held: dict[SegmentId, SegmentDescriptor] = {}
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, segment_id: SegmentId) -> bool:
        return segment_id in self._held

    def segment_ids(self) -> list[SegmentId]:
        return list(self._held)

    def _tree(self, data_source: str, bulk: bool = False) -> CoverageTree:
        """The data source's tree; a new one is pre-sized to the server's window, except for a bulk load,
        where :meth:`CoverageTree.add_many` sizes its grid to the data (a data source holds a fraction of
        the server's segments: pre-sizing it on the server's grid allocated, then dropped, a grid as fine
        as the server's, 12 of 45 s of building 10 servers' caches)."""
        tree = self._by_source.get(data_source)
        if tree is None:
            window = None if bulk else self._window or (self._all.window if self._all.depth >= 0 else None)
            tree = self._by_source[data_source] = CoverageTree(self._lam, self._leaf, window)
        return tree

    def add(self, segment: SegmentDescriptor) -> None:
        """Hold ``segment`` (no-op when already held)."""
        if segment.id in self._held:
            return
        start, end = segment.interval.start, segment.interval.end
        self._all.add(start, end)
        self._tree(segment.data_source).add(start, end)
        self._held[segment.id] = segment
        self.size_bytes += segment.size

    def extend(self, segments: Iterable[SegmentDescriptor]) -> None:
        """Hold many segments, with one rebuild of each tree (the fast way to load a server)."""
        fresh: dict[SegmentId, SegmentDescriptor] = {}
        for s in segments:
            sid = s.id  # built on each access: once per segment
            if sid not in self._held and sid not in fresh:
                fresh[sid] = s
        by_source: dict[str, tuple[list[int], list[int]]] = {}
        for s in fresh.values():
            starts, ends = by_source.setdefault(s.data_source, ([], []))
            starts.append(s.interval.start)
            ends.append(s.interval.end)
        self._all.add_many([s.interval.start for s in fresh.values()], [s.interval.end for s in fresh.values()])
        for source, (starts, ends) in by_source.items():
            self._tree(source, bulk=True).add_many(starts, ends)
        self._held.update(fresh)
        self.size_bytes += sum(s.size for s in fresh.values())

    def remove(self, segment_id: SegmentId) -> None:
        """Stop holding the segment (no-op when not held)."""
        segment = self._held.pop(segment_id, None)
        if segment is None:
            return
        start, end = segment.interval.start, segment.interval.end
        self._all.remove(start, end)
        tree = self._by_source[segment.data_source]
        tree.remove(start, end)
        if not tree.segments:
            del self._by_source[segment.data_source]
        self.size_bytes -= segment.size

    def cost_of(self, segment: SegmentDescriptor) -> float:
        """Σ cost(segment, y) over the segments y held here, the segment itself excluded."""
        held = self._held.get(segment.id)
        if held is not None:
            self.remove(segment.id)
            try:
                return self._cost(segment)
            finally:
                self.add(held)
        return self._cost(segment)

    def cost_below(self, segment: SegmentDescriptor, bar: float) -> float | None:
        """``cost_of(segment)`` when it is below ``bar``, else ``cost_of(segment)`` or None (the cost is surely at
        least ``bar``): for a segment not held here, the sum over every held segment is computed first and, with a
        same-data-source factor of at least 1, the data source's term only adds to it, so when that first sum is
        already at least ``bar`` the second tree walk is skipped. The value returned is ``cost_of``'s, bit for bit.

        >>> from events import Interval, SegmentDescriptor
        >>> cache = ServerCostCache()
        >>> cache.add(SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1"))
        >>> b = SegmentDescriptor("wiki", Interval.parse("2026-01-02/P1D"), "v1")
        >>> cache.cost_below(b, 1e9) == cache.cost_of(b), cache.cost_below(b, 1.0)
        (True, None)
        """
        if segment.id in self._held or self.model.same_source_factor < 1.0 or not self._held:
            return self.cost_of(segment)
        x0, x1 = segment.interval.start, segment.interval.end
        total = self._all.total(x0, x1)
        if total >= bar:
            return None
        tree = self._by_source.get(segment.data_source)
        if tree is not None and self.model.same_source_factor != 1.0:
            total += (self.model.same_source_factor - 1.0) * tree.total(x0, x1)
        return total

    def _cost(self, segment: SegmentDescriptor) -> float:
        x0, x1 = segment.interval.start, segment.interval.end
        total = self._all.total(x0, x1) if self._held else 0.0
        tree = self._by_source.get(segment.data_source)
        if tree is not None and self.model.same_source_factor != 1.0:
            total += (self.model.same_source_factor - 1.0) * tree.total(x0, x1)
        return total
