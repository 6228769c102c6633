"""A deterministic cluster simulator: servers execute the planner's commands, time is stepped explicitly.

A scenario (JSON, see :func:`Scenario.parse`) gives the servers, the segments
(explicit or generated), an initial placement, rules, dynamic config, the number
of runs and events before given runs. Each run: events apply, the planner runs
over the placement fold, its commands enter the servers' queues, overshadowed or
drop-rule segments are marked unused, and with ``loadCompletion``
``"between_runs"`` (the default) the queues then complete by the end of the
coordinator period: drops, then the loads whose server's ``loadTimeMillis`` (per
server, or the scenario's default, 0) has passed since they were queued, then
moves (a move's source drops its copy only after the target loaded it; a load
fails with probability ``failureRate``, drawn from a generator seeded by
``seed``, and a failed move leaves the source's copy in place). With
``"manual"`` queues complete only at ``complete_queues`` events, load times
notwithstanding. After each run ``now`` advances by ``periodMillis`` (Druid's
coordinator period, 60 s).

**One fold.** Who holds what and what is queued is a
:class:`~coordinator.placement.state.PlacementState`, fed with the events a real
cluster would log: servers joining, leaving, (re)commissioning, publishes and
marks, rules and config set through Druid's APIs, and what the simulated
historicals do with their queues (announce, unannounce, refuse). The planner
runs on that state and folds its decisions in as the commands they become.
The simulator keeps only what the fold does not: the metadata store's
catalogue (every segment published and its used flag) and each historical's
load time.

**Rules and config change as Druid's APIs change them.** ``set_rules`` replaces
the rules of the data sources it names and keeps the others; a fresh cluster
has Druid's ``_default`` rule (``loadForever``, 2 replicas on ``_default_tier``)
until a scenario sets another; ``set_dynamic_config`` merges into the current
config (keys not given keep their values). The scenario's own ``rules`` and
``dynamicConfig`` are the first such calls.

**Servers with data.** ``add_server`` with ``segments`` (ids) joins a server
already holding them, and ``server_adds_segments`` announces loads made
outside the coordinator; both name only segments the scenario defines.

**Invariants.** Same scenario, same output. A server never loads beyond its size
(a load that no longer fits is refused). A removed server's queue and data vanish
with it. Unknown keys anywhere in a scenario are an error naming their path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coordinator.placement.projected import QueueItem
from coordinator.placement.records import InFlight
from coordinator.placement.state import PlacementState, Touched
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import FULL_RUN_EVERY_MS, Plan, plan_state
from coordinator.planner.sweep import SWEEP_CHUNK, Sweep
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerJoined,
    ServerLeft,
    ServerRecommissioned,
)
from events.envelope import Envelope
from events.instant import format_instant, parse_instant
from events.interval import Interval
from events.period import Period
from events.registry import Event as LogEvent
from events.schema import Instant
from events.segment import SegmentDescriptor, SegmentId
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced

EVENT_TYPES = ("add_server", "remove_server", "decommission", "recommission", "set_now", "set_rules",
               "set_dynamic_config", "mark_unused", "publish", "complete_queues", "server_adds_segments")

_SERVER_KEYS = frozenset({"name", "tier", "maxSizeBytes", "decommissioning", "loadTimeMillis"})
_GENERATOR_KEYS = frozenset({"dataSource", "version", "start", "count", "granularity", "partitions", "sizeBytes",
                             "used"})
_SEGMENT_KEYS = frozenset({"dataSource", "version", "interval", "start", "end", "size", "sizeBytes", "partitionId",
                           "used"})
#: Per event type, the keys it may have besides ``type`` and ``beforeRun``.
_EVENT_KEYS: Mapping[str, frozenset[str]] = {
    "add_server": _SERVER_KEYS | {"server", "segments"},
    "remove_server": frozenset({"name", "server"}),
    "decommission": frozenset({"name", "server"}),
    "recommission": frozenset({"name", "server"}),
    "set_now": frozenset({"now", "time"}),
    "set_rules": frozenset({"rules"}),
    "set_dynamic_config": frozenset({"dynamicConfig", "config"}),
    "mark_unused": frozenset({"segments", "segmentIds"}),
    "publish": frozenset({"segments"}),
    "complete_queues": frozenset(),
    "server_adds_segments": frozenset({"name", "server", "segments"}),
}


class ScenarioError(ValueError):
    """A scenario file problem, naming the field."""


def _only(obj: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
    """Unknown keys are an error naming their path and the keys known there."""
    allowed = set(known)
    for key in obj:
        if key not in allowed:
            raise ScenarioError(f"{path}.{key}: unknown field (known: {', '.join(sorted(allowed))})")


def _field(obj: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in obj:
        if default is ...:
            raise ScenarioError(f"{path}.{key}: required")
        return default
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ScenarioError(f"{path}.{key}: expected {names}, got {value!r}")
    return value


def _instant(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_instant(value)
        except ValueError as exc:
            raise ScenarioError(f"{path}: {exc}") from None
    raise ScenarioError(f"{path}: expected an ISO-8601 instant or epoch milliseconds, got {value!r}")


def _load_time(obj: Mapping[str, Any], path: str, default: int) -> int:
    value = _field(obj, "loadTimeMillis", path, int, default)
    if value < 0:
        raise ScenarioError(f"{path}.loadTimeMillis: must be >= 0, got {value}")
    return int(value)


def _server(obj: Any, path: str, extra: Iterable[str] = ()) -> Server:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{path}: expected an object")
    _only(obj, path, _SERVER_KEYS | set(extra))
    _load_time(obj, path, 0)
    try:
        return Server(_field(obj, "name", path, str), _field(obj, "tier", path, str, "_default_tier"),
                      _field(obj, "maxSizeBytes", path, int), _field(obj, "decommissioning", path, bool, False))
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _segments(obj: Any, path: str) -> list[tuple[SegmentDescriptor, bool]]:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{path}: expected an object")
    source = _field(obj, "dataSource", path, str)
    version = _field(obj, "version", path, str, "v1")
    used = _field(obj, "used", path, bool, True)
    if "granularity" in obj or "count" in obj:
        _only(obj, path, _GENERATOR_KEYS)
        start = _instant(_field(obj, "start", path, (str, int)), f"{path}.start")
        count = _field(obj, "count", path, int)
        try:
            step = Period.parse(_field(obj, "granularity", path, str))
        except ValueError as exc:
            raise ScenarioError(f"{path}.granularity: {exc}") from None
        partitions = _field(obj, "partitions", path, int, 1)
        size = _field(obj, "sizeBytes", path, int, 0)
        if count < 0 or partitions < 1 or size < 0:
            raise ScenarioError(f"{path}: count and sizeBytes must be >= 0, partitions >= 1")
        out = []
        for i in range(count):
            interval = Interval(step.add_to(start, i), step.add_to(start, i + 1))
            out += [(SegmentDescriptor(source, interval, version, p, size), used) for p in range(partitions)]
        return out
    _only(obj, path, _SEGMENT_KEYS)
    if "interval" in obj:  # "start/end" (ISO-8601) instead of start and end
        try:
            interval = Interval.parse(_field(obj, "interval", path, str))
        except ValueError as exc:
            raise ScenarioError(f"{path}.interval: {exc}") from None
        start, end = interval.start, interval.end
    else:
        start = _instant(_field(obj, "start", path, (str, int)), f"{path}.start")
        end = _instant(_field(obj, "end", path, (str, int)), f"{path}.end")
    if end <= start:
        raise ScenarioError(f"{path}: end must be after start")
    size = _field(obj, "size", path, int, _field(obj, "sizeBytes", path, int, 0))
    seg = SegmentDescriptor(source, Interval(start, end), version, _field(obj, "partitionId", path, int, 0), size)
    return [(seg, used)]


def _rules(obj: Any, path: str) -> RuleSet:
    try:
        return RuleSet.parse(obj, path)
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _config(obj: Any, path: str) -> DynamicConfig:
    try:
        return DynamicConfig.parse(obj)
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _id_list(body: Mapping[str, Any], key: str, path: str, known: set[str]) -> list[str]:
    ids = _field(body, key, path, list)
    for i, x in enumerate(ids):
        if not isinstance(x, str):
            raise ScenarioError(f"{path}.{key}[{i}]: expected a segment id, got {x!r}")
        if x not in known:
            raise ScenarioError(f"{path}.{key}[{i}]: unknown segment {x!r}")
    return list(ids)


@dataclass(frozen=True, slots=True)
class Event:
    before_run: int
    type: str
    body: Mapping[str, Any]
    path: str


@dataclass(frozen=True)
class Scenario:
    now: int
    servers: tuple[Server, ...]
    segments: tuple[tuple[SegmentDescriptor, bool], ...]
    placement: Mapping[str, tuple[str, ...]]
    rules: RuleSet
    config: DynamicConfig
    runs: int = 1
    load_completion: str = "between_runs"
    events: tuple[Event, ...] = ()
    failure_rate: float = 0.0
    seed: int = 0
    period_millis: int = 60_000
    load_time_millis: int = 0
    server_load_time: Mapping[str, int] = field(default_factory=dict)
    config_doc: Mapping[str, Any] = field(default_factory=dict)  # the dynamicConfig as given (merged at start)

    @staticmethod
    def parse(doc: Any) -> Scenario:
        if not isinstance(doc, dict):
            raise ScenarioError("scenario: expected a JSON object")
        _only(doc, "scenario", {"now", "servers", "segments", "initialPlacement", "rules", "dynamicConfig", "runs",
                                "loadCompletion", "events", "failureRate", "seed", "periodMillis", "loadTimeMillis"})
        now = _instant(_field(doc, "now", "scenario", (str, int)), "scenario.now")
        servers = tuple(_server(s, f"servers[{i}]") for i, s in enumerate(_field(doc, "servers", "scenario", list)))
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ScenarioError("servers: duplicate server names")
        segments: list[tuple[SegmentDescriptor, bool]] = []
        for i, s in enumerate(_field(doc, "segments", "scenario", list, [])):
            segments += _segments(s, f"segments[{i}]")
        placement_doc = _field(doc, "initialPlacement", "scenario", dict, {})
        ids = {str(s.id) for s, _ in segments}
        placement: dict[str, tuple[str, ...]] = {}
        for server, held in placement_doc.items():
            if server not in names:
                raise ScenarioError(f"initialPlacement.{server}: no such server")
            if not isinstance(held, list) or not all(isinstance(x, str) for x in held):
                raise ScenarioError(f"initialPlacement.{server}: expected a list of segment ids")
            for x in held:
                if x not in ids:
                    raise ScenarioError(f"initialPlacement.{server}: unknown segment {x!r}")
            placement[server] = tuple(held)
        completion = _field(doc, "loadCompletion", "scenario", str, "between_runs")
        if completion not in ("between_runs", "manual"):
            raise ScenarioError(f"scenario.loadCompletion: expected 'between_runs' or 'manual', got {completion!r}")
        raw_events = _field(doc, "events", "scenario", list, [])
        defined = set(ids)  # every segment id the scenario defines, published at the start or by an event
        for i, e in enumerate(raw_events):
            if isinstance(e, dict) and e.get("type") == "publish" and isinstance(e.get("segments"), list):
                for j, s in enumerate(e["segments"]):
                    defined.update(str(seg.id) for seg, _ in _segments(s, f"events[{i}].segments[{j}]"))
        events = []
        for i, e in enumerate(raw_events):
            path = f"events[{i}]"
            if not isinstance(e, dict):
                raise ScenarioError(f"{path}: expected an object")
            kind = _field(e, "type", path, str)
            if kind not in EVENT_TYPES:
                raise ScenarioError(f"{path}.type: unknown event {kind!r} (known: {', '.join(EVENT_TYPES)})")
            events.append(Event(_field(e, "beforeRun", path, int), kind, e, path))
            _check_event(events[-1], defined)
        rate = _field(doc, "failureRate", "scenario", (int, float), 0.0)
        if not 0 <= rate <= 1:
            raise ScenarioError(f"scenario.failureRate: must be within [0, 1], got {rate}")
        runs = _field(doc, "runs", "scenario", int, 1)
        if runs < 0:
            raise ScenarioError(f"scenario.runs: must be >= 0, got {runs}")
        config_doc = _field(doc, "dynamicConfig", "scenario", dict, {})
        return Scenario(now, servers, tuple(segments), placement,
                        _rules(_field(doc, "rules", "scenario", dict, {}), "rules"),
                        _config(config_doc, "dynamicConfig"),
                        runs, completion, tuple(events), float(rate), _field(doc, "seed", "scenario", int, 0),
                        _field(doc, "periodMillis", "scenario", int, 60_000),
                        _load_time(doc, "scenario", 0),
                        {s["name"]: _load_time(s, f"servers[{i}]", -1) for i, s in enumerate(doc["servers"])
                         if "loadTimeMillis" in s}, dict(config_doc))


def _event_server(body: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], str]:
    """add_server's server: ``{"server": {...}}`` or the server's fields inline."""
    if isinstance(body.get("server"), dict):
        return body["server"], f"{path}.server"
    return {k: v for k, v in body.items() if k not in ("type", "beforeRun", "segments")}, path


def _event_name(body: Mapping[str, Any], path: str) -> str:
    """The server an event names: ``name`` or ``server``."""
    key = "name" if "name" in body else "server"
    return str(_field(body, key, path, str))


def _event_key(body: Mapping[str, Any], path: str, *keys: str) -> str:
    for key in keys:
        if key in body:
            return key
    raise ScenarioError(f"{path}.{keys[0]}: required")


def _check_event(e: Event, defined: set[str]) -> None:
    body, path = e.body, e.path
    _only(body, path, _EVENT_KEYS[e.type] | {"type", "beforeRun"})
    if e.type == "add_server":
        server, where = _event_server(body, path)
        if where != path:
            _only(body, path, {"type", "beforeRun", "server", "segments"})
        _server(server, where)
        if "segments" in body:
            _id_list(body, "segments", path, defined)
    elif e.type in ("remove_server", "decommission", "recommission"):
        _event_name(body, path)
    elif e.type == "server_adds_segments":
        _event_name(body, path)
        _id_list(body, "segments", path, defined)
    elif e.type == "set_now":
        key = _event_key(body, path, "now", "time")
        _instant(body[key], f"{path}.{key}")
    elif e.type == "set_rules":
        _rules(_field(body, "rules", path, dict), f"{path}.rules")
    elif e.type == "set_dynamic_config":
        key = _event_key(body, path, "dynamicConfig", "config")
        _config(_field(body, key, path, dict), f"{path}.{key}")
    elif e.type == "mark_unused":
        key = _event_key(body, path, "segments", "segmentIds")
        _field(body, key, path, list)
    elif e.type == "publish":
        for i, s in enumerate(_field(body, "segments", path, list)):
            _segments(s, f"{path}.segments[{i}]")


@dataclass(frozen=True, slots=True)
class Queued:
    """A command in flight to a server as the simulator shows it: a load (a move's load half has ``move_id`` and
    ``source``) or a drop. ``purpose`` is the planner's: loading, replica, broadcast, decommissioning, balancing
    or unloading."""

    action: str
    segment: SegmentId
    purpose: str
    move_id: str | None = None
    source: str | None = None
    command_id: str = ""

    @property
    def replica(self) -> bool:
        return self.purpose == "replica"

    def to_json(self) -> dict[str, Any]:
        move = self.move_id is not None and self.action == "load"
        out: dict[str, Any] = {"type": "move" if move else self.action, "segment": str(self.segment),
                               "purpose": self.purpose, "replica": self.replica}
        if move:
            out["from"] = self.source
        return out


ServerSnapshot = tuple[Server, tuple[SegmentId, ...], tuple[Queued, ...]]


def _servers_json(servers: Mapping[str, ServerSnapshot]) -> dict[str, Any]:
    return {name: {"tier": srv.tier, "decommissioning": srv.decommissioning, "loaded": [str(s) for s in loaded],
                   "queue": [q.to_json() for q in queue]}
            for name, (srv, loaded, queue) in sorted(servers.items())}


@dataclass(frozen=True, slots=True)
class RunReport:
    """One run: its plan, the servers right after its decisions (``planned``: before any load completes) and
    at the end of the coordinator period (``servers``), and every segment's used flag."""

    run: int
    now: int
    plan: Plan
    servers: Mapping[str, ServerSnapshot]
    used: Mapping[SegmentId, bool]
    planned: Mapping[str, ServerSnapshot] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "now": format_instant(self.now),
            "commands": [c.to_json() for c in self.plan.commands],
            "markedUnused": [{"segment": str(s), "reason": r} for s, r in self.plan.mark_unused],
            "planned": _servers_json(self.planned),
            "servers": _servers_json(self.servers),
            "used": {str(s): u for s, u in sorted(self.used.items())},
            "metrics": self.plan.metrics,
            "unknownTiers": list(self.plan.unknown_tiers),
        }


