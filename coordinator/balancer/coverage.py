"""Exponential moments of a coverage function on a dyadic grid: the engine of the exact per-server cost cache.

The joint cost is additive in both arguments, so the summed cost of a segment X
against every segment a server holds depends only on the server's **coverage**
m(y), the number of held segments containing instant y (u = λ·t below, so
the kernel is exp(-|u - v|))::

    Σ_Y ∫_X ∫_Y e^{-|x-y|} = f(a)·(Lpot(x0) + Rpot(x1)) + Inside(x0, x1)

    Lpot(t)   = ∫_{y<t}  m(y) e^{-(t-y)} dy      the mass to the left, as seen from t
    Rpot(t)   = ∫_{y>=t} m(y) e^{-(y-t)} dy      the mass to the right, as seen from t
    Inside    = ∫_X m(y) (f(y - x0) + f(x1 - y)) dy,        f(u) = 1 - e^{-u}

The tree covers a window of ``2^depth`` leaves of ``leaf`` milliseconds. A
segment adds +1 to the integer count of the O(depth) nodes that tile its
whole-leaf middle (the usual canonical cover) and a piece to each of the at most
two leaves it covers only in part. Each node keeps, relative to its own edges
[L, R), five moments of the coverage below it: Lpot(R), Rpot(L), the mass, and
∫ m f(y - L) and ∫ m f(R - y). A node is recomputed from its children and its
count, never updated by a difference.

**Invariants.** Every stored moment is a sum of non-negative terms, each
formed from millisecond differences inside the window (no exp of a large
positive number, no subtraction of floats, so removing a segment leaves no
rounding residue and nothing cancels); counts are exact integers. The parts
of segments outside the window (Druid's "all time", or a window that could not
grow) are kept whole in ``outside`` and costed by the scalar closed form.
Queries and updates visit O(depth) nodes.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter

import numpy as np
import numpy.typing as npt

from coordinator.balancer.cost import MILLIS_PER_HOUR, _self_vec, interval_joint_cost

# Window placement ignores bounds beyond ±10^13 ms (about the years 1653 and 2286):
# "all time" segments must not stretch the grid.
ANCHOR_LIMIT = 10**13
MAX_DEPTH = 20


def _f(u: float) -> float:
    return -math.expm1(-u)


def _s(u: float) -> float:
    """2 (u - 1 + e^-u) = 2 (u - f(u)), accurate for every u >= 0."""
    if u < 1e-2:
        return 2.0 * u * u * (0.5 - u * (1 / 6 - u * (1 / 24 - u * (1 / 120 - u / 720))))
    return 2.0 * (math.expm1(-u) + u)


class CoverageTree:
    """The coverage of a multiset of intervals, answering Σ joint cost against any interval in O(depth).

    ``total(x0, x1)`` is exactly Σ_Y ∫∫ exp(-λ|x - y|) over [x0, x1) x Y in hours²
    (to a few ulps per term). ``leaf`` (ms) is the grid: intervals aligned to it
    (hourly, daily, monthly data on the default one-hour grid) cost no leaf pieces.
    """

    def __init__(self, lam: float, leaf: int = MILLIS_PER_HOUR, window: tuple[int, int] | None = None) -> None:
        """``window`` (ms, optional) pre-sizes the grid to a span the data is expected to stay in."""
        if leaf <= 0:
            raise ValueError(f"leaf width must be positive, got {leaf}")
        self.lam = lam
        self.k = lam / MILLIS_PER_HOUR
        self.leaf = leaf
        self.segments: Counter[tuple[int, int]] = Counter()
        self.outside: Counter[tuple[int, int]] = Counter()
        self.origin = 0
        self.depth = -1  # no window yet
        self._reset_arrays()
        if window is not None and window[1] > window[0]:
            self._grow(*window)

    # -- window ----------------------------------------------------------------
    @property
    def window(self) -> tuple[int, int]:
        if self.depth < 0:
            return (0, 0)
        return (self.origin, self.origin + (self.leaf << self.depth))

    def _reset_arrays(self) -> None:
        size = 2 << max(self.depth, 0)
        self.n_leaves = size // 2
        self.cnt = [0] * size
        zeros = bytes(8 * size)  # packed doubles: 8 bytes a moment, not a boxed float each
        self.lp = array("d", zeros)  # Lpot at the node's right edge
        self.rp = array("d", zeros)  # Rpot at the node's left edge
        self.mass = array("d", zeros)
        self.fl = array("d", zeros)  # ∫ m f(y - L)
        self.fr = array("d", zeros)  # ∫ m f(R - y)
        self.pieces: dict[int, Counter[tuple[int, int]]] = {}
        levels = max(self.depth, 0) + 1
        self.width_u = [self.k * (self.leaf << lv) for lv in range(levels)]
        self.base_f = [_f(w) for w in self.width_u]
        self.base_half_s = [_s(w) / 2 for w in self.width_u]
        self.child_e = [0.0] + [math.exp(-self.width_u[lv - 1]) for lv in range(1, levels)]
        self.child_f = [0.0] + [self.base_f[lv - 1] for lv in range(1, levels)]

    def _wanted(self, start: int, end: int) -> tuple[int, int]:
        lo = min(max(start, -ANCHOR_LIMIT), ANCHOR_LIMIT)
        hi = min(max(end, -ANCHOR_LIMIT), ANCHOR_LIMIT)
        return lo, max(hi, lo + 1)

    def _fits(self, start: int, end: int) -> bool:
        lo, hi = self._wanted(start, end)
        w0, w1 = self.window
        return self.depth >= 0 and w0 <= lo and hi <= w1

    def _grow(self, start: int, end: int) -> None:
        """Widen the window (at least doubling it) to hold [start, end) clamped to the anchor limits."""
        lo, hi = self._wanted(start, end)
        if self.depth < 0:
            new_lo, new_hi = lo, hi
        else:
            w0, w1 = self.window
            new_lo, new_hi = min(lo, w0), max(hi, w1)
            if lo >= w0:  # grow rightwards from the current origin, at least doubling
                new_hi = max(new_hi, w0 + 2 * (w1 - w0))
            else:
                new_lo = min(new_lo, w1 - 2 * (w1 - w0))
        origin = (new_lo // self.leaf) * self.leaf
        leaves = -(-(new_hi - origin) // self.leaf)
        depth = max(0, (leaves - 1).bit_length())
        while depth > MAX_DEPTH:  # coarser leaves rather than a huge grid
            self.leaf *= 2
            origin = (new_lo // self.leaf) * self.leaf
            leaves = -(-(new_hi - origin) // self.leaf)
            depth = max(0, (leaves - 1).bit_length())
        self.origin, self.depth = origin, depth
        self._rebuild()

    def _rebuild(self) -> None:
        """Every held segment placed afresh on the current grid, in bulk (NumPy), then every node recomputed."""
        self._reset_arrays()
        self.outside.clear()
        if not self.segments:
            return
        held = list(self.segments.items())
        starts = np.fromiter((key[0] for key, _ in held), np.int64, len(held))
        ends = np.fromiter((key[1] for key, _ in held), np.int64, len(held))
        counts = np.fromiter((n for _, n in held), np.int64, len(held))
        self._place_many(starts, ends, counts)
        self._recompute_all()

    def _place_many(self, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                    counts: npt.NDArray[np.int64]) -> None:
        """:meth:`_place` for many intervals at once, on a fresh grid (no recomputation): the same canonical
        cover counts, leaf pieces and outside parts, found with array operations a tree level at a time."""
        w0, w1 = self.window
        beyond = np.flatnonzero((starts < w0) | (ends > w1))
        for i in beyond.tolist():
            self._bump(self.outside, (int(starts[i]), int(ends[i])), int(counts[i]))
        c0, c1 = np.maximum(starts, w0), np.minimum(ends, w1)
        inside = c1 > c0
        c0, c1, counts = c0[inside], c1[inside], counts[inside]
        leaf, n = self.leaf, self.n_leaves
        b0, b1 = (c0 - w0) // leaf, (c1 - 1 - w0) // leaf
        left_piece = (c0 != w0 + b0 * leaf) | ((b0 == b1) & (c1 != w0 + (b1 + 1) * leaf))
        first_full = b0 + left_piece
        right_piece = (b1 >= first_full) & (c1 != w0 + (b1 + 1) * leaf)
        last_full = b1 - right_piece
        piece_leaf = np.r_[b0[left_piece], b1[right_piece]]
        piece_a = np.r_[c0[left_piece], (w0 + b1 * leaf)[right_piece]]
        piece_b = np.r_[np.minimum(c1, w0 + (b0 + 1) * leaf)[left_piece], c1[right_piece]]
        piece_n = np.r_[counts[left_piece], counts[right_piece]]
        for index, a, b, c in zip(piece_leaf.tolist(), piece_a.tolist(), piece_b.tolist(), piece_n.tolist(),
                                  strict=True):
            bucket = self.pieces.get(index)
            if bucket is None:
                bucket = self.pieces[index] = Counter()
            bucket[(a, b)] += c
        full = first_full <= last_full
        lo, hi, weight = first_full[full] + n, last_full[full] + n + 1, counts[full]
        cnt = np.asarray(self.cnt, dtype=np.int64)
        while len(lo):
            odd_lo = (lo & 1).astype(bool)
            cnt += np.bincount(lo[odd_lo], weights=weight[odd_lo], minlength=2 * n).astype(np.int64)
            lo = lo + odd_lo
            odd_hi = (hi & 1).astype(bool)
            cnt += np.bincount(hi[odd_hi] - 1, weights=weight[odd_hi], minlength=2 * n).astype(np.int64)
            hi = hi - odd_hi
            lo, hi = lo >> 1, hi >> 1
            more = lo < hi
            lo, hi, weight = lo[more], hi[more], weight[more]
        self.cnt = cnt.tolist()

    def _recompute_touched(self, touched: list[int]) -> None:
        """Recompute the touched nodes and their ancestors, children first (a full sweep when that is cheaper)."""
        # Rough costs: a full numpy sweep ~300 µs + 50 ns a node; a path recompute ~1.5 µs a node.
        if 300 + 0.05 * len(self.cnt) <= 1.5 * len(touched) * (self.depth + 1):
            self._recompute_all()
            return
        nodes: set[int] = set()
        for p in touched:
            while p and p not in nodes:
                nodes.add(p)
                p >>= 1
        for p in sorted(nodes, reverse=True):
            self._recompute(p)

    # -- updates ---------------------------------------------------------------
    def add(self, start: int, end: int, count: int = 1) -> None:
        if end <= start:
            raise ValueError(f"empty interval [{start}, {end})")
        self.segments[(start, end)] += count
        long = min(end, ANCHOR_LIMIT) - max(start, -ANCHOR_LIMIT) > (self.leaf << MAX_DEPTH) // 4
        if not self._fits(start, end) and not long:
            self._grow(start, end)  # re-places everything, this segment included
            return
        if self.depth < 0:  # only long segments so far: no window to anchor
            self.outside[(start, end)] += count
            return
        self._place(start, end, count, recompute=True)

    def add_many(self, starts: list[int], ends: list[int]) -> None:
        """Add many intervals at once: one window choice, one recomputation of every node.

        On an empty tree the grid adapts to the data: refined (halving the leaf
        while it still divides an hour) until unaligned bounds leave about one
        leaf piece per leaf, so dense unaligned data keeps leaf scans short; or
        coarsened (doubling, up to 1024 hours) while there are more than 2
        leaves per interval, so sparse trees stay small.
        """
        if len(starts) != len(ends):
            raise ValueError("starts and ends differ in length")
        if not starts:
            return
        a_arr, b_arr = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        bad = np.flatnonzero(b_arr <= a_arr)
        if len(bad):
            raise ValueError(f"empty interval [{starts[bad[0]]}, {ends[bad[0]]})")
        lo_arr = np.clip(a_arr, -ANCHOR_LIMIT, ANCHOR_LIMIT)
        hi_arr = np.maximum(np.clip(b_arr, -ANCHOR_LIMIT, ANCHOR_LIMIT), lo_arr + 1)  # as _wanted
        normal = (hi_arr - lo_arr) <= (self.leaf << MAX_DEPTH) // 4
        has_normal = bool(normal.any())
        lo = int(lo_arr[normal].min()) if has_normal else 0
        hi = int(hi_arr[normal].max()) if has_normal else 0
        if not self.segments and has_normal:
            grid, old_window = self.leaf, self.window  # the window as laid out on the current grid
            na, nb = a_arr[normal], b_arr[normal]
            while self.leaf % 2 == 0 and MILLIS_PER_HOUR % (self.leaf // 2) == 0:  # dense unaligned: finer
                unaligned = int(np.count_nonzero(na % self.leaf) + np.count_nonzero(nb % self.leaf))
                leaves = -(-(hi - lo) // self.leaf)
                if unaligned <= leaves or 2 * leaves > (1 << MAX_DEPTH):
                    break
                self.leaf //= 2
            if self.leaf == grid:  # sparse: coarser, up to 1024 hours a leaf
                span = max(hi - lo, old_window[1] - old_window[0])
                while -(-span // self.leaf) > 2 * len(na) and self.leaf < (MILLIS_PER_HOUR << 10):
                    self.leaf *= 2
            if self.leaf != grid and self.depth >= 0:  # a pre-sized window: redo it on the new grid
                w0, w1 = old_window
                self.depth = -1
                self._grow(min(lo, w0), max(hi, w1))
        self.segments.update(zip(starts, ends, strict=True))
        w0, w1 = self.window
        if has_normal and (self.depth < 0 or lo < w0 or hi > w1):
            self._grow(lo, hi)  # re-places everything
            return
        if self.depth < 0:
            for a, b in zip(starts, ends, strict=True):
                self.outside[(a, b)] += 1
            return
        if 8 * len(starts) >= sum(self.segments.values()):  # a large share of what is held: re-place in bulk
            self._rebuild()
            return
        touched: list[int] = []
        for a, b in zip(starts, ends, strict=True):
            self._place(a, b, 1, recompute=False, touched=touched)
        self._recompute_touched(touched)

    def remove(self, start: int, end: int, count: int = 1) -> None:
        held = self.segments[(start, end)]
        if held < count:
            raise KeyError(f"[{start}, {end}) is held {held} times, cannot remove {count}")
        if held == count:
            del self.segments[(start, end)]
        else:
            self.segments[(start, end)] = held - count
        if self.depth < 0:
            self._bump(self.outside, (start, end), -count)
            return
        self._place(start, end, -count, recompute=True)

    @staticmethod
    def _bump(counter: Counter[tuple[int, int]], key: tuple[int, int], delta: int) -> None:
        value = counter.get(key, 0) + delta
        if value < 0:
            raise KeyError(f"{key} is not held")
        if value:
            counter[key] = value
        else:
            counter.pop(key, None)

    def _place(self, start: int, end: int, count: int, recompute: bool, touched: list[int] | None = None) -> None:
        """Add ``count`` (negative to remove) copies of [start, end): window part to the tree, rest outside.

        With ``recompute`` the changed nodes and their ancestors are recomputed at
        once; otherwise the changed nodes are appended to ``touched``.
        """
        w0, w1 = self.window
        if start < w0 or end > w1:
            self._bump(self.outside, (start, end), count)
        c0, c1 = max(start, w0), min(end, w1)
        if c1 <= c0:
            return
        leaf = self.leaf
        b0, b1 = (c0 - w0) // leaf, (c1 - 1 - w0) // leaf
        first_full, last_full = b0, b1
        leaves: list[int] = []
        canonical: list[int] = []
        if c0 != w0 + b0 * leaf or (b0 == b1 and c1 != w0 + (b1 + 1) * leaf):
            self._piece(b0, c0, min(c1, w0 + (b0 + 1) * leaf), count)
            leaves.append(b0)
            first_full = b0 + 1
        if b1 >= first_full and c1 != w0 + (b1 + 1) * leaf:
            self._piece(b1, w0 + b1 * leaf, c1, count)
            leaves.append(b1)
            last_full = b1 - 1
        n = self.n_leaves
        if first_full <= last_full:
            lo, hi = first_full + n, last_full + n + 1
            while lo < hi:
                if lo & 1:
                    self.cnt[lo] += count
                    canonical.append(lo)
                    lo += 1
                if hi & 1:
                    hi -= 1
                    self.cnt[hi] += count
                    canonical.append(hi)
                hi >>= 1
                lo >>= 1
            leaves.extend((first_full, last_full))
        if not recompute:
            if touched is not None:
                touched.extend(canonical)
                touched.extend(b + n for b in leaves)
            return
        nodes = set(canonical)
        for b in leaves:  # the canonical nodes' ancestors lie on these leaves' paths
            p = b + n
            while p:
                nodes.add(p)
                p >>= 1
        for p in sorted(nodes, reverse=True):
            self._recompute(p)

    def _piece(self, leaf_index: int, p: int, q: int, count: int) -> None:
        bucket = self.pieces.setdefault(leaf_index, Counter())
        self._bump(bucket, (p, q), count)
        if not bucket:
            del self.pieces[leaf_index]

    def _recompute_all(self) -> None:
        """Every node from its children and count: the leaves in Python (their pieces), each level above in numpy.

        The same formulas as :meth:`_recompute`, evaluated a level at a time.
        """
        n = self.n_leaves
        size = 2 * n
        cnt = np.asarray(self.cnt, dtype=np.float64)  # (the moments are rebuilt from scratch below)
        leaf_c = cnt[n:]
        lp, rp, mass, fl, fr = (np.zeros(size) for _ in range(5))
        lp[n:] = rp[n:] = leaf_c * self.base_f[0]
        mass[n:] = leaf_c * self.width_u[0]
        fl[n:] = fr[n:] = leaf_c * self.base_half_s[0]
        if self.pieces:  # leaves with pieces: the sums of _recompute, evaluated for every piece at once
            held = [(index, a, b, c) for index, bucket in self.pieces.items() for (a, b), c in bucket.items()]
            index_, a_, b_, c_ = (np.array(column, dtype=np.int64) for column in zip(*held, strict=True))
            k = self.k
            left = self.origin + index_ * self.leaf
            w = k * (b_ - a_).astype(np.float64)
            dl, dr = k * (a_ - left).astype(np.float64), k * (left + self.leaf - b_).astype(np.float64)
            fw, half_s, c = -np.expm1(-w), _self_vec(w) / 2, c_.astype(np.float64)
            for moment, values in ((lp, c * fw * np.exp(-dr)), (rp, c * fw * np.exp(-dl)), (mass, c * w),
                                   (fl, c * (fw * -np.expm1(-dl) + half_s)), (fr, c * (fw * -np.expm1(-dr) + half_s))):
                moment[n:] += np.bincount(index_, weights=values, minlength=n)
        for level in range(1, self.depth + 1):
            lo, hi = n >> level, n >> (level - 1)  # this level's nodes are [lo, hi)
            a, b = slice(2 * lo, 2 * hi, 2), slice(2 * lo + 1, 2 * hi, 2)
            e, fh = self.child_e[level], self.child_f[level]
            c = cnt[lo:hi]
            bf, hs = self.base_f[level], self.base_half_s[level]
            lp[lo:hi] = lp[a] * e + lp[b] + c * bf
            rp[lo:hi] = rp[a] + rp[b] * e + c * bf
            mass[lo:hi] = mass[a] + mass[b] + c * self.width_u[level]
            fl[lo:hi] = fl[a] + mass[b] * fh + e * fl[b] + c * hs
            fr[lo:hi] = fr[a] * e + mass[a] * fh + fr[b] + c * hs
        self.lp, self.rp, self.mass = (array("d", v.tobytes()) for v in (lp, rp, mass))
        self.fl, self.fr = (array("d", v.tobytes()) for v in (fl, fr))

    def _recompute(self, p: int) -> None:
        level = self.depth - (p.bit_length() - 1)
        c = self.cnt[p]
        if level == 0:
            lp = rp = mass = fl = fr = 0.0
            bucket = self.pieces.get(p - self.n_leaves)
            if bucket:
                k = self.k
                left = self.origin + (p - self.n_leaves) * self.leaf
                right = left + self.leaf
                for (a, b), n in bucket.items():
                    w, dl, dr = k * (b - a), k * (a - left), k * (right - b)
                    fw, el, er, hs = _f(w), math.exp(-dl), math.exp(-dr), _s(w) / 2
                    lp += n * fw * er
                    rp += n * fw * el
                    mass += n * w
                    fl += n * (fw * _f(dl) + hs)
                    fr += n * (fw * _f(dr) + hs)
        else:
            a, b = 2 * p, 2 * p + 1
            e, fh = self.child_e[level], self.child_f[level]
            lp = self.lp[a] * e + self.lp[b]
            rp = self.rp[a] + self.rp[b] * e
            mass = self.mass[a] + self.mass[b]
            fl = self.fl[a] + self.mass[b] * fh + e * self.fl[b]
            fr = self.fr[a] * e + self.mass[a] * fh + self.fr[b]
        if c:
            bf, hs = self.base_f[level], self.base_half_s[level]
            lp += c * bf
            rp += c * bf
            mass += c * self.width_u[level]
            fl += c * hs
            fr += c * hs
        self.lp[p], self.rp[p], self.mass[p], self.fl[p], self.fr[p] = lp, rp, mass, fl, fr

    # -- queries ---------------------------------------------------------------
    def total(self, x0: int, x1: int) -> float:
        """Σ over held intervals Y of ∫_{x0}^{x1} ∫_Y exp(-λ|x - y|) dy dx, in hours²."""
        if x1 <= x0:
            raise ValueError(f"empty interval [{x0}, {x1})")
        result = 0.0
        lam = self.lam
        for (y0, y1), n in self.outside.items():
            for a, b in self._outside_parts(y0, y1):
                result += n * interval_joint_cost(x0, x1, a, b, lam)
        if self.depth < 0:
            return result
        w0, w1 = self.window
        k = self.k
        u = 0.0
        if x0 < w0:  # the part of X left of the window sees the whole window to its right
            end = min(x1, w0)
            u += _f(k * (end - x0)) * math.exp(-k * (w0 - end)) * self.rp[1]
        if x1 > w1:
            begin = max(x0, w1)
            u += _f(k * (x1 - begin)) * math.exp(-k * (begin - w1)) * self.lp[1]
        s, t = max(x0, w0), min(x1, w1)
        if s < t:
            lpot, rpot, inside = self._walk(s, t)
            u += _f(k * (t - s)) * (lpot + rpot) + inside
        return result + u / (lam * lam)

    def _outside_parts(self, y0: int, y1: int) -> list[tuple[int, int]]:
        if self.depth < 0:
            return [(y0, y1)]
        w0, w1 = self.window
        parts = []
        if y0 < w0:
            parts.append((y0, min(y1, w0)))
        if y1 > w1:
            parts.append((max(y0, w1), y1))
        return parts

    def _walk(self, s: int, t: int) -> tuple[float, float, float]:
        """(Lpot(s), Rpot(t), Inside(s, t)) for a window-contained [s, t), in one descent.

        The three follow the same paths: the common path while [s, t) lies in one
        child, then the path of s (left potential, left part of the inside) and
        the path of t (right potential, right part of the inside).
        """
        k, cnt, lp, rp, n_leaves = self.k, self.cnt, self.lp, self.rp, self.n_leaves
        mass, fl, fr = self.mass, self.fl, self.fr
        exp, expm1 = math.exp, math.expm1
        node, left, width = 1, self.origin, self.leaf << self.depth
        lpot = rpot = inside = 0.0
        s_self = _s(k * (t - s))
        # "x -= c * expm1(-u)" adds c * f(u) >= 0 (f inlined on this hot path): every term stays non-negative.
        while True:  # the common path: [s, t) inside the node [left, left + width)
            right = left + width
            if left == s and right == t:  # the node is X: nothing of it lies left of s or right of t
                return lpot, rpot, inside + self._full(node, left, right, s, t)
            c = cnt[node]
            if c:
                lpot -= c * expm1(-k * (s - left))
                rpot -= c * expm1(-k * (right - t))
                inside += c * s_self
            if node >= n_leaves:
                a, b, i = self._leaf(node, s, t)
                return lpot + a, rpot + b, inside + i
            width >>= 1
            mid = left + width
            if t <= mid:
                rpot += rp[2 * node + 1] * exp(-k * (mid - t))
                node = 2 * node
            elif s >= mid:
                lpot += lp[2 * node] * exp(-k * (s - mid))
                node, left = 2 * node + 1, mid
            else:
                break
        split_left, split_width = left, width
        node_s, left_s, width_s = 2 * node, split_left, split_width  # nodes [L, R) with R <= t, following s
        while True:
            right_s = left_s + width_s
            if left_s == s:
                inside += self._full(node_s, left_s, right_s, s, t)
                break
            c = cnt[node_s]
            if c:  # J(s, right_s) = s(w) + f(w) f(t - right_s), with f(w) f(v) = expm1(-w) expm1(-v)
                lpot -= c * expm1(-k * (s - left_s))
                w = k * (right_s - s)
                inside += c * (_s(w) + expm1(-w) * expm1(-k * (t - right_s)))
            if node_s >= n_leaves:
                a, _b, i = self._leaf(node_s, s, t)
                lpot += a
                inside += i
                break
            width_s >>= 1
            mid = left_s + width_s
            if s < mid:  # the right child lies inside [s, t): its full-node sum, inlined
                child = 2 * node_s + 1
                dl, dr = k * (mid - s), k * (t - mid - width_s)
                inside += (mass[child] * -(expm1(-dl) + expm1(-dr)) + exp(-dl) * fl[child]
                           + exp(-dr) * fr[child])
                node_s = 2 * node_s
            else:
                lpot += lp[2 * node_s] * exp(-k * (s - mid))
                node_s, left_s = 2 * node_s + 1, mid
        node_t, left_t, width_t = 2 * node + 1, split_left + split_width, split_width  # L >= s, following t
        while True:
            right_t = left_t + width_t
            if right_t == t:
                inside += self._full(node_t, left_t, right_t, s, t)
                break
            c = cnt[node_t]
            if c:  # J(left_t, t) = s(w) + f(w) f(left_t - s)
                rpot -= c * expm1(-k * (right_t - t))
                w = k * (t - left_t)
                inside += c * (_s(w) + expm1(-w) * expm1(-k * (left_t - s)))
            if node_t >= n_leaves:
                _a, b, i = self._leaf(node_t, s, t)
                rpot += b
                inside += i
                break
            width_t >>= 1
            mid = left_t + width_t
            if t > mid:  # the left child lies inside [s, t)
                child = 2 * node_t
                dl, dr = k * (left_t - s), k * (t - mid)
                inside += (mass[child] * -(expm1(-dl) + expm1(-dr)) + exp(-dl) * fl[child]
                           + exp(-dr) * fr[child])
                node_t, left_t = 2 * node_t + 1, mid
            else:
                rpot += rp[2 * node_t + 1] * exp(-k * (mid - t))
                node_t = 2 * node_t
        return lpot, rpot, inside

    def _leaf(self, node: int, s: int, t: int) -> tuple[float, float, float]:
        """A leaf's pieces: their mass left of s (seen from s), right of t (seen from t), and inside [s, t)."""
        bucket = self.pieces.get(node - self.n_leaves)
        lpot = rpot = inside = 0.0
        if bucket:
            k = self.k
            for (a, b), n in bucket.items():
                if a < s:
                    e = min(b, s)
                    lpot += n * math.exp(-k * (s - e)) * _f(k * (e - a))
                if b > t:
                    e = max(a, t)
                    rpot += n * math.exp(-k * (e - t)) * _f(k * (b - e))
                p, q = max(a, s), min(b, t)
                if p < q:
                    inside += n * self._j(p, q, s, t)
        return lpot, rpot, inside

    def _full(self, node: int, left: int, right: int, s: int, t: int) -> float:
        """∫ m (f(y - s) + f(t - y)) over a node [left, right) inside [s, t)."""
        k = self.k
        dl, dr = k * (left - s), k * (t - right)
        return (self.mass[node] * (_f(dl) + _f(dr)) + math.exp(-dl) * self.fl[node]
                + math.exp(-dr) * self.fr[node])

    def _j(self, p: int, q: int, s: int, t: int) -> float:
        """∫_p^q (f(y - s) + f(t - y)) dy for s <= p < q <= t."""
        k = self.k
        w = k * (q - p)
        return _s(w) + _f(w) * (_f(k * (p - s)) + _f(k * (t - q)))
