"""The records every placement adapter keeps, defined once in the core (:mod:`coordinator.placement.records`)
and re-exported here for the adapters that import them from ``streaming``."""

from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS, DEFAULT_TIER, InFlight, ServerFacts

__all__ = ["DEFAULT_LOAD_TIMEOUT_MS", "DEFAULT_TIER", "InFlight", "ServerFacts"]
