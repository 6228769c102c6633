"""The exact per-server cost cache: Σ cost(X, Y) over a server's segments from two point values, O(log n) a query.

A :class:`ServerCostCache` answers from a *snapshot*: one frozen
:class:`~coordinator.balancer.cost_profile.CoverageProfile` of all the server's
segments and one per data source, taken when it last rebuilt, plus a *delta*,
the segments added or removed since. The cost of placing X is

    Σ_all I(X, Y) + (same_source_factor - 1) · Σ_{Y in X's data source} I(X, Y)

in hours², which is seed 000's cost with the factor 2 for the same data source:
the profiles give both sums (two binary searches and a few ``exp`` each, whatever
the alignment of the data), each delta row is costed by the closed form. Unlike
Druid's balancer it ignores no segment (Druid skips those more than 45 days
away) and needs no aligned intervals: the answer equals the brute-force sum
(:class:`~coordinator.balancer.server_costs.ServerSegments`) to about 1e-14
relative, on any data.

**Exactness.** Removed segments and, for a segment held here, the segment
itself (Druid's rule: a holder and a candidate are scored alike) are
subtracted from the snapshot's sums (a held segment whose own cost would
cancel the sum is summed from the profiles' counts less its own copy instead,
over the coverage pieces it covers). Every query carries a bound on its
absolute error (the profiles' own bounds plus a few ulps per row); when the
bound exceeds ``TOLERANCE`` of the answer (a subtraction that cancels, or a
query of seconds over many coverage pieces), the cache rebuilds its snapshot
when it has a delta and asks again, and otherwise sums the closed form over
every held segment (NumPy, O(n)). So every answer is within about 1e-11 of
the exact sum, and removing everything leaves exactly 0.

**Costs.** ``add`` and ``remove`` are O(1) when made (a dict entry). A query
costs O(log n) plus about a microsecond and a half per delta row; the snapshot
is rebuilt (O(n log n) NumPy, about a microsecond per segment) at the first
query after a bulk change, and otherwise when the delta rows that queries have
summed since the last rebuild cost as much as a rebuild (the ski-rental rule:
an add and a query in alternation cost O(√n) each, amortised; queries on an
unchanged server cost the profiles alone). ``size_bytes`` is the sum of held
segment sizes. Answers depend on the calls made (which segments the snapshot
holds), never on timing. Not thread-safe.

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

import numpy as np

from coordinator.balancer.cost import CostModel, costs, interval_joint_cost
from coordinator.balancer.cost_profile import CoverageProfile
from events.segment import SegmentDescriptor, SegmentId

TOLERANCE = 1e-11  # an answer whose error bound exceeds this share of it is computed again exactly
ROW_ERROR = 16 * 2.0**-53  # relative error bound of one closed-form cost (a few ulps) and its addition
ROW_MICROS = 1.5  # rough cost of one delta row in a query, for the rebuild rule
BUILD_MICROS = 2.0  # rough cost of rebuilding the snapshot, per held segment (1.9-2.6 µs at 1M)
BULK_SHARE = 8  # a bulk add of at least 1/8 of what is held drops the snapshot (rebuilt at the next query)


class _Snapshot:
    """Profiles of the segments held at one moment (all, and by data source), with their columns."""

    __slots__ = ("by_source", "code_of", "codes", "ends", "every", "starts")

    def __init__(self, held: Iterable[SegmentDescriptor], lam: float) -> None:
        segments = list(held)
        n = len(segments)
        self.code_of: dict[str, int] = {}
        code_of = self.code_of
        self.codes = np.fromiter((code_of.setdefault(s.data_source, len(code_of)) for s in segments), np.int64, n)
        self.starts = np.fromiter((s.interval.start for s in segments), np.int64, n)
        self.ends = np.fromiter((s.interval.end for s in segments), np.int64, n)
        ones = np.ones(n, np.int64)
        self.every = CoverageProfile(self.starts, self.ends, ones, lam)
        order = np.argsort(self.codes, kind="stable")
        bounds = np.searchsorted(self.codes[order], np.arange(len(code_of) + 1)).tolist()
        self.by_source: dict[str, CoverageProfile] = {}
        for name, c in code_of.items():
            rows = order[bounds[c]:bounds[c + 1]]
            self.by_source[name] = CoverageProfile(self.starts[rows], self.ends[rows], ones[:len(rows)], lam)

    def __len__(self) -> int:
        return len(self.starts)


class ServerCostCache:
    def __init__(self, model: CostModel | None = None, leaf_millis: int | None = None,
                 window: tuple[int, int] | None = None) -> None:
        """``leaf_millis`` and ``window`` are accepted for callers of the former grid-based cache and ignored: a
        profile has no grid."""
        del leaf_millis, window
        self.model = model or CostModel()
        self._lam = self.model.lam
        self._factor = self.model.same_source_factor
        self._held: dict[SegmentId, SegmentDescriptor] = {}
        self._snapshot: _Snapshot | None = None
        # changes since the snapshot: id -> (descriptor, True if added since, False if removed since)
        self._delta: dict[SegmentId, tuple[SegmentDescriptor, bool]] = {}
        self._debt = 0.0  # µs spent summing delta rows since the last rebuild (see the module docstring)
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, segment_id: SegmentId) -> bool:
        return segment_id in self._held

    def segment_ids(self) -> list[SegmentId]:
        return list(self._held)

    def _note(self, segment: SegmentDescriptor, added: bool) -> None:
        if self._snapshot is None:
            return
        sid = segment.id
        previous = self._delta.pop(sid, None)
        if previous is None:
            self._delta[sid] = (segment, added)
        # else: the change undoes the one noted (the snapshot has the segment as it is now)

    def add(self, segment: SegmentDescriptor) -> None:
        """Hold ``segment`` (no-op when already held)."""
        if segment.id in self._held:
            return
        self._held[segment.id] = segment
        self.size_bytes += segment.size
        self._note(segment, True)

    def extend(self, segments: Iterable[SegmentDescriptor]) -> None:
        """Hold many segments (a bulk load drops the snapshot, rebuilt once at the next query)."""
        fresh: dict[SegmentId, SegmentDescriptor] = {}
        for s in segments:
            sid = s.id  # built on each access: once per segment
            if sid not in self._held and sid not in fresh:
                fresh[sid] = s
        self._held.update(fresh)
        self.size_bytes += sum(s.size for s in fresh.values())
        if self._snapshot is not None and BULK_SHARE * len(fresh) >= len(self._held):
            self._drop()
        else:
            for s in fresh.values():
                self._note(s, True)

    def remove(self, segment_id: SegmentId) -> None:
        """Stop holding the segment (no-op when not held)."""
        segment = self._held.pop(segment_id, None)
        if segment is None:
            return
        self.size_bytes -= segment.size
        self._note(segment, False)

    def _drop(self) -> None:
        self._snapshot, self._delta, self._debt = None, {}, 0.0

    def _rebuild(self) -> _Snapshot:
        snapshot = self._snapshot = _Snapshot(self._held.values(), self._lam)
        self._delta, self._debt = {}, 0.0
        return snapshot

    def cost_of(self, segment: SegmentDescriptor) -> float:
        """Σ cost(segment, y) over the segments y held here, the segment itself excluded."""
        if not self._held:
            return 0.0
        snapshot = self._snapshot
        if snapshot is None or self._debt >= BUILD_MICROS * len(self._held):
            snapshot = self._rebuild()
        value = self._from_snapshot(snapshot, segment)
        if value is None and self._delta:
            snapshot = self._rebuild()
            value = self._from_snapshot(snapshot, segment)
        return self._exact(snapshot, segment) if value is None else value

    def cost_below(self, segment: SegmentDescriptor, bar: float) -> float | None:
        """``cost_of(segment)`` when it is below ``bar``, else None (the cost is at least ``bar``); the value returned
        is ``cost_of``'s, bit for bit.

        >>> from events import Interval, SegmentDescriptor
        >>> cache = ServerCostCache()
        >>> cache.add(SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1"))
        >>> b = SegmentDescriptor("wiki", Interval.parse("2026-01-02/P1D"), "v1")
        >>> cache.cost_below(b, 1e9) == cache.cost_of(b), cache.cost_below(b, 1.0)
        (True, None)
        """
        value = self.cost_of(segment)
        return value if value < bar else None

    def _from_snapshot(self, snapshot: _Snapshot, segment: SegmentDescriptor) -> float | None:
        """The cost from the snapshot's profiles and the delta, or None when its error bound is not within
        ``TOLERANCE`` of it."""
        interval = segment.interval
        x0, x1 = interval.start, interval.end
        factor = self._factor
        positive = negative = rows = 0.0
        sid, delta = segment.id, self._delta
        if delta:
            lam, source = self._lam, segment.data_source
            self._debt += ROW_MICROS * len(delta)
            for other_id, (other, added) in delta.items():
                if other_id == sid:
                    continue  # held and added since: not in the snapshot; removed since: taken out below
                cost = interval_joint_cost(x0, x1, other.interval.start, other.interval.end, lam)
                if other.data_source == source:
                    cost *= factor
                if added:
                    positive += cost
                else:
                    negative += cost
                rows += cost
            # held and not added since, or removed since: the snapshot's sums count it, take it out
            mine = sid in delta if sid not in self._held else sid not in delta
        else:
            mine = sid in self._held
        value = self._with_profiles(snapshot, segment, positive, negative, rows, mine, False)
        if value is None and mine:  # its own cost cancels the sum: the profiles' counts without it instead
            value = self._with_profiles(snapshot, segment, positive, negative, rows, mine, True)
        return value

    def _with_profiles(self, snapshot: _Snapshot, segment: SegmentDescriptor, positive: float, negative: float,
                       rows: float, mine: bool, without: bool) -> float | None:
        """The delta's sums plus the profiles' (``without``: less the segment itself, held in the snapshot;
        else, when ``mine``, its own cost subtracted), or None when the error bound is not within ``TOLERANCE``."""
        x0, x1 = segment.interval.start, segment.interval.end
        every = snapshot.every
        answer = every.total_without(x0, x1) if without else every.total(x0, x1)
        if answer is None:
            return None
        value, error = answer
        positive += value
        factor = self._factor
        if factor != 1.0:
            profile = snapshot.by_source.get(segment.data_source)
            if profile is not None:
                answer = profile.total_without(x0, x1) if without else profile.total(x0, x1)
                if answer is None:
                    return None
                value, bound = answer
                if factor > 1.0:
                    positive += (factor - 1.0) * value
                else:
                    negative += (1.0 - factor) * value
                error += abs(factor - 1.0) * bound
        if mine and not without:
            cost = factor * interval_joint_cost(x0, x1, x0, x1, self._lam)
            negative += cost
            rows += cost
        result = positive - negative
        if error + ROW_ERROR * (rows + positive) <= TOLERANCE * result:
            return result
        return None

    def _exact(self, snapshot: _Snapshot, segment: SegmentDescriptor) -> float:
        """The closed form summed over every held segment (the snapshot holds exactly them), the segment masked."""
        x0, x1 = segment.interval.start, segment.interval.end
        code = snapshot.code_of.get(segment.data_source, -1)
        values = costs(segment.interval, snapshot.starts, snapshot.ends, snapshot.codes == code, self.model)
        if segment.id in self._held:  # mask one row of the same interval and data source: they cost the same
            rows = np.flatnonzero((snapshot.starts == x0) & (snapshot.ends == x1) & (snapshot.codes == code))
            values[int(rows[0])] = 0.0
        return float(np.sum(values))