@dataclass(frozen=True, slots=True)
class _Historical:
    """A simulated historical: what the fold does not know of it (how long its loads take)."""

    name: str
    load_time: int


class Simulator:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.now = scenario.now
        self.start = scenario.now
        self.rng = np.random.default_rng(scenario.seed)
        self.state = PlacementState()
        self.touched = Touched()  # what the events folded since the last planning run changed
        self._events = 0
        # the metadata store's catalogue: every segment published and its used flag
        self.segments: dict[SegmentId, SegmentDescriptor] = {}
        self.used: dict[SegmentId, bool] = {}
        self.historicals: dict[str, _Historical] = {}
        for name, raw in sorted(scenario.rules.to_json().items()):
            self._fold(RulesSet(data_source=name, rules=tuple(raw)), "rules")
        if scenario.config_doc:
            self._fold(DynamicConfigSet(config=dict(scenario.config_doc)), "config")
        self._publish([seg for seg, _ in scenario.segments], [seg.id for seg, used in scenario.segments if not used])
        by_text = {str(s): s for s in self.segments}
        for server in scenario.servers:
            self._join(server, self._load_time(server.name), [by_text[x] for x in scenario.placement.get(
                server.name, ())])
        self.touched = Touched()

    # -- the log the simulated cluster writes ------------------------------------------------------
    def _fold(self, event: LogEvent, key: str, cause: str | None = None) -> Touched:
        self._events += 1
        env = Envelope(event, f"sim-{self._events:09d}", Instant(self.now), key, cause)
        touched = self.state.evolve(env)
        self.touched.merge(touched)
        return touched

    def _publish(self, segments: list[SegmentDescriptor], unused: list[SegmentId]) -> None:
        for seg in segments:
            self.segments[seg.id] = seg
            self.used[seg.id] = True
        if segments:
            self._fold(SegmentsPublished(task_id="scenario", segments=tuple(segments)), segments[0].data_source)
        self._mark_unused(unused, "published unused")

    def _mark_unused(self, sids: list[SegmentId], reason: str) -> None:
        for sid in sids:
            self.used[sid] = False
        if sids:
            self._fold(SegmentsMarkedUnused(segment_ids=tuple(str(s) for s in sids), reason=reason),
                       sids[0].data_source)

    def _join(self, server: Server, load_time: int, holding: Iterable[SegmentId]) -> None:
        self.historicals[server.name] = _Historical(server.name, load_time)
        self._fold(ServerJoined(server=server.name, tier=server.tier, max_size_bytes=server.max_size_bytes),
                   server.name)
        if server.decommissioning:
            self._fold(ServerDecommissioned(server=server.name), server.name)
        self._announce(server.name, holding)

    def _announce(self, name: str, sids: Iterable[SegmentId], cause: str | None = None) -> None:
        for sid in sids:
            self._fold(SegmentAnnounced(server=name, segment=self.segments[sid]), name, cause)

    def _load_time(self, name: str, given: int | None = None) -> int:
        if given is not None:
            return given
        return self.scenario.server_load_time.get(name, self.scenario.load_time_millis)

    # -- reading the fold ----------------------------------------------------------------------------
    @property
    def config(self) -> DynamicConfig:
        return self.state.config

    @property
    def rules(self) -> RuleSet:
        return self.state.rules

    def server(self, name: str) -> Server:
        facts = self.state.servers[name]
        return Server(name, facts.tier, facts.max_size_bytes, facts.decommissioning)

    def held(self, name: str) -> tuple[SegmentId, ...]:
        """What the server announced (and has not unannounced), sorted."""
        return tuple(sorted(self.state.held.get(name, ())))

    def in_flight(self) -> dict[str, list[tuple[str, InFlight]]]:
        """Per server, its commands in flight in the order sent (a move's drop half on its source included)."""
        out: dict[str, list[tuple[str, InFlight]]] = {}
        for cid, item in self.state.queue.items():
            out.setdefault(item.server, []).append((cid, item))
        return out

    def queue(self, name: str, in_flight: Mapping[str, list[tuple[str, InFlight]]] | None = None) \
            -> tuple[Queued, ...]:
        """The server's queue as shown: loads (a move on its target) and drops, a move's drop half excepted."""
        mine = (self.in_flight() if in_flight is None else in_flight).get(name, [])
        return tuple(Queued(item.action, item.segment, item.purpose, item.move_id, item.source, cid)
                     for cid, item in mine if not (item.action == "drop" and item.move_id is not None))

    def snapshot(self) -> dict[str, ServerSnapshot]:
        in_flight = self.in_flight()
        return {n: (self.server(n), self.held(n), self.queue(n, in_flight)) for n in sorted(self.historicals)}

    def view(self, run: int) -> ClusterView:
        """The fold as a planner snapshot (what :func:`~coordinator.planner.planner.plan` reads)."""
        servers, in_flight = {}, self.in_flight()
        for name in sorted(self.historicals):
            items = tuple(QueueItem("load" if q.action == "load" else "drop", q.segment,
                                    "decommissioning" if q.purpose == "decommissioning" else
                                    "balancing" if q.purpose == "balancing" else "loading", q.move_id, q.source)
                          for q in self.queue(name, in_flight))
            servers[name] = ServerState(self.server(name), frozenset(self.held(name)), items)
        segments = {sid: seg for sid, seg in self.segments.items()}
        return ClusterView(self.now, servers, segments, frozenset(s for s, u in self.used.items() if u),
                           self.rules, self.config, self.start, run)

    # -- scenario events -------------------------------------------------------------------------------
    def apply_event(self, e: Event) -> None:
        body = e.body
        if e.type == "add_server":
            obj, path = _event_server(body, e.path)
            server = _server(obj, path)
            if server.name in self.historicals:
                raise ScenarioError(f"{path}.name: server {server.name!r} exists already")
            holding = self._known(body.get("segments", []), f"{e.path}.segments")
            self._join(server, self._load_time(server.name, obj.get("loadTimeMillis")), holding)
        elif e.type == "remove_server":
            name = self._name(e)
            self._fold(ServerLeft(server=name), name)
            for sid in self.held(name):  # its data vanishes with it
                self._fold(SegmentUnannounced(server=name, segment_id=str(sid)), name)
            del self.historicals[name]
        elif e.type == "decommission":
            self._fold(ServerDecommissioned(server=self._name(e)), self._name(e))
        elif e.type == "recommission":
            self._fold(ServerRecommissioned(server=self._name(e)), self._name(e))
        elif e.type == "server_adds_segments":
            name = self._name(e)
            self._announce(name, self._known(body["segments"], f"{e.path}.segments"))
        elif e.type == "set_now":
            key = _event_key(body, e.path, "now", "time")
            self.now = _instant(body[key], f"{e.path}.{key}")
        elif e.type == "set_rules":
            _rules(body["rules"], f"{e.path}.rules")
            for name, raw in body["rules"].items():  # one POST per data source: the others keep theirs
                self._fold(RulesSet(data_source=name, rules=tuple(raw)), "rules")
        elif e.type == "set_dynamic_config":
            key = _event_key(body, e.path, "dynamicConfig", "config")
            try:
                self.state.config.updated(body[key])
            except ValueError as exc:
                raise ScenarioError(f"{e.path}.{key}: {exc}") from None
            self._fold(DynamicConfigSet(config=dict(body[key])), "config")  # merged into the current config
        elif e.type == "mark_unused":
            key = _event_key(body, e.path, "segments", "segmentIds")
            self._mark_unused(self._known(body[key], f"{e.path}.{key}"), "scenario")
        elif e.type == "publish":
            published: list[SegmentDescriptor] = []
            unused: list[SegmentId] = []
            for i, s in enumerate(body["segments"]):
                for seg, used in _segments(s, f"{e.path}.segments[{i}]"):
                    published.append(seg)
                    if not used:
                        unused.append(seg.id)
            self._publish(published, unused)
        elif e.type == "complete_queues":
            self.complete()  # everything, load times notwithstanding

    def _name(self, e: Event) -> str:
        name = _event_name(e.body, e.path)
        if name not in self.historicals:
            raise ScenarioError(f"{e.path}.name: no such server {name!r}")
        return name

    def _known(self, ids: Iterable[str], path: str) -> list[SegmentId]:
        by_text = {str(s): s for s in self.segments}
        out = []
        for i, x in enumerate(ids):
            if x not in by_text:
                raise ScenarioError(f"{path}[{i}]: unknown segment {x!r} (not published yet)")
            out.append(by_text[x])
        return out

    # -- the historicals work through their queues ----------------------------------------------------
    def complete(self, at: int | None = None) -> None:
        """Queues complete: drops, then loads, then moves. With ``at``, a load completes only when the
        server's load time has passed since it was queued; drops are immediate. Each outcome is an event
        the historical logs (announce, unannounce, refusal), folded as it happens."""
        in_flight = self.in_flight()
        for name in sorted(self.historicals):
            for cid, item in in_flight.get(name, []):
                if item.action == "drop" and item.move_id is None:
                    self._fold(SegmentUnannounced(server=name, segment_id=str(item.segment)), name, cid)
        for moves in (False, True):
            in_flight = self.in_flight()
            for name in sorted(self.historicals):
                load_time = self.historicals[name].load_time
                for cid, item in in_flight.get(name, []):
                    if item.action != "load" or (item.move_id is not None) != moves or cid not in self.state.queue:
                        continue
                    if at is not None and item.sent_at + load_time > at:
                        continue  # still loading
                    if self._loads(name, cid, item) and item.move_id is not None:
                        for half in self.state.of_move(item.move_id):  # the source drops its copy now
                            drop = self.state.queue[half]
                            if drop.action == "drop" and drop.server in self.historicals:
                                self._fold(SegmentUnannounced(server=drop.server, segment_id=str(drop.segment)),
                                           drop.server, half)

    def _loads(self, name: str, cid: str, item: InFlight) -> bool:
        sid = item.segment
        seg = self.segments.get(sid) or self.state.segments.get(sid)
        size = seg.size if seg is not None else 0
        max_size = self.state.servers[name].max_size_bytes
        used = sum(self.segments[s].size for s in self.state.held.get(name, ()) if s in self.segments)
        reason = None
        if self.scenario.failure_rate > 0 and self.rng.random() < self.scenario.failure_rate:
            reason = "load failed"
        elif used + size > max_size or seg is None:
            reason = "no room" if seg is not None else "unknown segment"
        if reason is not None:
            self._fold(SegmentLoadRefused(server=name, command_id=cid, segment_id=str(sid), reason=reason,
                                          used_bytes=used, max_size_bytes=max_size, move_id=item.move_id), name)
            return False
        assert seg is not None
        self._fold(SegmentAnnounced(server=name, segment=seg), name, cid)
        return True

    # -- runs ------------------------------------------------------------------------------------------
    def run(self, compute_cost: bool = True, planner: str = "full", fresh_caches: bool = False,
            sweep_chunk: int = SWEEP_CHUNK) -> list[RunReport]:
        """Every run of the scenario.

        ``planner="incremental"`` plans each run like the planner agent does: a run after a server, rule,
        config or clock change looks at every segment; any other run only at the segments the events folded
        since the last run touched (loads completed, publishes, marks) plus those earlier runs left short
        (``Plan.deferred``), and every ``FULL_RUN_EVERY_MS`` of scenario time at every segment (period rules
        move segments as time passes). Both planners end every scenario in the same state (a test checks it).
        ``planner="sweep"`` is the incremental planner as the planner agent's timer runs it: the first run and
        the periodic ones look at every segment in a :class:`~coordinator.planner.sweep.Sweep` of
        ``sweep_chunk`` segments per slice, every slice after the run's own plan (their decisions join that run's
        plan: a run is a coordinator period, in which the agent takes many slices), while runs after a server,
        rule, config or clock change still look at every segment at once.
        ``fresh_caches`` drops the fold's cost caches before every run (they are rebuilt: same plans)."""
        if planner not in ("full", "incremental", "sweep"):
            raise ScenarioError(f"planner: 'full', 'incremental' or 'sweep', got {planner!r}")
        reports = []
        deferred: set[SegmentId] = set()
        last_full: int | None = None
        sweep: Sweep | None = None
        for run in range(1, self.scenario.runs + 1):
            clock = self.now
            for e in self.scenario.events:
                if e.before_run == run:
                    self.apply_event(e)
            touched, self.touched = self.touched, Touched()
            if fresh_caches:
                self.state.caches.clear()
            due = last_full is None or self.now - last_full >= FULL_RUN_EVERY_MS
            full = planner == "full" or touched.cluster or self.now != clock or (due and planner == "incremental")
            if planner == "sweep" and due and not full and sweep is None:
                sweep = Sweep(run=run, started=self.now)
            scope = None if full else (touched.segments | deferred)
            result = plan_state(self.state, self.now, run, self.start, compute_cost, scope=scope)
            if full:
                last_full = self.now
            deferred = set(result.deferred) | {sid for sid, _ in result.mark_unused}
            while sweep is not None:  # its slices after the run's own plan (which balanced already)
                current = sweep
                piece = current.next_slice(self.state, sweep_chunk)
                if piece.final:
                    last_full, sweep = current.started, None
                wait = self.state.config.millis_to_wait_before_deleting
                if piece.mark_sources is not None and self.now >= self.start + wait:
                    self.state.mark_all = False  # the whole-cluster marking under way, source by source
                part = plan_state(self.state, self.now, run, self.start, compute_cost, balance=False,
                                  scope=piece.scope, mark_overshadowed=piece.mark_sources is not None,
                                  drained=current.drained, mark_sources=piece.mark_sources)
                deferred = (deferred - piece.scope) | set(part.deferred) | {sid for sid, _ in part.mark_unused}
                result = Plan(result.commands + part.commands, result.mark_unused + part.mark_unused,
                              result.metrics, result.unknown_tiers, result.deferred | part.deferred)
            for sid, _reason in result.mark_unused:  # the coordinator's marks reach the metadata store
                self.used[sid] = False
            planned = self.snapshot()
            if self.scenario.load_completion == "between_runs":
                self.complete(self.now + self.scenario.period_millis)
            reports.append(RunReport(run, self.now, result, self.snapshot(), dict(self.used), planned))
            self.now += self.scenario.period_millis
        return reports
