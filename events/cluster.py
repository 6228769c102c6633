"""Events on ``cluster``: servers coming and going, rules and dynamic configuration.

Rules and dynamic configuration are Druid's JSON, carried opaquely here and
validated by the rules and planner code that interprets them.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.limits import MAX_RULES_PER_DATA_SOURCE
from events.registry import Event, event_type
from events.schema import JsonObject, wire
from events.topics import CLUSTER


@dataclass(frozen=True, slots=True)
class _ServerEvent(Event):
    server: str = wire("server")
    tier: str | None = wire("tier", None)
    max_size_bytes: int | None = wire("maxSizeBytes", None, minimum=0)


@event_type("server_joined", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerJoined(_ServerEvent):
    pass


@event_type("server_left", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerLeft(_ServerEvent):
    pass


@event_type("server_heartbeat", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerHeartbeat(_ServerEvent):
    """A historical is alive: sent every ``heartbeatMillis`` (docs/liveness.md). The coordinator folds only when it
    was heard of last; a server silent for ``serverTimeoutMillis`` is decided lost (:class:`ServerLost`)."""


@event_type("server_lost", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerLost(_ServerEvent):
    """The coordinator's decision that a server is gone: nothing heard of it since ``lastHeardAt`` (event time,
    ms) for more than ``serverTimeoutMillis``. Folded as a ``server_left``; decided once per silence (its id
    derives from the server and ``lastHeardAt``), so a replay reads the decision instead of re-taking it."""

    last_heard_at: int = wire("lastHeardAt", 0, minimum=0)
    server_timeout_millis: int = wire("serverTimeoutMillis", 0, minimum=0)


@event_type("server_decommissioned", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerDecommissioned(_ServerEvent):
    pass


@event_type("server_recommissioned", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ServerRecommissioned(_ServerEvent):
    pass


@event_type("rules_set", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class RulesSet(Event):
    """``dataSource`` is a data source name or ``_default``."""

    data_source: str = wire("dataSource")
    rules: tuple[JsonObject, ...] = wire("rules", max_items=MAX_RULES_PER_DATA_SOURCE)


@event_type("dynamic_config_set", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class DynamicConfigSet(Event):
    config: JsonObject = wire("config")


@event_type("segment_load_refused", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class SegmentLoadRefused(Event):
    """A server's answer to a LoadSegment it will not execute (no room): the command is settled, not lost.

    ``commandId`` is the refused command's; ``usedBytes`` what the server held when it refused.
    """

    server: str = wire("server")
    command_id: str = wire("commandId")
    segment_id: str = wire("segmentId")
    reason: str = wire("reason")
    used_bytes: int = wire("usedBytes", 0, minimum=0)
    max_size_bytes: int = wire("maxSizeBytes", 0, minimum=0)
    move_id: str | None = wire("moveId", None)
