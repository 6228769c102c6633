"""Choosing servers by cost: the top-B servers for a load, and whether a segment should move.

- **Eligible** servers: not decommissioning, with room for the segment (free
  bytes at least its size), unless they already hold it.
- **Ranking**: by placement cost, then by free space (more first), then by
  server name: a total, deterministic order.
- **B**, the number of best servers (seed 004): target replicants +
  floor(log_base(servers in the tier)), base 5 by default, at least 1.
- **Moving** (Druid's rule): a segment moves only when some eligible server is
  strictly cheaper than the server holding it, both scored without the
  segment's own contribution. "Strictly" means by more than 1e-12 relative:
  two sums of the same costs in another order may differ in the last bit, and
  a move on rounding noise would be churn. The top B bound the candidate destinations. (Seed
  004's literal test, moving only when the holder is outside the top B, stalls:
  with one replica on 5 servers B = 2, the holder is nearly always second
  cheapest, and a new fifth server stays empty; scoring the holder with its
  self-cost instead would churn forever.)
- **Disk-normalized** (optional, Druid's ``diskNormalized`` strategy): the cost
  divided by the server's segment count (at least 1), times its used/max disk
  ratio, so fuller servers look dearer.

>>> num_best_servers(target_replicants=1, servers_in_tier=5)
2
>>> num_best_servers(target_replicants=2, servers_in_tier=300)
5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from events.segment import SegmentDescriptor, SegmentId

TIE_TOLERANCE = 1e-12


class CostSource(Protocol):
    def cost_of(self, segment: SegmentDescriptor) -> float: ...

    def holds(self, segment_id: SegmentId) -> bool: ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """A server as the strategy sees it."""

    name: str
    max_size_bytes: int
    used_bytes: int
    costs: CostSource
    decommissioning: bool = False
    segment_count: int = 0

    @property
    def free_bytes(self) -> int:
        return self.max_size_bytes - self.used_bytes


@dataclass(frozen=True, slots=True)
class Ranked:
    name: str
    cost: float
    free_bytes: int


def num_best_servers(target_replicants: int, servers_in_tier: int, base: float = 5.0) -> int:
    """Seed 004's B: target replicants plus floor(log_base(servers)), at least 1, at most the servers."""
    if base <= 1:
        raise ValueError(f"the base of numBestServers must exceed 1, got {base}")
    if servers_in_tier <= 0:
        return 0
    extra = math.floor(math.log(servers_in_tier) / math.log(base) + 1e-12)
    return max(1, min(servers_in_tier, target_replicants + extra))


def eligible(segment: SegmentDescriptor, server: Candidate) -> bool:
    if server.decommissioning:
        return False
    return server.costs.holds(segment.id) or server.free_bytes >= segment.size


def placement_cost(segment: SegmentDescriptor, server: Candidate, disk_normalized: bool = False) -> float:
    """The cost of ``segment`` on ``server`` (without its own contribution), optionally disk-normalized."""
    cost = server.costs.cost_of(segment)
    if not disk_normalized:
        return cost
    usage = server.used_bytes / server.max_size_bytes if server.max_size_bytes > 0 else 1.0
    return cost / max(1, server.segment_count) * usage


def rank(segment: SegmentDescriptor, servers: Sequence[Candidate], disk_normalized: bool = False) -> list[Ranked]:
    """Eligible servers by (cost, more free space, name)."""
    ranked = [Ranked(s.name, placement_cost(segment, s, disk_normalized), s.free_bytes)
              for s in servers if eligible(segment, s)]
    ranked.sort(key=lambda r: (r.cost, -r.free_bytes, r.name))
    return ranked


def best_servers(segment: SegmentDescriptor, servers: Sequence[Candidate], count: int,
                 disk_normalized: bool = False) -> list[Ranked]:
    """The ``count`` cheapest eligible servers that do not hold the segment yet (where to load a replica)."""
    return rank(segment, [s for s in servers if not s.costs.holds(segment.id)], disk_normalized)[:count]


def choose_move(segment: SegmentDescriptor, holder: Candidate, servers: Sequence[Candidate],
                best: int, disk_normalized: bool = False) -> Ranked | None:
    """Where to move ``segment`` from ``holder``, or None: the cheapest of the top ``best`` destinations,
    if strictly cheaper than staying (both without the segment's own contribution)."""
    staying = placement_cost(segment, holder, disk_normalized)
    others = [s for s in servers if s.name != holder.name and not s.costs.holds(segment.id)]
    top = rank(segment, others, disk_normalized)[:best]
    if top and top[0].cost < staying * (1 - TIE_TOLERANCE):
        return top[0]
    return None
