"""The cost of placing one segment on every server at once: a cluster-wide index built in bulk from sorted arrays.

:class:`ClusterCostIndex` answers, for a segment X, the vector of seed 000's
summed cost ``Σ_{Y on server} cost(X, Y)`` over all servers in one vectorized
pass (NumPy, no Python loop over servers), and so "the cheapest of these
servers". It is exact like :class:`~coordinator.balancer.cost_cache.ServerCostCache`
(no segment ignored, any alignment) and agrees with the brute-force sum
(:class:`~coordinator.balancer.server_costs.ServerSegments`) to about 1e-15
relative.

**The split.** Every held Y is, relative to X = [s, t), exactly one of:

- *left* (y1 <= s): λ² I = f(a) · f(b) · exp(-λ(s - y1)),
- *right* (y0 >= t): λ² I = f(a) · f(b) · exp(-λ(y0 - t)),
- *overlapping* (the rest): the closed form of :func:`~coordinator.balancer.cost.costs`,

with a, b the lengths of X and Y and f(u) = 1 - exp(-u). For each *group* (every
segment, or one data source's, for the same-source factor) the left segments, sorted
by y1, carry per server a decayed running sum ``Σ_{y1_j <= q} f(b_j) exp(-λ(q - y1_j))``,
kept as a table row (all servers at once) every ``CHECKPOINT_EVERY`` segments of the
group: the left sum at s is the row below s decayed to s plus the few segments after
it, found by one binary search and summed per server by one ``bincount`` over a
contiguous slice; the right sums mirror it on -y0. Both are sums of non-negative
terms (no difference of prefix sums, so nothing cancels; no exponent is positive,
so nothing overflows). Overlapping segments are found by
length class (lengths in [2^(c-1), 2^c) ms start in (s - 2^c, t)), a binary
search per class, and costed exactly; the segment itself is masked out, so a
holder and a candidate are scored alike (Druid's rule).

**Updates** are amortised: :meth:`add` and :meth:`remove` (or :meth:`update`, many at once with one
binary search for all of them) go to a delta (added segments costed by brute force, removed ones
subtracted, with a guard that recomputes a server exactly when the subtraction would cancel more than
``CANCEL_GUARD``). The delta lives in NumPy columns (append and remove O(1), a lookup of a held pair O(log n)),
so a query costs one vectorized pass over it, and a rebuild starts from the columns, never from the
descriptors: sorts and scans in NumPy, about 0.6 µs a row (0.12 s at 200k rows), against about 50 ns a query
pays per delta row. The index is built again in bulk when either

- the delta outgrows the index (more than ``REBUILD_BASE`` + the rows of the last build, a doubling): every
  row is rebuilt O(1) times per doubling, so an update costs O(log n) amortised (the sorts), in C; or
- the delta rows the queries since the last build summed pass ``REBUILD_QUERY_WORK`` times the rows a
  rebuild would sort (the rent-or-buy rule: the queries have paid for a rebuild), so a query's delta work
  is amortised against the rebuild it waits for, and a delta that no query reads costs nothing.

A data source first seen in an update needs no rebuild (its lanes are empty in the static part); a new
server does. Not thread-safe.

>>> from events import Interval, SegmentDescriptor
>>> a = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1")
>>> b = SegmentDescriptor("wiki", Interval.parse("2026-01-02/P1D"), "v1")
>>> index = ClusterCostIndex.build({"h1": [a], "h2": []})
>>> [round(c, 6) for c in index.costs_of(b).tolist()], index.cheapest(b), index.costs_of(a).tolist()
([599.434267, 0.0], 'h2', [0.0, 0.0])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coordinator.balancer.cost import MILLIS_PER_HOUR, CostModel, costs
from events.segment import SegmentDescriptor, SegmentId

CANCEL_GUARD = 1e-4  # a server whose delta-corrected cost falls below this share of its snapshot cost is recomputed

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class _Ranking:
    """One sort of an int64 column: the rows in value order, each row's dense rank, and the distinct values."""

    def __init__(self, ys: I64) -> None:
        self.order = np.argsort(ys, kind="stable")
        ordered = ys[self.order]
        new = np.r_[True, ordered[1:] != ordered[:-1]] if len(ys) else np.zeros(0, dtype=bool)
        self.values = ordered[new]
        self.rank = np.empty(len(ys), np.int64)
        self.rank[self.order] = np.cumsum(new) - 1

    def negated(self) -> _Ranking:
        """The ranking of -ys (reversed; ties stay together)."""
        out = _Ranking.__new__(_Ranking)
        out.order, out.values = self.order[::-1].copy(), -self.values[::-1]
        out.rank = len(self.values) - 1 - self.rank
        return out

    def by_lane(self, lanes: I64, copies: int = 1) -> I64:
        """Rows (of ``copies`` stacked copies of the column, lanes given for all of them) sorted by (lane, value);
        a lane draws its rows from one copy only."""
        n = len(self.order)
        in_value_order = np.concatenate([self.order + c * n for c in range(copies)])
        small = lanes.astype(np.uint16) if len(lanes) and int(lanes.max()) < 1 << 16 else lanes
        return in_value_order[np.argsort(small[in_value_order], kind="stable")]  # radix sort on small lanes


