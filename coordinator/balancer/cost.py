"""The joint cost of two segments (seed 000), exact and numerically sound for any input.

    cost(X, Y) = (1 + sameDataSource) * ∫_{x0}^{x1} ∫_{y0}^{y1} exp(-λ|x - y|) dy dx,   λ = ln 2 / half-life

in Druid's unit, hours squared (half-life 24 h by default). The integral has
closed forms; the care is in evaluating them in floating point.

**Disjoint or adjacent** (gap g = distance between them, lengths a and b; all
in units of 1/λ, i.e. u = λ·t)::

    I = f(a) · f(b) · exp(-g) / λ²,     f(u) = 1 - exp(-u) = -expm1(-u)

A product of non-negative factors: exact to a few ulps whatever the lengths
(``expm1`` keeps 1 ms segments exact where ``1 - exp(-u)`` would cancel) and
whatever the distance (``exp(-g)`` may underflow to 0 past about 2.8 years at a
24 h half-life, which is then the correctly rounded answer).

**Overlapping or nested**: with intersection length o, left overhangs lx (of X)
or ly (of Y) and right overhangs rx or ry (at most one of each pair is non-zero),
splitting both intervals at the intersection leaves only identical or
disjoint/adjacent pairs::

    λ² I = s(o) + f(o)·(f(lx) + f(ly) + f(rx) + f(ry)) + exp(-o)·(f(lx)·f(ry) + f(rx)·f(ly)),
    s(u) = 2 (u - 1 + exp(-u))   (the self cost of the intersection)

Every term is non-negative, so nothing cancels; ``s`` is summed as a series
for small u (where ``u - 1 + exp(-u)`` would lose everything to cancellation)
and as ``2·(expm1(-u) + u)`` otherwise. Interval bounds enter only through
integer-millisecond differences, so timestamps from 1970 or 2200 and Druid's
"all time" interval never form a large exponent. A naive translation of the
blog's formula, ``exp(λ·x0)`` from an epoch origin, overflows after about 2.8
years and loses all precision on 1 ms intervals.

>>> from events import Interval
>>> day = Interval.parse("2026-01-01/P1D")
>>> round(joint_cost(day, day), 6)      # 2(λt + exp(-λt) - 1)/λ² with t = 24 h, λt = ln 2
463.116154
>>> round(cost(day, Interval.parse("2026-01-02/P1D"), same_data_source=True), 6)   # 2 (1/2)² / λ²
599.434267
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from events.interval import Interval

MILLIS_PER_HOUR = 3_600_000
DEFAULT_HALF_LIFE_HOURS = 24.0
_SERIES_BELOW = 1e-2


def decay_rate(half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> float:
    """λ per hour for a half-life in hours."""
    if not half_life_hours > 0 or not math.isfinite(half_life_hours):
        raise ValueError(f"half-life must be a positive number of hours, got {half_life_hours!r}")
    return math.log(2) / half_life_hours


def _f(u: float) -> float:
    return -math.expm1(-u)


def _self(u: float) -> float:
    """2 (u - 1 + e^-u), accurate for every u >= 0."""
    if u < _SERIES_BELOW:
        # u²/2 - u³/6 + u⁴/24 - u⁵/120 + u⁶/720: the next term is below 1e-13 of the sum here
        return 2.0 * u * u * (0.5 - u * (1 / 6 - u * (1 / 24 - u * (1 / 120 - u / 720))))
    return 2.0 * (math.expm1(-u) + u)


def interval_joint_cost(x0: int, x1: int, y0: int, y1: int, lam: float) -> float:
    """∫∫ exp(-λ|x - y|) over [x0, x1) x [y0, y1) in hours², bounds in UTC milliseconds, λ per hour."""
    k = lam / MILLIS_PER_HOUR  # λ per millisecond: u = k * (a difference of milliseconds)
    lo, hi = max(x0, y0), min(x1, y1)
    if hi <= lo:
        return _f(k * (x1 - x0)) * _f(k * (y1 - y0)) * math.exp(-k * (lo - hi)) / (lam * lam)
    o = k * (hi - lo)
    fl_x = _f(k * (y0 - x0)) if x0 < y0 else 0.0
    fl_y = _f(k * (x0 - y0)) if y0 < x0 else 0.0
    fr_x = _f(k * (x1 - y1)) if x1 > y1 else 0.0
    fr_y = _f(k * (y1 - x1)) if y1 > x1 else 0.0
    total = _self(o) + _f(o) * (fl_x + fl_y + fr_x + fr_y) + math.exp(-o) * (fl_x * fr_y + fr_x * fl_y)
    return total / (lam * lam)


def joint_cost(x: Interval, y: Interval, half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> float:
    """The integral alone (no data source factor), in hours²."""
    return interval_joint_cost(x.start, x.end, y.start, y.end, decay_rate(half_life_hours))


def cost(x: Interval, y: Interval, *, same_data_source: bool = False,
         half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> float:
    """Seed 000's joint cost: the integral, doubled when both segments belong to one data source."""
    return (2.0 if same_data_source else 1.0) * joint_cost(x, y, half_life_hours)


