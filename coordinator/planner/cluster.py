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
from typing import TYPE_CHECKING

from coordinator.placement.projected import Purpose, QueueAction, QueueItem
from coordinator.placement.records import ServerFacts
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events.segment import SegmentDescriptor, SegmentId

if TYPE_CHECKING:
    from coordinator.placement.state import PlacementState

__all__ = ["ClusterView", "Purpose", "QueueAction", "QueueItem", "Server", "ServerState"]


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

    def placement(self) -> PlacementState:
        """The view as a placement state (queued items sent at ``now``), the state a planning run works on."""
        from coordinator.placement.state import PlacementState

        return PlacementState.build(
            ((name, ServerFacts(s.server.tier, s.server.max_size_bytes, s.server.decommissioning),
              sorted(s.loaded, key=lambda x: x.sort_key), s.queue) for name, s in sorted(self.servers.items())),
            self.segments.values(), self.used, self.rules, self.config, self.now)

    def decommissioning(self, name: str) -> bool:
        state = self.servers[name]
        return state.server.decommissioning or name in self.config.decommissioning_nodes
