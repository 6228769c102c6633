"""Seed 000's experiment: hourly segments placed at random, greedily by cost, and rebalanced greedily.

Deterministic: the only randomness is a numpy Generator seeded by the caller.
Every placement decision goes through :mod:`coordinator.balancer.strategy` (the
cost of each server is computed for all servers at once: the joint costs of the
segment against every placed segment, summed per server).

The **query spread** of a placement: for every 1-day window of each data source,
the number of distinct servers holding its segments divided by
min(segments in the window, servers); 1.0 means a day's query uses as many
servers as it could.

The long loops (:func:`place_greedy`, :func:`rebalance`) take an optional
``progress`` callback, called with the number of steps done so far (segments
placed, attempts made): the shell draws a progress bar with it; the core stays
free of I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coordinator.balancer.cost import CostModel, costs
from coordinator.balancer.strategy import Candidate, choose_move, num_best_servers, rank
from events.interval import Interval
from events.segment import SegmentDescriptor, SegmentId

HOUR = 3_600_000
DAY = 24 * HOUR


def hourly_segments(datasources: int, days: int, start: int) -> list[SegmentDescriptor]:
    """One segment per data source and hour, in time order (as ingestion publishes them)."""
    return [
        SegmentDescriptor(f"ds{d}", Interval(start + h * HOUR, start + (h + 1) * HOUR), "v1", 0, 1)
        for h in range(days * 24)
        for d in range(datasources)
    ]


class _Fixed:
    """A CostSource with a precomputed cost (all servers are scored in one vectorized pass)."""

    __slots__ = ("_cost", "_holds")

    def __init__(self, cost: float, holds: bool) -> None:
        self._cost, self._holds = cost, holds

    def cost_of(self, segment: SegmentDescriptor) -> float:
        return self._cost

    def holds(self, segment_id: SegmentId) -> bool:
        return self._holds


class Cluster:
    """Placed segments as numpy columns plus the server of each."""

    def __init__(self, segments: list[SegmentDescriptor], servers: list[str], model: CostModel) -> None:
        self.segments = segments
        self.servers = servers
        self.model = model
        codes = {ds: i for i, ds in enumerate(sorted({s.data_source for s in segments}))}
        self.starts = np.array([s.interval.start for s in segments], dtype=np.int64)
        self.ends = np.array([s.interval.end for s in segments], dtype=np.int64)
        self.sources = np.array([codes[s.data_source] for s in segments], dtype=np.int64)
        self.server_of = np.full(len(segments), -1, dtype=np.int64)

    def server_costs(self, i: int) -> npt.NDArray[np.float64]:
        """Cost of segment i on every server, without its own contribution."""
        placed = self.server_of >= 0
        placed[i] = False
        if not placed.any():
            return np.zeros(len(self.servers))
        values = costs(self.segments[i].interval, self.starts[placed], self.ends[placed],
                       self.sources[placed] == self.sources[i], self.model)
        return np.bincount(self.server_of[placed], weights=values, minlength=len(self.servers)).astype(np.float64)

    def candidates(self, i: int) -> list[Candidate]:
        per_server = self.server_costs(i)
        counts = np.bincount(self.server_of[self.server_of >= 0], minlength=len(self.servers))
        return [Candidate(name, 1 << 60, int(counts[k]), _Fixed(float(per_server[k]), self.server_of[i] == k))
                for k, name in enumerate(self.servers)]

    def assignment(self) -> dict[str, str]:
        return {str(s.id): self.servers[k] for s, k in zip(self.segments, self.server_of.tolist(), strict=True)}


def place_random(cluster: Cluster, rng: np.random.Generator) -> None:
    cluster.server_of[:] = rng.integers(0, len(cluster.servers), len(cluster.segments))


OnProgress = Callable[[int], None]


def place_greedy(cluster: Cluster, progress: OnProgress | None = None) -> None:
    """Each segment, in arrival order, to the cheapest server (ties: more free space, then name).

    ``progress(i)`` after each of every 256 segments placed, and at the end.
    """
    index = {name: k for k, name in enumerate(cluster.servers)}
    n = len(cluster.segments)
    for i in range(n):
        best = rank(cluster.segments[i], cluster.candidates(i))[0]
        cluster.server_of[i] = index[best.name]
        if progress is not None and ((i + 1) % 256 == 0 or i + 1 == n):
            progress(i + 1)


def rebalance(cluster: Cluster, moves: int, rng: np.random.Generator, max_attempts: int | None = None,
              progress: OnProgress | None = None) -> int:
    """Greedy rebalancing: random segments move to a strictly cheaper server; returns the moves made.

    ``progress(made)`` after every move (the callback does not change the rng's draws).
    """
    index = {name: k for k, name in enumerate(cluster.servers)}
    best = num_best_servers(1, len(cluster.servers))
    made = 0
    attempts = max_attempts if max_attempts is not None else 20 * moves
    for _ in range(attempts):
        if made >= moves:
            break
        i = int(rng.integers(len(cluster.segments)))
        candidates = cluster.candidates(i)
        holder = candidates[int(cluster.server_of[i])]
        target = choose_move(cluster.segments[i], holder, candidates, best)
        if target is not None:
            cluster.server_of[i] = index[target.name]
            made += 1
            if progress is not None:
                progress(made)
    return made


@dataclass(frozen=True, slots=True)
class SpreadReport:
    max_per_server: int
    min_per_server: int
    mean_spread: float
    p5_spread: float
    total_cost: float


def query_spreads(cluster: Cluster) -> npt.NDArray[np.float64]:
    """The query spread of every (data source, day) window, ordered by data source then day.

    >>> from events.instant import parse_instant
    >>> c = Cluster(hourly_segments(1, 1, parse_instant("2026-01-01T00:00:00Z")), ["a", "b"], CostModel())
    >>> c.server_of[:] = [0] * 24
    >>> query_spreads(c).tolist()  # one server of the two possible
    [0.5]
    """
    n_servers = len(cluster.servers)
    day_of = (cluster.starts - cluster.starts.min()) // DAY
    spreads = []
    for ds in np.unique(cluster.sources):
        mine = cluster.sources == ds
        for day in np.unique(day_of[mine]):
            window = mine & (day_of == day)
            distinct = len(np.unique(cluster.server_of[window]))
            spreads.append(distinct / min(int(window.sum()), n_servers))
    return np.array(spreads, dtype=np.float64)


def segments_per_server(cluster: Cluster) -> npt.NDArray[np.int64]:
    """How many segments each server (in ``cluster.servers`` order) holds."""
    return np.bincount(cluster.server_of, minlength=len(cluster.servers)).astype(np.int64)


def report(cluster: Cluster) -> SpreadReport:
    n_servers = len(cluster.servers)
    counts = segments_per_server(cluster)
    spreads = query_spreads(cluster)
    total = 0.0
    for k in range(n_servers):
        on = np.flatnonzero(cluster.server_of == k)
        for i in on:
            same = cluster.sources[on] == cluster.sources[i]
            total += float(np.sum(costs(cluster.segments[i].interval, cluster.starts[on], cluster.ends[on], same,
                                        cluster.model)))
    return SpreadReport(int(counts.max()), int(counts.min()), float(spreads.mean()),
                        float(np.percentile(spreads, 5)), total / 2)