@dataclass(frozen=True, slots=True)
class CostModel:
    """λ and the same-data-source factor, fixed once for a balancer run."""

    half_life_hours: float = DEFAULT_HALF_LIFE_HOURS
    same_source_factor: float = 2.0

    @property
    def lam(self) -> float:
        return decay_rate(self.half_life_hours)


def _f_vec(u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return -np.expm1(-u)


def _self_vec(u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    series = 2.0 * u * u * (0.5 - u * (1 / 6 - u * (1 / 24 - u * (1 / 120 - u / 720))))
    return np.where(u < _SERIES_BELOW, series, 2.0 * (np.expm1(-u) + u))


def joint_costs(
    x: Interval,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    lam: float,
) -> npt.NDArray[np.float64]:
    """The integral of one interval against many (bounds in ms as int64 arrays), vectorized; hours².

    Same formulas as :func:`interval_joint_cost`, evaluated branch-free.
    """
    k = lam / MILLIS_PER_HOUR
    x0, x1 = x.start, x.end
    lo = np.maximum(starts, x0)
    hi = np.minimum(ends, x1)
    disjoint = hi <= lo
    fx = -math.expm1(-k * (x1 - x0))
    fy = _f_vec(k * (ends - starts).astype(np.float64))
    apart = fx * fy * np.exp(-k * np.maximum(lo - hi, 0).astype(np.float64))
    # Overhang lengths clamp at 0, where f(0) = 0: no branch is evaluated out of its domain.
    o = k * np.maximum(hi - lo, 0).astype(np.float64)
    fl_x = _f_vec(k * np.maximum(starts - x0, 0).astype(np.float64))
    fl_y = _f_vec(k * np.maximum(x0 - starts, 0).astype(np.float64))
    fr_x = _f_vec(k * np.maximum(x1 - ends, 0).astype(np.float64))
    fr_y = _f_vec(k * np.maximum(ends - x1, 0).astype(np.float64))
    together = _self_vec(o) + _f_vec(o) * (fl_x + fl_y + fr_x + fr_y) + np.exp(-o) * (fl_x * fr_y + fr_x * fl_y)
    return np.asarray(np.where(disjoint, apart, together) / (lam * lam), dtype=np.float64)


def costs(
    x: Interval,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    same_source: npt.NDArray[np.bool_],
    model: CostModel = CostModel(),
) -> npt.NDArray[np.float64]:
    """Seed 000's joint cost of ``x`` against many segments, with the same-data-source factor."""
    factor = np.where(same_source, model.same_source_factor, 1.0)
    return np.asarray(factor * joint_costs(x, starts, ends, model.lam), dtype=np.float64)
