"""What placing a segment on one server costs: the sum of its joint cost with every segment there.

:class:`ServerSegments` holds a server's segments as numpy columns and answers
``cost_of(segment)`` exactly by brute force (vectorized, O(n) per query), with
O(1) add and remove. It excludes the segment's own contribution when the server
already holds it, so a holder and a candidate are scored alike (Druid's rule).
The balancing strategy only needs ``cost_of`` and ``holds``: the exact
O(log n) :class:`~coordinator.balancer.cost_cache.ServerCostCache` has the same
methods and replaces this wherever servers hold many segments; this brute force
stays as the reference it is tested against.

>>> from events import Interval, SegmentDescriptor
>>> s = ServerSegments()
>>> a = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1")
>>> b = SegmentDescriptor("wiki", Interval.parse("2026-01-02/P1D"), "v1")
>>> s.add(a)
>>> round(s.cost_of(b), 6), s.cost_of(a)          # same data source: factor 2; a alone costs nothing
(599.434267, 0.0)
"""

from __future__ import annotations

import numpy as np

from coordinator.balancer.cost import CostModel, costs
from events.segment import SegmentDescriptor, SegmentId


class ServerSegments:
    def __init__(self, model: CostModel | None = None) -> None:
        self.model = model or CostModel()
        self._capacity = 16
        self._starts = np.zeros(self._capacity, dtype=np.int64)
        self._ends = np.zeros(self._capacity, dtype=np.int64)
        self._sources = np.zeros(self._capacity, dtype=np.int64)
        self._ids: list[SegmentId] = []
        self._slot: dict[SegmentId, int] = {}
        self._source_codes: dict[str, int] = {}
        self.size_bytes = 0
        self._sizes: dict[SegmentId, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def holds(self, segment_id: SegmentId) -> bool:
        return segment_id in self._slot

    def segment_ids(self) -> list[SegmentId]:
        return list(self._ids)

    def _code(self, data_source: str) -> int:
        return self._source_codes.setdefault(data_source, len(self._source_codes))

    def add(self, segment: SegmentDescriptor) -> None:
        sid = segment.id
        if sid in self._slot:
            return
        n = len(self._ids)
        if n == self._capacity:
            self._capacity *= 2
            for name in ("_starts", "_ends", "_sources"):
                grown = np.zeros(self._capacity, dtype=np.int64)
                grown[:n] = getattr(self, name)[:n]
                setattr(self, name, grown)
        self._starts[n], self._ends[n] = segment.interval.start, segment.interval.end
        self._sources[n] = self._code(segment.data_source)
        self._ids.append(sid)
        self._slot[sid] = n
        self._sizes[sid] = segment.size
        self.size_bytes += segment.size

    def remove(self, segment_id: SegmentId) -> None:
        slot = self._slot.pop(segment_id, None)
        if slot is None:
            return
        last = len(self._ids) - 1
        if slot != last:  # move the last row into the hole
            moved = self._ids[last]
            self._starts[slot], self._ends[slot], self._sources[slot] = (
                self._starts[last], self._ends[last], self._sources[last])
            self._ids[slot] = moved
            self._slot[moved] = slot
        self._ids.pop()
        self.size_bytes -= self._sizes.pop(segment_id)

    def cost_of(self, segment: SegmentDescriptor) -> float:
        """Σ cost(segment, y) over the segments y held here, the segment itself excluded."""
        n = len(self._ids)
        if n == 0:
            return 0.0
        same = self._sources[:n] == self._source_codes.get(segment.data_source, -1)
        values = costs(segment.interval, self._starts[:n], self._ends[:n], same, self.model)
        slot = self._slot.get(segment.id)
        if slot is not None:
            values[slot] = 0.0  # masked, not subtracted: a subtraction would leave rounding noise
        return float(np.sum(values))
