"""What the planner sees: servers, their loaded segments and load queues, the used segments, rules, config.

**Invariants.** Server names are unique; a queue holds at most one item per
segment; a ``move`` queue item is a load on its target whose ``source`` still
holds the segment (the source drops it only after the load succeeded); queued
loads count against the server's size. A view is a snapshot: the planner never
mutates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events.segment import SegmentDescriptor, SegmentId

Purpose = Literal["loading", "decommissioning", "balancing"]
QueueAction = Literal["load", "drop"]


@dataclass(frozen=True, slots=True)
class Server:
    name: str
    tier: str
    max_size_bytes: int
    decommissioning: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a server needs a name")
        if not self.tier:
            raise ValueError(f"server {self.name}: a tier must be named")
        if self.max_size_bytes < 0:
            raise ValueError(f"server {self.name}: maxSizeBytes must be non-negative, got {self.max_size_bytes}")


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A queued load or drop; ``move_id`` and ``source`` are set for the load half of a move."""

    action: QueueAction
    segment: SegmentId
    purpose: Purpose = "loading"
    move_id: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ServerState:
    server: Server
    loaded: frozenset[SegmentId] = frozenset()
    queue: tuple[QueueItem, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One coordinator run's input. ``segments`` are the used segments plus any loaded unused ones."""

    now: int
    servers: Mapping[str, ServerState]
    segments: Mapping[SegmentId, SegmentDescriptor]
    used: frozenset[SegmentId]
    rules: RuleSet
    config: DynamicConfig = field(default_factory=DynamicConfig)
    coordinator_start: int = 0
    run: int = 1

    def decommissioning(self, name: str) -> bool:
        state = self.servers[name]
        return state.server.decommissioning or name in self.config.decommissioning_nodes
