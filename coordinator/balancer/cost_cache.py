"""The exact per-server cost cache: Σ cost(X, Y) over a server's segments from point values, O(log n) a query.

A :class:`ServerCostCache` answers from **runs**: frozen
:class:`~coordinator.balancer.cost_profile.CoverageProfile` s of fixed multisets of
segments (one profile of all of a run's segments and one per data source), kept
by the logarithmic method. The cost of placing X is

    Σ_all I(X, Y) + (same_source_factor - 1) · Σ_{Y in X's data source} I(X, Y)

in hours², which is seed 000's cost with the factor 2 for the same data source:
each run gives both sums (two binary searches and a few ``exp`` each, whatever
the alignment of the data). Unlike Druid's balancer it ignores no segment
(Druid skips those more than 45 days away) and needs no aligned intervals: the
answer equals the brute-force sum
(:class:`~coordinator.balancer.server_costs.ServerSegments`) to about 1e-14
relative, on any data.

**Layout.** The held segments, as a multiset, are

    Σ runs  +  fresh rows  -  gone runs  -  dropped rows

``fresh`` holds up to ``BUFFER`` segments added since the last run was made,
``dropped`` up to ``BUFFER`` removed segments that a run still counts; each is
costed row by row by the closed form. A full buffer becomes a run, pushed on
its stack (``runs`` for adds, ``gone`` for removals) and merged with the runs
at the top of the stack smaller than twice its size, so every run is at least
twice the size of the next: at most log2(n / BUFFER) + 1 runs a stack, and a
segment takes part in O(log n) merges (NumPy, about 2 µs per segment each).
A removed segment still in ``fresh`` simply leaves it.

**Exactness.** Removed segments (gone runs, dropped rows) and, for a segment
held here, the segment itself (Druid's rule: a holder and a candidate are
scored alike) are subtracted. Every query carries a bound on its absolute error
(the profiles' own bounds plus a few ulps per row and per sum); when the bound
exceeds ``TOLERANCE`` of the answer (a subtraction that cancels, or a query of
seconds over many coverage pieces), a held segment's own cost is first summed
without subtraction (a run's counts less one copy over the pieces X covers),
then the cache consolidates (one run of exactly the held segments) and asks
again, and otherwise sums the closed form over every held segment (NumPy,
O(n)). So every answer is within about 1e-11 of the exact sum, and removing
everything leaves exactly 0.

**Costs.** ``add`` and ``remove`` cost O(log n) amortised: a dict entry, and
every ``BUFFER`` changes a run built and merged (about 2 µs per segment per
merge, a few hundred µs of NumPy per small run). A query costs two profile sums
per run (about 4 µs each) plus about 1.5 µs per buffered row: O(log n). The
cache consolidates all runs into one (O(n log n), about 2 µs per held segment)
at the first query after a bulk change (a batch of at least 1/``BULK_SHARE`` of
what is held), when removed segments still counted reach the number held, and
when the queries since the last consolidation have spent on extra runs and rows
as much as consolidating costs (the ski-rental rule: queries on a server that
stopped changing converge to one run and cost the profiles alone, at most
twice what consolidating at once would have). ``size_bytes`` is the sum of
held segment sizes. Answers depend on the calls made (which runs exist),
never on timing. Not thread-safe.

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
import numpy.typing as npt

from coordinator.balancer.cost import CostModel, costs, interval_joint_cost
from coordinator.balancer.cost_profile import CoverageProfile
from events.segment import SegmentDescriptor, SegmentId

I64 = npt.NDArray[np.int64]

TOLERANCE = 1e-11  # an answer whose error bound exceeds this share of it is computed again exactly
ROW_ERROR = 16 * 2.0**-53  # relative error bound of one closed-form cost or sum (a few ulps) and its addition
BUFFER = 16  # changes kept as rows before they become a run
ROW_MICROS = 1.5  # rough cost of one buffered row in a query, for the consolidation rule
RUN_MICROS = 8.0  # rough cost of one run in a query (two profile sums), for the same rule
BUILD_MICROS = 2.0  # rough cost of consolidating, per held segment (1.9-2.6 µs at 1M)
GROUPED_BELOW = 16_384  # runs smaller than this build their data sources' profiles in one pass (larger: one each)
BULK_SHARE = 8  # a bulk add of at least 1/8 of what is held drops the runs (one built at the next query)


class _Run:
    """Profiles of a fixed multiset of segments (all, and by data source), with their columns (codes index
    the cache's data source names)."""

    __slots__ = ("by_source", "codes", "ends", "every", "starts")

    def __init__(self, starts: I64, ends: I64, codes: I64, names: list[str], lam: float) -> None:
        self.starts, self.ends, self.codes = starts, ends, codes
        ones = np.ones(len(starts), np.int64)
        self.every = CoverageProfile(starts, ends, ones, lam)
        self.by_source: dict[str, CoverageProfile] = {}
        if len(starts) < GROUPED_BELOW:  # one build for every data source: a small run costs a few hundred µs
            for code, profile in CoverageProfile.grouped(starts, ends, codes, lam).items():
                self.by_source[names[code]] = profile
            return
        order = np.argsort(codes, kind="stable")
        ranked = codes[order]
        present = np.unique(ranked)
        los = np.searchsorted(ranked, present, "left").tolist()
        his = np.searchsorted(ranked, present, "right").tolist()
        for code, lo, hi in zip(present.tolist(), los, his, strict=True):
            rows = order[lo:hi]
            self.by_source[names[code]] = CoverageProfile(starts[rows], ends[rows], ones[:hi - lo], lam)

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
        self._code_of: dict[str, int] = {}
        self._names: list[str] = []
        self._built = False  # False: no runs (before the first query, after a bulk change); rebuilt when asked
        self._runs: list[_Run] = []  # each at least twice the next
        self._gone: list[_Run] = []  # removed segments that a run still counts, the same way
        self._gone_count = 0
        self._fresh: dict[SegmentId, SegmentDescriptor] = {}  # added since the last run was made
        self._dropped: list[SegmentDescriptor] = []  # removed, still counted by a run (a multiset: a list)
        self._debt = 0.0  # µs spent on extra runs and rows since the last consolidation (see the module docstring)
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, segment_id: SegmentId) -> bool:
        return segment_id in self._held

    def segment_ids(self) -> list[SegmentId]:
        return list(self._held)

    def add(self, segment: SegmentDescriptor) -> None:
        """Hold ``segment`` (no-op when already held)."""
        sid = segment.id
        if sid in self._held:
            return
        self._held[sid] = segment
        self.size_bytes += segment.size
        if self._built:
            fresh = self._fresh
            fresh[sid] = segment
            if len(fresh) >= BUFFER:
                self._flush_fresh()

    def extend(self, segments: Iterable[SegmentDescriptor]) -> None:
        """Hold many segments (a bulk load drops the runs, rebuilt once at the next query)."""
        fresh: dict[SegmentId, SegmentDescriptor] = {}
        for s in segments:
            sid = s.id  # built on each access: once per segment
            if sid not in self._held and sid not in fresh:
                fresh[sid] = s
        self._held.update(fresh)
        self.size_bytes += sum(s.size for s in fresh.values())
        if not self._built:
            return
        if BULK_SHARE * len(fresh) >= len(self._held):
            self._drop()
        else:
            self._fresh.update(fresh)
            if len(self._fresh) >= BUFFER:
                self._flush_fresh()

    def remove(self, segment_id: SegmentId) -> None:
        """Stop holding the segment (no-op when not held)."""
        segment = self._held.pop(segment_id, None)
        if segment is None:
            return
        self.size_bytes -= segment.size
        if self._built and self._fresh.pop(segment_id, None) is None:
            dropped = self._dropped
            dropped.append(segment)
            if len(dropped) >= BUFFER:
                self._flush_dropped()

    def _columns(self, segments: Iterable[SegmentDescriptor], n: int) -> tuple[I64, I64, I64]:
        code_of, names = self._code_of, self._names
        rows = list(segments)

        def code(name: str) -> int:
            c = code_of.get(name)
            if c is None:
                c = code_of[name] = len(names)
                names.append(name)
            return c

        codes = np.fromiter((code(s.data_source) for s in rows), np.int64, n)
        starts = np.fromiter((s.interval.start for s in rows), np.int64, n)
        ends = np.fromiter((s.interval.end for s in rows), np.int64, n)
        return starts, ends, codes

    def _push(self, stack: list[_Run], columns: tuple[I64, I64, I64]) -> None:
        """A new run on ``stack``, merged with the runs at its top smaller than twice its (growing) size."""
        size = len(columns[0])
        parts = [columns]
        while stack and len(stack[-1]) < 2 * size:
            top = stack.pop()
            parts.append((top.starts, top.ends, top.codes))
            size += len(top)
        if len(parts) > 1:
            columns = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                       np.concatenate([p[2] for p in parts]))
        stack.append(_Run(*columns, self._names, self._lam))

    def _flush_fresh(self) -> None:
        fresh, self._fresh = self._fresh, {}
        self._push(self._runs, self._columns(fresh.values(), len(fresh)))

    def _flush_dropped(self) -> None:
        dropped, self._dropped = self._dropped, []
        self._push(self._gone, self._columns(dropped, len(dropped)))
        self._gone_count += len(dropped)
        if self._gone_count >= len(self._held):  # as much dead weight as live: consolidate at the next query
            self._drop()

    def _drop(self) -> None:
        self._built, self._runs, self._gone, self._gone_count = False, [], [], 0
        self._fresh, self._dropped, self._debt = {}, [], 0.0

    def _rebuild(self) -> None:
        """One run of exactly the held segments."""
        self._drop()
        held = self._held
        self._runs = [_Run(*self._columns(held.values(), len(held)), self._names, self._lam)]
        self._built = True

    def _single(self) -> bool:
        return len(self._runs) == 1 and not self._gone and not self._fresh and not self._dropped

    def cost_of(self, segment: SegmentDescriptor) -> float:
        """Σ cost(segment, y) over the segments y held here, the segment itself excluded."""
        if not self._held:
            return 0.0
        if not self._built or self._debt >= BUILD_MICROS * len(self._held):
            self._rebuild()
        value = self._answer(segment)
        if value is None and not self._single():
            self._rebuild()
            value = self._answer(segment)
        return self._exact(segment) if value is None else value

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

    def _answer(self, segment: SegmentDescriptor) -> float | None:
        """The cost from the runs and the rows, or None when its error bound is not within ``TOLERANCE`` of it."""
        interval = segment.interval
        x0, x1 = interval.start, interval.end
        sid, fresh, dropped, runs, gone = segment.id, self._fresh, self._dropped, self._runs, self._gone
        factor, source = self._factor, segment.data_source
        positive = negative = error = 0.0
        if fresh or dropped:
            lam = self._lam
            for other_id, other in fresh.items():
                if other_id == sid:
                    continue  # held and not in a run: nothing to subtract
                cost = interval_joint_cost(x0, x1, other.interval.start, other.interval.end, lam)
                positive += factor * cost if other.data_source == source else cost
            for other in dropped:
                cost = interval_joint_cost(x0, x1, other.interval.start, other.interval.end, lam)
                negative += factor * cost if other.data_source == source else cost
            mine = sid in self._held and sid not in fresh
            self._debt += ROW_MICROS * (len(fresh) + len(dropped))
        else:
            mine = sid in self._held
        rows = positive + negative
        if gone:
            sums = self._sums(gone, segment, -1)
            if sums is None:
                return None
            plus, minus, error = sums
            positive += minus
            negative += plus
        if len(runs) + len(gone) > 1:
            self._debt += RUN_MICROS * (len(runs) + len(gone) - 1)
        base = positive, negative, error
        same = factor - 1.0
        for run in runs:  # _sums inlined: the hot path
            answer = run.every.total(x0, x1)
            if answer is None:
                return None
            value, bound = answer
            positive += value
            error += bound
            if same:
                profile = run.by_source.get(source)
                if profile is not None:
                    answer = profile.total(x0, x1)
                    if answer is None:
                        return None
                    value, bound = answer
                    if same > 0.0:
                        positive += same * value
                    else:
                        negative -= same * value
                    error += abs(same) * bound
        spent = rows
        if mine:
            cost = factor * interval_joint_cost(x0, x1, x0, x1, self._lam)
            negative += cost
            spent += cost
        result = positive - negative
        if error + ROW_ERROR * (spent + positive + negative) <= TOLERANCE * result:
            return result
        if mine:  # its own cost cancels the sum: a run's counts without its copy instead
            for k in range(len(runs)):
                answer_k = self._with_runs(segment, base, rows, k)
                if answer_k is not None:
                    return answer_k
        return None

    def _sums(self, stack: list[_Run], segment: SegmentDescriptor, without: int) -> tuple[float, float, float] | None:
        """(what adds, what subtracts, error bound) of the runs' profiles for ``segment``, the run ``without`` (if
        any) counted less one copy of the segment's interval; None when a profile cannot answer."""
        x0, x1 = segment.interval.start, segment.interval.end
        factor, source = self._factor, segment.data_source
        positive = negative = error = 0.0
        for k, run in enumerate(stack):
            every = run.every
            answer = every.total_without(x0, x1) if k == without else every.total(x0, x1)
            if answer is None:
                return None
            value, error_k = answer
            positive += value
            error += error_k
            if factor != 1.0:
                profile = run.by_source.get(source)
                if profile is not None:
                    answer = profile.total_without(x0, x1) if k == without else profile.total(x0, x1)
                    if answer is None:
                        return None
                    value, bound = answer
                    if factor > 1.0:
                        positive += (factor - 1.0) * value
                    else:
                        negative += (1.0 - factor) * value
                    error += abs(factor - 1.0) * bound
                elif k == without:
                    return None  # no copy of the segment in this run's data source profile
        return positive, negative, error

    def _with_runs(self, segment: SegmentDescriptor, base: tuple[float, float, float], rows: float,
                   without: int) -> float | None:
        """The rows' and gone runs' sums (``base``) plus the runs' with the run ``without`` less the segment's own
        copy, or None when the error bound is not within ``TOLERANCE``."""
        sums = self._sums(self._runs, segment, without)
        if sums is None:
            return None
        positive, negative, error = base
        plus, minus, bound = sums
        positive += plus
        negative += minus
        error += bound
        result = positive - negative
        if error + ROW_ERROR * (rows + positive + negative) <= TOLERANCE * result:
            return result
        return None

    def _exact(self, segment: SegmentDescriptor) -> float:
        """The closed form summed over every held segment (the one run holds exactly them), the segment masked."""
        run = self._runs[0]
        x0, x1 = segment.interval.start, segment.interval.end
        code = self._code_of.get(segment.data_source, -1)
        values = costs(segment.interval, run.starts, run.ends, run.codes == code, self.model)
        if segment.id in self._held:  # mask one row of the same interval and data source: they cost the same
            rows = np.flatnonzero((run.starts == x0) & (run.ends == x1) & (run.codes == code))
            values[int(rows[0])] = 0.0
        return float(np.sum(values))
