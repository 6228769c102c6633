"""The one fold of cluster placement (servers, holdings, load queues, commands in flight, used segments,
rules, dynamic config) and what it says changed.

Every adapter (the planner agent, the Spark balancer, replay and audit, the simulated historical, the
simulator) keeps a :class:`~coordinator.placement.state.PlacementState` and folds events into it with
:meth:`~coordinator.placement.state.PlacementState.evolve`; none folds placement events itself. The
planner plans over the same object (its decisions are folded in as the commands they become), so the
projection a run updates after every decision *is* the fold.
"""

from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS, DEFAULT_TIER, InFlight, ServerFacts
from coordinator.placement.state import PlacementState, Touched

__all__ = ["DEFAULT_LOAD_TIMEOUT_MS", "DEFAULT_TIER", "InFlight", "PlacementState", "ServerFacts", "Touched"]
