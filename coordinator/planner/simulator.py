"""A deterministic cluster simulator: servers execute the planner's commands, time is stepped explicitly.

A scenario (JSON, see :func:`Scenario.parse`) gives the servers, the segments
(explicit or generated), an initial placement, rules, dynamic config, the number
of runs and events before given runs. Each run: events apply, the planner runs
on a snapshot, its commands enter the servers' queues, overshadowed or
drop-rule segments are marked unused, and with ``loadCompletion``
``"between_runs"`` (the default) the queues then complete by the end of the
coordinator period: drops, then the loads whose server's ``loadTimeMillis`` (per
server, or the scenario's default, 0) has passed since they were queued, then
moves (a move's source drops its copy only after the target loaded it; a load
fails with probability ``failureRate``, drawn from a generator seeded by
``seed``, and a failed move leaves the source's copy in place). With
``"manual"`` queues complete only at ``complete_queues`` events, load times
notwithstanding. After each run
``now`` advances by ``periodMillis`` (Druid's coordinator period, 60 s).

**Invariants.** Same scenario, same output. A server never loads beyond its size
(a load that no longer fits fails). A removed server's queue vanishes with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from coordinator.planner.cluster import ClusterView, Purpose, QueueItem, Server, ServerState
from coordinator.planner.cost_shelf import CostCacheShelf
from coordinator.planner.planner import FULL_RUN_EVERY_MS, Plan, plan, plan_state
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events.instant import format_instant, parse_instant
from events.interval import Interval
from events.period import Period
from events.segment import SegmentDescriptor, SegmentId

EVENT_TYPES = ("add_server", "remove_server", "decommission", "recommission", "set_now", "set_rules",
               "set_dynamic_config", "mark_unused", "publish", "complete_queues")


class ScenarioError(ValueError):
    """A scenario file problem, naming the field."""


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


def _server(obj: Any, path: str) -> Server:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{path}: expected an object")
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
    if "granularity" in obj or "count" in obj:
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
            out += [(SegmentDescriptor(source, interval, version, p, size), True) for p in range(partitions)]
        return out
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
    return [(seg, _field(obj, "used", path, bool, True))]


def _rules(obj: Any, path: str) -> RuleSet:
    try:
        return RuleSet.parse(obj)
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _config(obj: Any, path: str) -> DynamicConfig:
    try:
        return DynamicConfig.parse(obj)
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


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

    @staticmethod
    def parse(doc: Any) -> Scenario:
        if not isinstance(doc, dict):
            raise ScenarioError("scenario: expected a JSON object")
        known = {"now", "servers", "segments", "initialPlacement", "rules", "dynamicConfig", "runs",
                 "loadCompletion", "events", "failureRate", "seed", "periodMillis", "loadTimeMillis"}
        for key in doc:
            if key not in known:
                raise ScenarioError(f"scenario.{key}: unknown field (known: {', '.join(sorted(known))})")
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
        events = []
        for i, e in enumerate(_field(doc, "events", "scenario", list, [])):
            path = f"events[{i}]"
            if not isinstance(e, dict):
                raise ScenarioError(f"{path}: expected an object")
            kind = _field(e, "type", path, str)
            if kind not in EVENT_TYPES:
                raise ScenarioError(f"{path}.type: unknown event {kind!r} (known: {', '.join(EVENT_TYPES)})")
            events.append(Event(_field(e, "beforeRun", path, int), kind, e, path))
            _check_event(events[-1])
        rate = _field(doc, "failureRate", "scenario", (int, float), 0.0)
        if not 0 <= rate <= 1:
            raise ScenarioError(f"scenario.failureRate: must be within [0, 1], got {rate}")
        runs = _field(doc, "runs", "scenario", int, 1)
        if runs < 0:
            raise ScenarioError(f"scenario.runs: must be >= 0, got {runs}")
        return Scenario(now, servers, tuple(segments), placement,
                        _rules(_field(doc, "rules", "scenario", dict, {}), "rules"),
                        _config(_field(doc, "dynamicConfig", "scenario", dict, {}), "dynamicConfig"),
                        runs, completion, tuple(events), float(rate), _field(doc, "seed", "scenario", int, 0),
                        _field(doc, "periodMillis", "scenario", int, 60_000),
                        _load_time(doc, "scenario", 0),
                        {s["name"]: _load_time(s, f"servers[{i}]", -1) for i, s in enumerate(doc["servers"])
                         if "loadTimeMillis" in s})


def _event_server(body: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], str]:
    """add_server's server: ``{"server": {...}}`` or the server's fields inline."""
    if isinstance(body.get("server"), dict):
        return body["server"], f"{path}.server"
    return {k: v for k, v in body.items() if k not in ("type", "beforeRun")}, path


def _event_name(body: Mapping[str, Any], path: str) -> str:
    """The server an event names: ``name`` or ``server``."""
    key = "name" if "name" in body else "server"
    return str(_field(body, key, path, str))


def _event_key(body: Mapping[str, Any], path: str, *keys: str) -> str:
    for key in keys:
        if key in body:
            return key
    raise ScenarioError(f"{path}.{keys[0]}: required")


def _check_event(e: Event) -> None:
    body, path = e.body, e.path
    if e.type == "add_server":
        _server(*_event_server(body, path))
    elif e.type in ("remove_server", "decommission", "recommission"):
        _event_name(body, path)
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


@dataclass
class _Node:
    server: Server
    load_time: int = 0
    loaded: set[SegmentId] = field(default_factory=set)
    queue: list[QueueItem] = field(default_factory=list)
    queued_at: dict[QueueItem, int] = field(default_factory=dict)

    def enqueue(self, item: QueueItem, at: int) -> None:
        self.queue.append(item)
        self.queued_at[item] = at


@dataclass(frozen=True, slots=True)
class RunReport:
    run: int
    now: int
    plan: Plan
    servers: Mapping[str, tuple[Server, tuple[SegmentId, ...], tuple[QueueItem, ...]]]
    used: Mapping[SegmentId, bool]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "now": format_instant(self.now),
            "commands": [c.to_json() for c in self.plan.commands],
            "markedUnused": [{"segment": str(s), "reason": r} for s, r in self.plan.mark_unused],
            "servers": {name: {"tier": srv.tier, "decommissioning": srv.decommissioning,
                               "loaded": [str(s) for s in loaded],
                               "queue": [{"type": q.action if q.move_id is None else "move", "segment": str(q.segment)}
                                         for q in queue]}
                        for name, (srv, loaded, queue) in sorted(self.servers.items())},
            "used": {str(s): u for s, u in sorted(self.used.items())},
            "metrics": self.plan.metrics,
            "unknownTiers": list(self.plan.unknown_tiers),
        }


class Simulator:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.now = scenario.now
        self.start = scenario.now
        self.rules = scenario.rules
        self.config = scenario.config
        self.rng = np.random.default_rng(scenario.seed)
        self.segments: dict[SegmentId, SegmentDescriptor] = {}
        self.used: dict[SegmentId, bool] = {}
        for seg, used in scenario.segments:
            self.segments[seg.id] = seg
            self.used[seg.id] = used
        by_text = {str(s): s for s in self.segments}
        self.nodes: dict[str, _Node] = {s.name: _Node(s, self._load_time(s.name)) for s in scenario.servers}
        for name, held in scenario.placement.items():
            self.nodes[name].loaded.update(by_text[x] for x in held)

    def _load_time(self, name: str, given: int | None = None) -> int:
        if given is not None:
            return given
        return self.scenario.server_load_time.get(name, self.scenario.load_time_millis)

    def view(self, run: int) -> ClusterView:
        servers = {n: ServerState(node.server, frozenset(node.loaded), tuple(node.queue))
                   for n, node in self.nodes.items()}
        return ClusterView(self.now, servers, dict(self.segments),
                           frozenset(s for s, u in self.used.items() if u), self.rules, self.config,
                           self.start, run)

    def apply_event(self, e: Event) -> None:
        body = e.body
        if e.type == "add_server":
            obj, path = _event_server(body, e.path)
            server = _server(obj, path)
            if server.name in self.nodes:
                raise ScenarioError(f"{path}.name: server {server.name!r} exists already")
            self.nodes[server.name] = _Node(server, self._load_time(server.name, obj.get("loadTimeMillis")))
        elif e.type == "remove_server":
            name = _event_name(body, e.path)
            self._node(name, e)
            del self.nodes[name]
        elif e.type in ("decommission", "recommission"):
            node = self._node(_event_name(body, e.path), e)
            node.server = replace(node.server, decommissioning=e.type == "decommission")
        elif e.type == "set_now":
            key = _event_key(body, e.path, "now", "time")
            self.now = _instant(body[key], f"{e.path}.{key}")
        elif e.type == "set_rules":
            self.rules = _rules(body["rules"], f"{e.path}.rules")
        elif e.type == "set_dynamic_config":
            key = _event_key(body, e.path, "dynamicConfig", "config")
            self.config = _config(body[key], f"{e.path}.{key}")
        elif e.type == "mark_unused":
            by_text = {str(s): s for s in self.segments}
            for x in body[_event_key(body, e.path, "segments", "segmentIds")]:
                if x not in by_text:
                    raise ScenarioError(f"{e.path}.segments: unknown segment {x!r}")
                self.used[by_text[x]] = False
        elif e.type == "publish":
            for i, s in enumerate(body["segments"]):
                for seg, used in _segments(s, f"{e.path}.segments[{i}]"):
                    self.segments[seg.id] = seg
                    self.used[seg.id] = used
        elif e.type == "complete_queues":
            self.complete()  # everything, load times notwithstanding

    def _node(self, name: str, e: Event) -> _Node:
        if name not in self.nodes:
            raise ScenarioError(f"{e.path}.name: no such server {name!r}")
        return self.nodes[name]

    def enqueue(self, result: Plan) -> None:
        for c in result.commands:
            node = self.nodes[c.server]
            if c.type == "cancel":
                node.queue = [q for q in node.queue if not (q.segment == c.segment and q.action == "load")]
            elif c.type == "drop":
                node.enqueue(QueueItem("drop", c.segment), self.now)
            elif c.type == "load":
                node.enqueue(QueueItem("load", c.segment, "loading"), self.now)
            else:
                purpose: Purpose = "decommissioning" if c.reason.startswith("draining") else "balancing"
                node.enqueue(QueueItem("load", c.segment, purpose, c.move_id, c.source), self.now)
        for sid, _reason in result.mark_unused:
            self.used[sid] = False

    def complete(self, at: int | None = None) -> None:
        """Queues complete: drops, then loads, then moves. With ``at``, a load completes only when the
        server's load time has passed since it was queued; drops are immediate."""
        for name in sorted(self.nodes):
            node = self.nodes[name]
            for q in node.queue:
                if q.action == "drop":
                    node.loaded.discard(q.segment)
                    node.queued_at.pop(q, None)
            node.queue = [q for q in node.queue if q.action != "drop"]
        for moves in (False, True):
            for name in sorted(self.nodes):
                node = self.nodes[name]
                for q in [q for q in node.queue if (q.move_id is not None) == moves]:
                    if at is not None and node.queued_at.get(q, at) + node.load_time > at:
                        continue  # still loading
                    node.queue.remove(q)
                    node.queued_at.pop(q, None)
                    if self._loads(node, q.segment) and q.source in self.nodes:
                        self.nodes[q.source].loaded.discard(q.segment)

    def _loads(self, node: _Node, sid: SegmentId) -> bool:
        if self.scenario.failure_rate > 0 and self.rng.random() < self.scenario.failure_rate:
            return False
        used = sum(self.segments[s].size for s in node.loaded if s in self.segments)
        size = self.segments[sid].size if sid in self.segments else 0
        if used + size > node.server.max_size_bytes:
            return False
        node.loaded.add(sid)
        return True

    def run(self, compute_cost: bool = True, shelf: CostCacheShelf | None = None,
            planner: str = "full") -> list[RunReport]:
        """Every run of the scenario; with ``shelf`` the cost caches live across runs (same reports).

        ``planner="incremental"`` plans each run like the planner agent does: a run after a server, rule,
        config or clock change looks at every segment; any other run only at the segments whose placement or
        used flag changed since the last run (loads completed, publishes, marks) plus those earlier runs left
        short (``Plan.deferred``), and every ``FULL_RUN_EVERY_MS`` of scenario time at every segment (period
        rules move segments as time passes). Both planners end every scenario in the same state (a test checks it)."""
        if planner not in ("full", "incremental"):
            raise ScenarioError(f"planner: 'full' or 'incremental', got {planner!r}")
        reports = []
        before: dict[SegmentId, tuple[object, ...]] | None = None
        deferred: set[SegmentId] = set()
        last_full = self.now
        for run in range(1, self.scenario.runs + 1):
            cluster_change = False
            for e in self.scenario.events:
                if e.before_run == run:
                    self.apply_event(e)
                    cluster_change |= e.type not in ("publish", "mark_unused", "complete_queues")
            view = self.view(run)
            now_sig = self._signatures()
            if planner == "full" or before is None or cluster_change or self.now - last_full >= FULL_RUN_EVERY_MS:
                result = plan(view, compute_cost, shelf=shelf)
                last_full = self.now
            else:
                touched = {sid for sid in now_sig.keys() | before.keys() if now_sig.get(sid) != before.get(sid)}
                state = view.placement()
                result = plan_state(state, view.now, run, view.coordinator_start, compute_cost,
                                    scope=touched | deferred, mark_overshadowed=True)
            deferred = set(result.deferred) | {sid for sid, _ in result.mark_unused}
            self.enqueue(result)
            before = self._signatures()  # what the planner knows: its own commands queued; completions are news
            if self.scenario.load_completion == "between_runs":
                self.complete(self.now + self.scenario.period_millis)
            servers = {n: (node.server, tuple(sorted(node.loaded)), tuple(node.queue))
                       for n, node in self.nodes.items()}
            reports.append(RunReport(run, self.now, result, servers, dict(self.used)))
            self.now += self.scenario.period_millis
        return reports

    def _signatures(self) -> dict[SegmentId, tuple[object, ...]]:
        """Per segment: where it is loaded and queued, and whether it is used (what a planning run reads of it)."""
        out: dict[SegmentId, list[object]] = {}
        for name in sorted(self.nodes):
            node = self.nodes[name]
            for sid in node.loaded:
                out.setdefault(sid, []).append(("loaded", name))
            for q in node.queue:
                out.setdefault(q.segment, []).append(("queued", name, q))
        for sid, used in self.used.items():
            out.setdefault(sid, []).append(("used", used))
        return {sid: tuple(sorted(v, key=repr)) for sid, v in out.items()}
