"""Numerical double integration of exp(-λ|x - y|), the reference the closed forms are tested against.

Both integrals are computed numerically with composite Gauss-Legendre rules.
The integrand is smooth except at x = y and varies on the scale 1/λ, so each
integration range is cut at the kinks and bumps (``centers``) and at geometric
distances 2^k/λ around them: every piece then sees a smooth function varying by
a bounded factor (or contributes negligibly), at any scale from a millisecond
to "all time". Each interval is integrated in its own local coordinate, so a millisecond
domain is exact in float64 whatever its distance to the other.
"""

from __future__ import annotations

import math

import numpy as np

NODES, WEIGHTS = np.polynomial.legendre.leggauss(24)
POWERS = 2.0 ** np.arange(-40, 50)


def _pieces(a: float, b: float, centers: list[float], scale: float) -> tuple[np.ndarray, np.ndarray]:
    pts = [a, b]
    for c in centers:
        pts.append(c)
        pts.extend(c - scale * POWERS)
        pts.extend(c + scale * POWERS)
    arr = np.unique(np.clip(np.asarray(pts, dtype=np.float64), a, b))
    return arr[:-1], arr[1:]


def _integrate(fn, a: float, b: float, centers: list[float], scale: float) -> float:  # type: ignore[no-untyped-def]
    if b <= a:
        return 0.0
    p, q = _pieces(a, b, centers, scale)
    half = (q - p) / 2
    xs = (p + q)[:, None] / 2 + half[:, None] * NODES[None, :]
    return float(np.sum(half[:, None] * WEIGHTS[None, :] * fn(xs)))


FAR = 10**15  # ms: beyond the year 33000, only "all time"-like bounds


def reference_joint_cost(x0: int, x1: int, y0: int, y1: int, half_life_hours: float = 24.0) -> float:
    """∫_{x0}^{x1} ∫_{y0}^{y1} exp(-λ|x - y|) dy dx in hours², bounds in ms, both integrals numeric."""
    if max(abs(x0), abs(x1), abs(y0), abs(y1)) > FAR:
        return _shifted(x0, x1, y0, y1, half_life_hours)
    return _local(x0, x1, y0, y1, half_life_hours)


def _shifted(x0: int, x1: int, y0: int, y1: int, half_life_hours: float) -> float:
    """Both intervals in one coordinate with the origin at the shorter one's start (for "all time" bounds,
    whose local coordinates would put the other interval where float64 cannot resolve it)."""
    lam = math.log(2) / half_life_hours
    shift = x0 if x1 - x0 <= y1 - y0 else y0
    a, b, c, d = ((v - shift) / 3.6e6 for v in (x0, x1, y0, y1))
    scale = 1 / lam

    def inner(xs: np.ndarray) -> np.ndarray:
        flat = xs.ravel()
        out = np.empty_like(flat)
        for i, x in enumerate(flat):
            out[i] = _integrate(lambda ys, x=x: np.exp(-lam * np.abs(x - ys)), c, d, [x, c, d], scale)
        return out.reshape(xs.shape)

    return _integrate(inner, a, b, [a, b, c, d], scale)


def _local(x0: int, x1: int, y0: int, y1: int, half_life_hours: float) -> float:
    """Integrated in local coordinates x = x0 + s, y = y0 + t: both domains [0, Lx] and
    [0, Ly] are exact in float64 hours, and the bounds only enter through their
    integer distance D = x0 - y0 inside the integrand exp(-λ|D + s - t|).
    """
    lam = math.log(2) / half_life_hours
    lx, ly, dist = (x1 - x0) / 3.6e6, (y1 - y0) / 3.6e6, (x0 - y0) / 3.6e6
    scale = 1 / lam

    def inner(ss: np.ndarray) -> np.ndarray:
        flat = ss.ravel()
        out = np.empty_like(flat)
        for i, sv in enumerate(flat):
            kink = dist + sv  # t where x = y
            out[i] = _integrate(lambda ts, k=kink: np.exp(-lam * np.abs(k - ts)), 0.0, ly, [kink, 0.0, ly], scale)
        return out.reshape(ss.shape)

    return _integrate(inner, 0.0, lx, [0.0, lx, -dist, ly - dist], scale)
