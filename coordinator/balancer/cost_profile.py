"""A frozen coverage profile: the summed cost of one interval against a fixed multiset of intervals from point values.

The summed joint cost against a multiset of intervals depends only on its
**coverage** m(y), the number of held intervals containing instant y, a step
function with a breakpoint p_i at every bound (m_i on [p_i, p_{i+1})). With
u = λ·t (so the kernel is exp(-|u - v|)), the potential of the coverage,
V(q) = ∫ m(y) e^{-|q - y|} dy = Lpot(q) + Rpot(q), satisfies V'' = V - 2m, so
for X = [s, t) of length a::

    λ² Σ_Y I(X, Y) = ∫_s^t V = 2·Mass(s, t) + (Lpot(s) - Rpot(s)) - (Lpot(t) - Rpot(t))     (two-point form)
                  = f(a)·(Lpot(s) + Rpot(t)) + Σ_{pieces in X} m_i·J_i                      (inside form)

    Lpot(q) = ∫_{y<q} m(y) e^{-(q-y)} dy,   Rpot(q) = ∫_{y>=q} m(y) e^{-(y-q)} dy,   f(u) = 1 - e^{-u},
    J = ∫_{piece ∩ X} f(y - s) + f(t - y) dy

Every term is a value at s or t: at the breakpoints Lpot and Rpot are decayed
running sums of non-negative terms (Lpot_{i+1} = Lpot_i·e^{-w_i} + m_i·f(w_i)),
computed by a doubling scan (about log2 n rounding steps whatever n, no
subtraction, no positive exponent), and the cumulative mass is an exact integer
(count x milliseconds). A query is two binary searches and a few ``exp``: no
walk, no loop over the intervals that overlap X.

**Precision.** The inside form is a sum of non-negative terms (relative error a
few ε). The two-point form subtracts: its absolute error is at most
``EPS_POINT`` times the sum of its operands, while the value is at least f(a)
times them, so it cancels only for short queries (f(a) small, seconds long).
:meth:`CoverageProfile.total` returns the value with a bound on its absolute
error: the two-point form when that bound is within ``TOLERANCE`` of the value,
else the inside form when X holds at most ``SHORT_PIECES`` pieces, else None
(the caller then asks an exact structure that can afford it, the coverage tree).

**Invariants.** The profile never changes once built (updates belong to its
owner, see :class:`~coordinator.balancer.cost_cache.ServerCostCache`); bounds are
any int64 instants (Druid's "all time" included: differences of milliseconds
enter ``exp`` only as ``-k·d <= 0``, and the mass between two points is an exact integer, from int64
cumulative masses modulo 2^64 and, past 2^62 in all, float sums that tell the multiple of 2^64).

>>> import numpy as np
>>> from coordinator.balancer.cost import decay_rate, interval_joint_cost
>>> day = 86_400_000
>>> profile = CoverageProfile(np.array([0, day]), np.array([day, 2 * day]), np.array([1, 1]), decay_rate(24))
>>> value, error = profile.total(day // 2, 3 * day // 2)
>>> exact = interval_joint_cost(day // 2, 3 * day // 2, 0, day, decay_rate(24)) * 2
>>> abs(value - exact) <= 1e-12 * exact, error < 1e-11 * value
(True, True)
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import numpy.typing as npt

from coordinator.balancer.cost import MILLIS_PER_HOUR, _self

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

EPS_POINT = 256 * 2.0**-53  # relative error of a point value (doubling scan: ~3 ε a level, ~22 levels, and the query)
TOLERANCE = 1e-11  # the two-point form answers when its error bound is at most this share of its value
SHORT_PIECES = 24  # the inside form sums at most this many pieces in Python
_RATIO = EPS_POINT / TOLERANCE


def decayed_scan(points: I64, weights: F64, k: float, groups: I64 | None = None) -> F64:
    """S_i = Σ_{j <= i} weights_j · exp(-k (points_i - points_j)) for sorted ``points``, by doubling; with
    ``groups`` (points sorted within each run of equal groups), j ranges over i's group only.

    Level l adds to S_i the partial sum ending at i - 2^l, decayed across the gap: every term is a
    non-negative weight times a factor in [0, 1], each level adds about 3 ε of relative error.
    """
    out = np.array(weights, dtype=np.float64)
    h, n = 1, len(out)
    while h < n:
        gaps = (points[h:] - points[:-h]).astype(np.float64)
        if groups is None:
            out[h:] += np.exp(-k * gaps) * out[:-h]
        else:
            out[h:] += np.where(groups[h:] == groups[:-h], np.exp(-k * np.maximum(gaps, 0.0)), 0.0) * out[:-h]
        h *= 2
    return out


class CoverageProfile:
    """The coverage of a frozen multiset of intervals, answering Σ joint cost against any interval in O(log n).

    A profile is a range ``lo .. last`` of point arrays it may share with the other profiles of
    :meth:`grouped` (one build for many multisets)."""

    __slots__ = ("counts", "k", "lam", "last", "lo", "lpot", "mass", "points", "rpot", "scale", "search", "segments",
                 "top", "wide")

    def __init__(self, starts: I64, ends: I64, counts: I64, lam: float) -> None:
        """Intervals [starts_j, ends_j) held counts_j (> 0) times each; λ per hour."""
        counts = np.asarray(counts, np.int64)
        points, _ = self._build(np.asarray(starts, np.int64), np.asarray(ends, np.int64), counts, None, lam)
        self.segments = int(counts.sum()) if len(counts) else 0
        self.lo, self.last = 0, len(points) - 1
        self.search = points.searchsorted  # both bounds in one call: points is int64, sorted, distinct

    @classmethod
    def grouped(cls, starts: I64, ends: I64, groups: I64, lam: float) -> dict[int, CoverageProfile]:
        """One profile per group (a non-negative int) of the intervals [starts_j, ends_j) of group groups_j, each
        held once, built in one pass: the same answers as one profile built per group."""
        groups = np.asarray(groups, np.int64)
        if not len(groups):
            return {}
        base = object.__new__(cls)
        points, owner = base._build(np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                                    np.ones(len(groups), np.int64), groups, lam)
        assert owner is not None
        present = np.unique(groups)
        los = np.searchsorted(owner, present, "left").tolist()
        his = np.searchsorted(owner, present, "right").tolist()
        sizes = np.bincount(groups)[present].tolist()
        out: dict[int, CoverageProfile] = {}
        for group, lo, hi, size in zip(present.tolist(), los, his, sizes, strict=True):
            view = object.__new__(cls)
            for name in ("counts", "k", "lam", "lpot", "mass", "points", "rpot", "scale", "top", "wide"):
                setattr(view, name, getattr(base, name))
            view.segments, view.lo, view.last = size, lo, hi - 1
            view.search = points[lo:hi].searchsorted
            out[group] = view
        return out

    def _build(self, starts: I64, ends: I64, counts: I64, groups: I64 | None,
               lam: float) -> tuple[I64, I64 | None]:
        """Fill the shared arrays; return the sorted points and, with ``groups``, the group of each point (points
        are then sorted by (group, point), and nothing decays across groups)."""
        self.lam, self.k = lam, lam / MILLIS_PER_HOUR
        self.scale = 1.0 / (lam * lam)  # u² to hours²
        k = self.k
        owner: I64 | None = None
        if not len(starts):
            points: I64 = np.zeros(0, np.int64)
            m: I64 = np.zeros(0, np.int64)
        elif groups is None:
            points, inverse = np.unique(np.r_[starts, ends], return_inverse=True)
            steps = np.bincount(inverse, weights=np.r_[counts, -counts].astype(np.float64), minlength=len(points))
            m = np.cumsum(np.rint(steps).astype(np.int64))  # m[i] on [p_i, p_{i+1}); the last is 0
        else:
            bounds, tags = np.r_[starts, ends], np.r_[groups, groups]
            order = np.argsort(bounds)
            small = tags[order].astype(np.uint16) if int(tags.max()) < 1 << 16 else tags[order]
            order = order[np.argsort(small, kind="stable")]  # by (group, bound): a radix sort of the groups
            bounds, tags = bounds[order], tags[order]
            first = np.empty(len(bounds), bool)
            first[0] = True
            first[1:] = (bounds[1:] != bounds[:-1]) | (tags[1:] != tags[:-1])
            points, owner = bounds[first], tags[first]
            steps = np.bincount(np.cumsum(first) - 1, weights=np.r_[counts, -counts][order].astype(np.float64),
                                minlength=len(points))
            m = np.cumsum(np.rint(steps).astype(np.int64))  # each group's coverage ends at 0 on its last point
        n = len(points)
        widths = np.diff(points)
        if owner is not None:
            widths = np.where(owner[1:] == owner[:-1], widths, 0)  # no piece between two groups
        pieces: F64 = np.asarray(m[:-1] * -np.expm1(-k * widths.astype(np.float64)) if n else np.zeros(0), np.float64)
        # Lpot_i = Σ_{j < i} piece_j · exp(-k (p_i - p_{j+1})): piece j enters at its right edge
        self.lpot = array("d", decayed_scan(points, np.r_[0.0, pieces] if n else pieces, k, owner).tobytes())
        # Rpot_i = Σ_{j >= i} piece_j · exp(-k (p_j - p_i)): the same scan on the reflected axis
        reflected = decayed_scan(-points[::-1], np.r_[0.0, pieces[::-1]] if n else pieces, k,
                                 None if owner is None else owner[::-1])
        self.rpot = array("d", reflected[::-1].tobytes())
        self.points = array("q", points.tobytes())
        self.counts = array("q", m.tobytes())
        masses = m[:-1].astype(np.float64) * widths.astype(np.float64) if n else np.zeros(0)
        # the cumulative mass (count x ms) as int64, wrapping modulo 2^64 past it (many "all time" intervals): a
        # difference of two is exact modulo 2^64, and the float sums (kept only then) tell the multiple of 2^64
        self.mass = array("q", np.r_[0, np.cumsum(m[:-1] * widths)].astype(np.int64).tobytes() if n else b"")
        self.wide: array[float] | None = (array("d", np.r_[0.0, np.cumsum(masses)].tobytes())
                     if n and float(masses.sum()) >= 2.0**62 else None)
        self.top = int(m.max()) if n else 0
        return points, owner

    def __len__(self) -> int:
        return self.segments

    def total(self, s: int, t: int) -> tuple[float, float] | None:
        """(Σ_Y ∫_s^t ∫_Y exp(-λ|x - y|) dy dx in hours², a bound on its absolute error) for s < t, or None when
        neither form is safe and cheap: the closed form is short of its precision (typically a query of seconds,
        or one over millisecond pieces beside all-time intervals) and the query spans ``SHORT_PIECES`` pieces or
        more."""
        lo, last = self.lo, self.last
        if last < lo:
            return 0.0, 0.0
        points, lpot, rpot, counts, mass = self.points, self.lpot, self.rpot, self.counts, self.mass
        k, exp, expm1 = self.k, math.exp, math.expm1
        i, j = self.search((s, t - 1), "right").tolist()  # the counts of points <= s and < t (integers)
        i += lo - 1  # s in [p_i, p_{i+1})
        j += lo - 1  # t in (p_j, p_{j+1}]
        # "L * exp(x) - c * expm1(x)" below is L e^{-u} + c f(u) with x = -u <= 0: non-negative terms
        if i < lo:
            ls, rs, cs = 0.0, rpot[lo] * exp(-k * (points[lo] - s)), mass[lo]
        elif i == last:
            d = s - points[i]
            ls, rs, cs = (lpot[i] * exp(-k * d) if d else lpot[i]), 0.0, mass[i]
        else:
            c, d = counts[i], s - points[i]
            if d:
                x = -k * d
                ls = lpot[i] * exp(x) - c * expm1(x)
            else:
                ls = lpot[i]
            x = -k * (points[i + 1] - s)
            rs, cs = rpot[i + 1] * exp(x) - c * expm1(x), mass[i] + c * d
        if j < lo:
            lt, rt, ct = 0.0, rpot[lo] * exp(-k * (points[lo] - t)), mass[lo]
        elif j == last:
            lt, rt, ct = lpot[j] * exp(-k * (t - points[j])), 0.0, mass[j]
        else:
            c, d, e = counts[j], t - points[j], points[j + 1] - t
            x = -k * d
            lt, ct = lpot[j] * exp(x) - c * expm1(x), mass[j] + c * d
            if e:
                x = -k * e
                rt = rpot[j + 1] * exp(x) - c * expm1(x)
            else:
                rt = rpot[j + 1]
        if self.wide is not None and (t - s) * self.top >= 1 << 62:
            two_mass = 2.0 * k * self._wide_mass(i, j, s, t, ct - cs)
        else:
            two_mass = 2.0 * k * (ct - cs)
        value = two_mass + ls - rs - lt + rt
        operands = two_mass + ls + rs + lt + rt
        scale = self.scale
        if operands * _RATIO <= value:  # the bound EPS_POINT * operands is within TOLERANCE of the value
            return value * scale, EPS_POINT * operands * scale
        if j - i >= SHORT_PIECES:
            return None
        return self._inside_form(i, j, s, t, ls, rt, 0)

    def total_without(self, s: int, t: int) -> tuple[float, float] | None:
        """:meth:`total` less one copy of [s, t) itself, which the profile must hold: the inside form with the
        count of every piece inside X lowered by one (the others' exact count), so nothing is subtracted however
        much of the sum X's own cost is (a server whose segments lie far apart). None past ``SHORT_PIECES``
        pieces inside X, or when the profile does not hold [s, t)."""
        points, lo, last = self.points, self.lo, self.last
        i, j = self.search((s, t - 1), "right").tolist()
        i += lo - 1
        j += lo - 1
        if i < lo or j >= last or points[i] != s or points[j + 1] != t or j - i >= SHORT_PIECES:
            return None
        return self._inside_form(i, j, s, t, self.lpot[i], self.rpot[j + 1], 1)

    def _inside_form(self, i: int, j: int, s: int, t: int, ls: float, rt: float,
                     less: int) -> tuple[float, float] | None:
        """f(a)·(Lpot(s) + Rpot(t)) + Σ (m_p - less)·J_p over the pieces p X meets (i..j): non-negative terms."""
        points, counts, k, expm1 = self.points, self.counts, self.k, math.expm1
        inside = 0.0
        for p in range(max(i, self.lo), min(j, self.last - 1) + 1):  # the pieces X meets
            c = counts[p] - less
            if c < 0:
                return None
            if c:
                lo, hi = max(points[p], s), min(points[p + 1], t)
                w = k * (hi - lo)
                inside += c * (_self(w) - expm1(-w) * -(expm1(-k * (lo - s)) + expm1(-k * (t - hi))))
        value = (-expm1(-k * (t - s)) * (ls + rt) + inside) * self.scale
        return value, EPS_POINT * value

    def _wide_mass(self, i: int, j: int, s: int, t: int, wrapped: int) -> int:
        """Mass(s, t) exactly from its value modulo 2^64 and the float cumulative masses (error far below 2^63)."""
        assert self.wide is not None
        wide, points, counts, lo, last = self.wide, self.points, self.counts, self.lo, self.last

        def cumulative(index: int, q: int) -> float:
            if index < lo:
                return wide[lo]
            return wide[index] + (counts[index] * float(q - points[index]) if index < last else 0.0)

        wrapped %= 1 << 64
        return wrapped + round((cumulative(j, t) - cumulative(i, s) - wrapped) / 2.0**64) * (1 << 64)