class _RankedKeys:
    """Sorted (lane, y) pairs as one int64 key each, ``lane * (U + 1) + rank(y)``: a per-lane binary search is one
    ``searchsorted`` for any number of lanes, exact for any int64 ``y`` (ranks, not values, enter the key)."""

    def __init__(self, lanes: I64, ranks: I64, values: I64) -> None:
        """``lanes`` and the ``ranks`` of y in ``values`` (sorted, distinct), sorted by (lane, y)."""
        self.lanes = lanes
        self.values = values
        self.stride = len(values) + 1
        self.keys = lanes * self.stride + ranks

    def count_at_most(self, lanes: I64, q: I64 | int) -> I64:
        """The index one past the last (lane, y <= q) of each lane: where that lane's y > q begins (``q`` one
        bound per lane, or one for all: then it is ranked once)."""
        rank = np.searchsorted(self.values, q, "right") - 1  # the rank of the largest value <= q (-1: none)
        return np.searchsorted(self.keys, lanes * self.stride + rank, "right")


CHECKPOINT_EVERY = 1024  # points of a group between two rows of a _DecayedSums table (the longest tail a query sums)
TABLE_ENTRIES = 1 << 22  # rows x lanes of one table at most (32 MB): past that, rows come every more points


class _DecayedSums:
    """Points (group, lane, y, weight): Σ_{y_j <= q} w_j exp(-k (q - y_j)) for every lane of one group at once.

    The points are sorted by (group, y). Every ``CHECKPOINT_EVERY`` points of a group a table row holds each
    lane's sum over the group's points so far, decayed to the row's last y. A query is one binary search in
    the group's ys, the row below it decayed to q (one ``exp`` for all lanes), plus the at most
    ``CHECKPOINT_EVERY`` points between that row and q, summed per lane with one ``bincount``: contiguous
    slices, no search per lane. Every term is a non-negative weight times a factor in (0, 1]: nothing
    cancels, nothing overflows.
    """

    def __init__(self, groups: I64, lanes: I64, ys: I64, weights: F64, k: float, order: I64,
                 n_groups: int, n_lanes: int) -> None:
        """``order`` sorts the points by (group, y); groups in [0, n_groups), lanes in [0, n_lanes)."""
        every = self.every = max(CHECKPOINT_EVERY, -(-len(ys) * n_lanes // TABLE_ENTRIES))
        self.k, self.n_lanes = k, n_lanes
        g = groups[order]
        self.lanes, self.ys = lanes[order], ys[order]
        self.weights = np.asarray(weights[order], dtype=np.float64)
        self.bounds = np.searchsorted(g, np.arange(n_groups + 1, dtype=np.int64))  # group i: [bounds[i], bounds[i+1])
        counts = np.diff(self.bounds) // every  # each group's table rows
        self.first_row = np.r_[0, np.cumsum(counts)]
        rows = int(self.first_row[-1])
        self.table = np.zeros((rows, n_lanes))
        self.row_y = np.zeros(rows, np.int64)  # the y each row is decayed to: its block's last point
        if not rows:
            return
        # the points inside full blocks, with their row
        pos = np.arange(len(g), dtype=np.int64) - self.bounds[g]
        block = pos // every
        inside = block < counts[g]
        row_of = (self.first_row[g] + block)[inside]
        last = np.empty(rows, np.int64)
        for i in np.flatnonzero(counts).tolist():
            start, n_rows = int(self.bounds[i]), int(counts[i])
            last[self.first_row[i]:self.first_row[i] + n_rows] = start + every * np.arange(1, n_rows + 1) - 1
        self.row_y = self.ys[last]
        y_in, w_in, lane_in = self.ys[inside], self.weights[inside], self.lanes[inside]
        decayed = w_in * np.exp(-k * (self.row_y[row_of] - y_in).astype(np.float64))
        blocks = np.bincount(row_of * n_lanes + lane_in, weights=decayed, minlength=rows * n_lanes)
        blocks = blocks.reshape(rows, n_lanes)
        # carry each group's rows forward: row r = row r-1 decayed to row r's y, plus its block
        continues = np.ones(rows, dtype=bool)
        continues[self.first_row[:-1][counts > 0]] = False
        factor = np.exp(-k * np.where(continues, self.row_y - np.r_[self.row_y[:1], self.row_y[:-1]], 0)
                        .astype(np.float64))
        table = self.table
        previous = np.zeros(n_lanes)
        for r in range(rows):
            previous = previous * factor[r] + blocks[r] if continues[r] else blocks[r]
            table[r] = previous

    def at(self, group: int, q: int) -> F64:
        """Σ_{y_j <= q} w_j exp(-k (q - y_j)) over the group's points, per lane (an array of ``n_lanes``)."""
        if group < 0 or group + 1 >= len(self.bounds):
            return np.zeros(self.n_lanes)
        lo, hi = int(self.bounds[group]), int(self.bounds[group + 1])
        i = lo + int(np.searchsorted(self.ys[lo:hi], q, "right"))  # points [lo, i) have y <= q
        row = (i - lo) // self.every
        if row:
            r = int(self.first_row[group]) + row - 1
            start = lo + row * self.every
            base = self.table[r] * math.exp(-self.k * (q - int(self.row_y[r])))
        else:
            start, base = lo, None
        if i > start:
            tail = self.weights[start:i] * np.exp(-self.k * (q - self.ys[start:i]).astype(np.float64))
            sums = np.asarray(np.bincount(self.lanes[start:i], weights=tail, minlength=self.n_lanes), np.float64)
            return sums if base is None else np.asarray(base + sums, dtype=np.float64)
        return np.zeros(self.n_lanes) if base is None else np.asarray(base, dtype=np.float64)


class ClusterCostIndex:
    """Every server's summed cost of a segment in one pass; exact, built in bulk, updated through a small delta."""

    def __init__(self, servers: Sequence[str], starts: I64, ends: I64, server_of: I64, source_of: I64,
                 sources: Sequence[str], segments: Sequence[SegmentDescriptor],
                 model: CostModel | None = None) -> None:
        """Columns of equal length, one row per (server, segment): the bulk path, from arrays.

        ``server_of``/``source_of`` index ``servers``/``sources``; ``segments`` are the rows' descriptors
        (read only to tell a segment from another with the same interval). A server's rows are distinct
        segments, as a placement is.
        """
        n = len(starts)
        if not (len(ends) == len(server_of) == len(source_of) == len(segments) == n):
            raise ValueError("index columns: starts, ends, server_of, source_of and segments differ in length")
        if n and bool(np.any(ends <= starts)):
            bad = int(np.flatnonzero(ends <= starts)[0])
            raise ValueError(f"index columns: row {bad} has an empty interval [{starts[bad]}, {ends[bad]})")
        self.model = model or CostModel()
        self.servers = tuple(servers)
        self._server_at = {name: i for i, name in enumerate(self.servers)}
        self.sources = list(sources)
        self._source_at = {name: i for i, name in enumerate(self.sources)}
        self.starts, self.ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        self.server_of, self.source_of = np.asarray(server_of, np.int64), np.asarray(source_of, np.int64)
        self.segments = segments
        lam = self.model.lam
        k = lam / MILLIS_PER_HOUR
        weights = -np.expm1(-k * (self.ends - self.starts).astype(np.float64))
        m = len(self.servers)
        # group 0: every row, lane = its server; group 1 + d: data source d's rows, lane = their server
        groups = np.r_[np.zeros(n, np.int64), 1 + self.source_of]
        lanes = np.r_[self.server_of, self.server_of]
        n_groups = 1 + len(self.sources)
        by_start, by_end = _Ranking(self.starts), _Ranking(self.ends)
        twice = np.r_[weights, weights]
        self._left = _DecayedSums(groups, lanes, np.r_[self.ends, self.ends], twice, k,
                                  by_end.by_lane(groups, copies=2), n_groups, m)
        self._right = _DecayedSums(groups, lanes, -np.r_[self.starts, self.starts], twice, k,
                                   by_start.negated().by_lane(groups, copies=2), n_groups, m)
        # b < 2^c for c the binary exponent of float(b) (rounding is monotone): Y overlaps [s, t) only if y0 > s - 2^c
        length_class = np.frexp((self.ends - self.starts).astype(np.float64))[1].astype(np.int64)
        self._by_class = by_start.by_lane(length_class)
        self._classes = np.unique(length_class)
        self._class_search = _RankedKeys(length_class[self._by_class], by_start.rank[self._by_class], by_start.values)
        self._by_server = by_start.by_lane(self.server_of)
        self._server_search = _RankedKeys(self.server_of[self._by_server], by_start.rank[self._by_server],
                                          by_start.values)
        self._live = np.ones(n, dtype=bool)
        self._removed = _Column(np.int64)  # static rows no longer held (their decayed sums still count them)
        # added rows: columns by slot, the descriptor and (server, id) -> slot; removal moves the last slot in
        self._add_start, self._add_end = _Column(np.int64), _Column(np.int64)
        self._add_server, self._add_source = _Column(np.int64), _Column(np.int64)
        self._add_segments: list[SegmentDescriptor] = []
        self._add_slot: dict[tuple[int, SegmentId], int] = {}
        self._delta_work = 0  # delta rows summed by queries since this build (see REBUILD_QUERY_WORK)
        #: With ``deferred_rebuilds``, a rebuild that pays is not done here: ``rebuild_due`` says so, and the caller
        #: builds one elsewhere (:meth:`begin_rebuild`, :func:`build_index`, :meth:`adopt`). A server the index
        #: does not have yet is still rebuilt at once (it needs lanes).
        self.deferred_rebuilds = False
        self.rebuild_due = False
        # the changes since :meth:`begin_rebuild`, in order, for :meth:`adopt` (None: no rebuild under way)
        self._since_begun: list[tuple[list[tuple[str, SegmentDescriptor]], list[tuple[str, SegmentId]]]] | None = None

    @classmethod
    def build(cls, placement: Mapping[str, Iterable[SegmentDescriptor]],
              model: CostModel | None = None) -> ClusterCostIndex:
        """The index of ``{server: its distinct segments}`` (servers in name order)."""
        servers = sorted(placement)
        held = [list(placement[name]) for name in servers]
        segments = [seg for group in held for seg in group]
        n = len(segments)
        source_at: dict[str, int] = {}
        source_of = np.fromiter((source_at.setdefault(seg.data_source, len(source_at)) for seg in segments),
                                np.int64, n)
        starts = np.fromiter((seg.interval.start for seg in segments), np.int64, n)
        ends = np.fromiter((seg.interval.end for seg in segments), np.int64, n)
        server_of = np.repeat(np.arange(len(servers), dtype=np.int64), [len(group) for group in held])
        return cls(servers, starts, ends, server_of, source_of, list(source_at), segments, model)

    def __len__(self) -> int:
        return int(np.count_nonzero(self._live)) + len(self._add_segments)

    @property
    def static_rows(self) -> int:
        """Rows of the last bulk build (live or not): what the delta's size is measured against."""
        return len(self.starts)

    def delta_size(self) -> int:
        """Rows in the delta (added, plus static rows removed) since the last bulk build."""
        return len(self._add_segments) + len(self._removed)

    # -- queries -----------------------------------------------------------------
    def costs_of(self, segment: SegmentDescriptor) -> F64:
        """Σ cost(segment, y) over each server's segments y (in :attr:`servers` order), the segment itself excluded."""
        s, t = segment.interval.start, segment.interval.end
        m = len(self.servers)
        lam = self.model.lam
        k = lam / MILLIS_PER_HOUR
        factor = self.model.same_source_factor
        source = self._source_at.get(segment.data_source, -1)
        far = self._left.at(0, s) + self._right.at(0, -t)
        if source >= 0:
            far = far + (factor - 1.0) * (self._left.at(1 + source, s) + self._right.at(1 + source, -t))
        total = (-math.expm1(-k * (t - s)) / (lam * lam)) * far
        rows = self._overlapping(s, t)
        if len(rows):
            same = self.source_of[rows] == source
            values = costs(segment.interval, self.starts[rows], self.ends[rows], same, self.model)
            self._mask_self(values, rows, segment, s, t, source)
            total = total + np.bincount(self.server_of[rows], weights=values, minlength=m)
        if len(self._removed) or self._add_segments:
            total = self._apply_delta(total, segment)
            self._delta_work += self.delta_size()
            if self._delta_work > REBUILD_QUERY_WORK * (len(self.starts) + len(self._add_segments)):
                self._pays()  # the queries since the last build have paid for one: the next ones are cheaper
        return np.asarray(total, dtype=np.float64)

    def cheapest(self, segment: SegmentDescriptor, candidates: Iterable[str] | None = None) -> str | None:
        """The candidate server (all servers by default) where ``segment`` costs least; ties go to the first name."""
        values = self.costs_of(segment)
        if candidates is not None:
            mask = np.zeros(len(self.servers), dtype=bool)
            picked = [self._server_at[name] for name in candidates if name in self._server_at]
            mask[picked] = True
            values = np.where(mask, values, np.inf)
        if not len(values) or not np.isfinite(values).any():
            return None
        return self.servers[int(np.argmin(values))]

    def _overlapping(self, s: int, t: int) -> I64:
        """Rows (live, static) of segments with y0 < t and y1 > s."""
        if not len(self._classes):
            return np.zeros(0, np.int64)
        lower = np.array([max(s - (1 << c), -(1 << 63)) for c in self._classes.tolist()], np.int64)
        first = self._class_search.count_at_most(self._classes, lower)
        stop = self._class_search.count_at_most(self._classes, t - 1)
        lengths = stop - first
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, np.int64)
        offsets = np.repeat(first - (np.cumsum(lengths) - lengths), lengths)
        rows = self._by_class[offsets + np.arange(total)]
        keep = (self.ends[rows] > s) & self._live[rows]
        return rows[keep]

    def _mask_self(self, values: F64, rows: I64, segment: SegmentDescriptor, s: int, t: int, source: int) -> None:
        candidates = np.flatnonzero((self.starts[rows] == s) & (self.ends[rows] == t)
                                    & (self.source_of[rows] == source))
        for i in candidates.tolist():
            if self.segments[int(rows[i])].id == segment.id:
                values[i] = 0.0  # masked, not subtracted

    # -- updates -----------------------------------------------------------------
    def _row(self, k: int, segment_id: SegmentId) -> int | None:
        """The live static row of ``segment_id`` on server ``k``, found by a binary search on (server, start)."""
        return self._rows_of([(k, segment_id)])[0]

    def _rows_of(self, pairs: Sequence[tuple[int, SegmentId]]) -> list[int | None]:
        """The live static row of each (server index, segment id), or None: one vectorized binary search on
        (server, start) for all of them, then the rows with that start compared by id."""
        out: list[int | None] = [None] * len(pairs)
        if not pairs or not len(self.starts):
            return out
        n = len(pairs)
        lanes = np.fromiter((k for k, _ in pairs), np.int64, n)
        starts = np.fromiter((sid.interval.start for _, sid in pairs), np.int64, n)
        lo = self._server_search.count_at_most(lanes, starts - 1)
        hi = self._server_search.count_at_most(lanes, starts)
        for i in np.flatnonzero(hi > lo).tolist():
            sid = pairs[i][1]
            for j in range(int(lo[i]), int(hi[i])):
                row = int(self._by_server[j])
                if self._live[row] and self.segments[row].id == sid:
                    out[i] = row
                    break
        return out

    def holds(self, server: str, segment_id: SegmentId) -> bool:
        k = self._server_at.get(server)
        if k is None:
            return False
        return (k, segment_id) in self._add_slot or self._row(k, segment_id) is not None

    def add(self, server: str, segment: SegmentDescriptor) -> None:
        """``server`` now holds ``segment`` (no-op when it already does): O(log n) amortised."""
        if self._since_begun is not None:
            self._since_begun.append(([(server, segment)], []))
        k = self._server_at.get(server)
        if k is None:
            self._rebuild(extra_servers=[server])
            k = self._server_at[server]
        if self.holds(server, segment.id):
            return
        self._append(k, segment)
        self._maybe_rebuild()

    def remove(self, server: str, segment_id: SegmentId) -> None:
        """``server`` no longer holds the segment (no-op when it does not): O(log n) amortised."""
        if self._since_begun is not None:
            self._since_begun.append(([], [(server, segment_id)]))
        k = self._server_at.get(server)
        if k is None:
            return
        if self._drop_added(k, segment_id):
            return
        row = self._row(k, segment_id)
        if row is None:
            return
        self._live[row] = False
        self._removed.append(row)
        self._maybe_rebuild()

    def update(self, added: Iterable[tuple[str, SegmentDescriptor]] = (),
               removed: Iterable[tuple[str, SegmentId]] = ()) -> None:
        """Many changes at once: the ``removed`` (server, segment id) pairs leave, then the ``added`` (server,
        segment) pairs enter (each a no-op when already so), as :meth:`remove` and :meth:`add` one by one would
        leave the pairs held, with one vectorized binary search for all the static rows they name and at most
        one rebuild, at the end (new servers: one before). O(d log n) for d changes, the loop over them in
        Python a dict lookup and an append each: never a pass over the rows held."""
        added, removed = list(added), list(removed)
        if self._since_begun is not None:
            self._since_begun.append((added, removed))
        new = sorted({name for name, _ in added if name not in self._server_at})
        if new:
            self._rebuild(extra_servers=new)
        static: list[tuple[int, SegmentId]] = []
        for name, sid in removed:
            k = self._server_at.get(name)
            if k is not None and not self._drop_added(k, sid):
                static.append((k, sid))
        for row in self._rows_of(static):
            if row is not None and self._live[row]:  # a pair named twice is removed once
                self._live[row] = False
                self._removed.append(row)
        entering = [(self._server_at[name], seg) for name, seg in added]
        rows = self._rows_of([(k, seg.id) for k, seg in entering])
        for (k, seg), row in zip(entering, rows, strict=True):
            if row is None and (k, seg.id) not in self._add_slot:
                self._append(k, seg)
        self._maybe_rebuild()

    def _append(self, k: int, segment: SegmentDescriptor) -> None:
        """A row of the delta: server ``k`` holds ``segment`` (not held before)."""
        source = self._source_at.get(segment.data_source)
        if source is None:  # a new data source: its lanes are empty in the static part, the delta carries it
            source = self._source_at[segment.data_source] = len(self.sources)
            self.sources.append(segment.data_source)
        self._add_slot[(k, segment.id)] = len(self._add_segments)
        self._add_segments.append(segment)
        self._add_start.append(segment.interval.start)
        self._add_end.append(segment.interval.end)
        self._add_server.append(k)
        self._add_source.append(source)

    def _drop_added(self, k: int, segment_id: SegmentId) -> bool:
        """Take (server ``k``, the segment) out of the delta's added rows, if it is one (the last slot fills the
        hole)."""
        slot = self._add_slot.pop((k, segment_id), None)
        if slot is None:
            return False
        last = len(self._add_segments) - 1
        if slot != last:
            moved = self._add_segments[last]
            self._add_segments[slot] = moved
            self._add_slot[(int(self._add_server.values[last]), moved.id)] = slot
            for column in (self._add_start, self._add_end, self._add_server, self._add_source):
                column.values[slot] = column.values[last]
        self._add_segments.pop()
        for column in (self._add_start, self._add_end, self._add_server, self._add_source):
            column.pop()
        return True

    def _maybe_rebuild(self) -> None:
        if self.delta_size() > index_rebuild_size(len(self.starts)):
            self._pays()
        elif self.deferred_rebuilds and self.delta_size() > DEFERRED_REBUILD_SHARE * len(self.starts) + REBUILD_BASE:
            # built elsewhere, a rebuild costs the caller nothing but the hand-over: done long before the queries
            # (about 50 ns per delta row each) would have paid for one
            self.rebuild_due = True

    def _pays(self) -> None:
        """A rebuild pays now: done here, or only noted (``rebuild_due``) with ``deferred_rebuilds``."""
        if self.deferred_rebuilds:
            self.rebuild_due = True
        else:
            self._rebuild()

    def begin_rebuild(self) -> RebuildInputs:
        """What a rebuild reads, taken now (copies of everything that changes in place; O(rows) for the live mask,
        O(delta) for the rest): :func:`build_index` of it, on any thread, is the bulk build of the pairs held now.
        The changes made from here on are kept for :meth:`adopt`. A rebuild begun earlier and not adopted is
        forgotten."""
        n_add = len(self._add_segments)
        self._since_begun = []
        self.rebuild_due = False
        return RebuildInputs(
            servers=self.servers, sources=tuple(self.sources), model=self.model, live=np.flatnonzero(self._live),
            starts=self.starts, ends=self.ends, server_of=self.server_of, source_of=self.source_of,
            segments=self.segments, add_start=self._add_start.values[:n_add].copy(),
            add_end=self._add_end.values[:n_add].copy(), add_server=self._add_server.values[:n_add].copy(),
            add_source=self._add_source.values[:n_add].copy(), add_segments=tuple(self._add_segments))

    def abandon_rebuild(self) -> None:
        """Forget the rebuild begun (its build failed): it is due again."""
        self._since_begun, self.rebuild_due = None, True

    @property
    def rebuilding(self) -> bool:
        """Whether a rebuild was begun (:meth:`begin_rebuild`) and not adopted yet."""
        return self._since_begun is not None

    def adopt(self, built: ClusterCostIndex) -> None:
        """Take ``built`` (:func:`build_index` of this index's :meth:`begin_rebuild`) as this index, then apply the
        changes made since it was begun, in order: afterwards the index holds what it would have held without the
        rebuild, and answers as a bulk build of those pairs plus their delta does."""
        if self._since_begun is None:
            raise ValueError("adopt() without begin_rebuild(): nothing was begun")
        since, deferred = self._since_begun, self.deferred_rebuilds
        self.__dict__.update(built.__dict__)
        self.deferred_rebuilds, self.rebuild_due, self._since_begun = deferred, False, None
        for added, removed in since:
            self.update(added=added, removed=removed)

    def _rebuild(self, extra_servers: Iterable[str] = ()) -> None:
        """The bulk build again, from the columns (live static rows, then the added ones): no descriptor is read."""
        live = np.flatnonzero(self._live)
        n_add = len(self._add_segments)
        starts = np.r_[self.starts[live], self._add_start.values[:n_add]]
        ends = np.r_[self.ends[live], self._add_end.values[:n_add]]
        server_of = np.r_[self.server_of[live], self._add_server.values[:n_add]]
        source_of = np.r_[self.source_of[live], self._add_source.values[:n_add]]
        segments = [self.segments[row] for row in live.tolist()] + self._add_segments
        servers = list(self.servers)
        extra = {name for name in extra_servers if name not in self._server_at}
        if extra:
            servers = sorted([*servers, *extra])
            position = np.array([servers.index(name) for name in self.servers], np.int64)
            server_of = position[server_of] if len(server_of) else server_of
        fresh = ClusterCostIndex(servers, starts, ends, server_of, source_of, self.sources, segments, self.model)
        deferred, since = self.deferred_rebuilds, self._since_begun
        self.__dict__.update(fresh.__dict__)
        # a rebuild under way stays under way: the changes since it began are still to apply to what it builds
        self.deferred_rebuilds, self._since_begun = deferred, since

    def _apply_delta(self, total: F64, segment: SegmentDescriptor) -> F64:
        m = len(self.servers)
        source = self._source_at.get(segment.data_source, -1)
        snapshot = total
        rows = self._removed.values[:len(self._removed)]
        s, t = segment.interval.start, segment.interval.end
        rows = rows[(self.ends[rows] <= s) | (self.starts[rows] >= t)]  # overlapping ones were skipped, not summed
        if len(rows):
            values = costs(segment.interval, self.starts[rows], self.ends[rows], self.source_of[rows] == source,
                           self.model)
            total = total - np.bincount(self.server_of[rows], weights=values, minlength=m)
            shaky = np.flatnonzero(total < CANCEL_GUARD * snapshot)
            if len(shaky):  # the subtraction cancelled: those servers are summed again, exactly
                total = total.copy()
                for k in shaky.tolist():
                    total[k] = self._static_brute(k, segment)
        n_add = len(self._add_segments)
        if n_add:
            servers = self._add_server.values[:n_add]
            starts, ends = self._add_start.values[:n_add], self._add_end.values[:n_add]
            values = costs(segment.interval, starts, ends, self._add_source.values[:n_add] == source, self.model)
            for slot in np.flatnonzero((starts == s) & (ends == t)).tolist():
                if self._add_segments[slot].id == segment.id:
                    values[slot] = 0.0  # masked, not subtracted
            total = total + np.bincount(servers, weights=values, minlength=m)
        return total

    def _static_brute(self, k: int, segment: SegmentDescriptor) -> float:
        rows = np.flatnonzero((self.server_of == k) & self._live)
        source = self._source_at.get(segment.data_source, -1)
        values = costs(segment.interval, self.starts[rows], self.ends[rows], self.source_of[rows] == source,
                       self.model)
        self._mask_self(values, rows, segment, segment.interval.start, segment.interval.end, source)
        return float(np.sum(values))


@dataclass(frozen=True)
class RebuildInputs:
    """What :meth:`ClusterCostIndex.begin_rebuild` took: the index's columns at that moment (arrays the index only
    ever replaces, never changes in place, are shared; the others are copies)."""

    servers: tuple[str, ...]
    sources: tuple[str, ...]
    model: CostModel
    live: I64
    starts: I64
    ends: I64
    server_of: I64
    source_of: I64
    segments: Sequence[SegmentDescriptor]
    add_start: I64
    add_end: I64
    add_server: I64
    add_source: I64
    add_segments: tuple[SegmentDescriptor, ...]


def build_index(inputs: RebuildInputs) -> ClusterCostIndex:
    """The bulk build of the pairs :meth:`ClusterCostIndex.begin_rebuild` took: reads nothing but ``inputs``, so it
    may run on another thread while the index goes on being used and changed (NumPy's sorts release the GIL)."""
    live = inputs.live
    segments = [inputs.segments[row] for row in live.tolist()]
    segments.extend(inputs.add_segments)
    return ClusterCostIndex(inputs.servers, np.r_[inputs.starts[live], inputs.add_start],
                            np.r_[inputs.ends[live], inputs.add_end], np.r_[inputs.server_of[live], inputs.add_server],
                            np.r_[inputs.source_of[live], inputs.add_source], list(inputs.sources), segments,
                            inputs.model)


DEFERRED_REBUILD_SHARE = 0.1  # with deferred rebuilds: one is due once the delta holds this share of the index's rows
REBUILD_BASE = 1024  # the delta may hold this many rows, plus as many as the last build had, between builds
REBUILD_QUERY_WORK = 12  # delta rows summed by queries, per row of the index, that pay for a rebuild (measured:
# a rebuild from the columns costs about 0.6 µs a row, a query about 50 ns per delta row)


def index_rebuild_size(rows: int) -> int:
    """How many delta rows an index of ``rows`` static rows holds before it is built again in bulk: as many as it
    has (plus ``REBUILD_BASE``), so the index doubles at most between two builds and a row is sorted again
    O(1) times per doubling: O(log n) amortised per update."""
    return REBUILD_BASE + rows


class _Column:
    """A growable one-dimensional array (amortised O(1) append and pop)."""

    def __init__(self, dtype: type[np.int64]) -> None:
        self.values: I64 = np.zeros(64, dtype)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, value: int) -> None:
        if self._n == len(self.values):
            self.values = np.r_[self.values, np.zeros(len(self.values), self.values.dtype)]
        self.values[self._n] = value
        self._n += 1

    def pop(self) -> None:
        self._n -= 1
