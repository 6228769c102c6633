"""The service's metrics: Druid's names, served by prometheus_client and written to the ``metrics`` topic.

**Planner runs.** Every run of the planner agent reports the metrics the pure planner computes
(:attr:`coordinator.planner.planner.Plan.metrics`: ``segment/assigned/count``, ``segment/moved/count``,
``segment/dropped/count``, ``segment/unavailable/count``, ``segment/underReplicated/count``,
``segment/loadQueue/count``, ...) plus ``coordinator/time`` (the run's duration in ms) and
``segment/loadQueue/size`` (bytes queued to load per server, kept by the placement fold; like the per-server
queue counts it comes with full and timer runs, not with a publish's own run).
Each is a gauge of the last run's value, as Druid's coordinator emits one value per run; a metric
broken down by tier or server carries that dimension (``tier`` or ``server``).

**Scoped runs are reported together.** Druid's coordinator runs once a period; the incremental planner runs
once per batch holding a publish or an announce (hundreds a second), and one report per run (gauges, one
``metrics`` record per value, one INFO line) cost the planner's thread more than the run itself at low rates
(docs/service.md, "The planner process per batch"). So a run scoped to what an event touched (``full=False``:
event runs, timer runs of what timed out, balancing and sweep slices) is added to a pending report, and
:meth:`ServiceMetrics.flush_runs` (the observer's timer, and every full run before its own report) reports
the runs since the last report as one: what they counted summed (``segment/assigned/count`` ... and
``coordinator/time``, their time in all), the levels (:data:`LEVELS`) as the last run left them, at the last
run's time, with one INFO line when they decided something (``... in 4 ms over 12 runs``). A full run is
reported at once, as before.

**Agents.** Per agent of the worker (``timeline``, ``lockbox``, ``planner``): records processed
(``segcoord/agent/events``, a counter), events/s between two timer ticks (``segcoord/agent/events/rate``),
batch latency (``segcoord/agent/batch/time``, a histogram in seconds) and lag (``segcoord/agent/lag``,
records behind the end of its inputs).

**Names.** Prometheus: Druid's prometheus-emitter convention, ``druid_`` + the name with ``/`` as ``_``
(``segment/assigned/count`` -> ``druid_segment_assigned_count``); the agents' metrics likewise
(``druid_segcoord_agent_lag``). Kafka: one JSON object per value on ``metrics``, the shape Druid's
Kafka emitter writes: ``{"feed": "metrics", "timestamp", "service", "host", "version", "metric",
"value", <dimensions>}``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from coordinator.placement.state import PlacementState
from coordinator.planner.planner import Plan
from coordinator.readmodel.placement import HealthCounts

SERVICE = "segcoord/coordinator"
VERSION = "0.1.0"
#: The planner's metrics broken down by server (all others with a breakdown are by tier).
BY_SERVER = frozenset({"segment/loadQueue/count", "segment/dropQueue/count", "segment/loadQueue/size"})
#: Counted over the run's scope: only a full run's values describe the cluster.
WHOLE_CLUSTER = frozenset({"segment/unavailable/count", "segment/underReplicated/count"})
#: Levels, not counts: runs reported together report the last run's value of these (the others are summed).
LEVELS = BY_SERVER | {"balancer/cost/before", "balancer/cost/after", "coordination/paused"}

log = logging.getLogger("segcoord.planner")


def prometheus_name(metric: str) -> str:
    """``segment/assigned/count`` -> ``druid_segment_assigned_count``."""
    return "druid_" + metric.replace("/", "_")


Emit = Callable[[bytes, bytes], None]  # (key, value) onto the metrics topic
Value = tuple[str, str | None, str | None, float]  # (Druid metric, dimension name, dimension value, value)


class ServiceMetrics:
    """Gauges, counters and histograms of one worker; thread-safe (planner runs are on a thread of their own)."""

    def __init__(self, emit: Emit | None = None, host: str | None = None) -> None:
        self.registry = CollectorRegistry()
        self.emit = emit
        self.host = host or socket.gethostname()
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()
        self.events = Counter(prometheus_name("segcoord/agent/events"), "records processed by the agent",
                              ["agent"], registry=self.registry)
        self.batch_time = Histogram(prometheus_name("segcoord/agent/batch/time"), "seconds per batch",
                                    ["agent"], registry=self.registry,
                                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.lag = Gauge(prometheus_name("segcoord/agent/lag"), "records behind the end of the agent's inputs",
                         ["agent"], registry=self.registry)
        self.last_plan: dict[str, Any] | None = None
        self._children: dict[str, tuple[Any, Any, Any]] = {}  # agent -> its events, batch time and lag children
        self._counted: dict[str, tuple[float, int]] = {}  # agent -> (events counted, when) at the last publish
        # scoped runs not reported yet (see "Scoped runs are reported together"): (metric, dim, key) -> value,
        # commands by kind, marks, runs, and the last run's time; under _pending_lock (planner thread and timer)
        self._pending_lock = threading.Lock()
        self._pending: dict[tuple[str, str | None, str | None], float] = {}
        self._pending_kinds: dict[str, int] = {}
        self._pending_marked = 0
        self._pending_runs = 0
        self._pending_at = 0

    def _gauge(self, metric: str, dimension: str | None) -> Gauge:
        with self._lock:
            g = self._gauges.get(metric)
            if g is None:
                g = Gauge(prometheus_name(metric), f"Druid's {metric}, last planner run",
                          [dimension] if dimension else [], registry=self.registry)
                self._gauges[metric] = g
            return g

    # -- the planner -------------------------------------------------------------------------
    def plan_run(self, result: Plan, state: PlacementState, duration_ms: float, at_ms: int,
                 full: bool = True) -> None:
        """One planner run: its Druid metrics to the gauges and the topic, and one INFO line if it decided; a
        scoped run (``full=False``) is added to the pending report instead (module docstring).

        A run scoped to the segments an event touched counts ``segment/unavailable/count`` and
        ``segment/underReplicated/count`` over those alone: they come from full runs and :meth:`load_health`."""
        if not full:
            self._add_pending(result, duration_ms, at_ms)
            return
        self.flush_runs()  # the scoped runs before it first: the topic stays in run order
        values = _values(result, True)
        values.append(("coordinator/time", None, None, round(duration_ms, 3)))
        kinds = _kinds(result)
        self._report(values, at_ms, duration_ms, kinds, len(result.mark_unused), 1)

    def _add_pending(self, result: Plan, duration_ms: float, at_ms: int) -> None:
        values = _values(result, False)
        with self._pending_lock:
            pending = self._pending
            for metric, dim, key, value in values:
                at = (metric, dim, key)
                pending[at] = value if metric in LEVELS else pending.get(at, 0.0) + value
            at = ("coordinator/time", None, None)
            pending[at] = pending.get(at, 0.0) + duration_ms
            if result.commands:
                kinds = self._pending_kinds
                for cmd in result.commands:
                    kinds[cmd.type] = kinds.get(cmd.type, 0) + 1
            self._pending_marked += len(result.mark_unused)
            self._pending_runs += 1
            self._pending_at = max(self._pending_at, at_ms)

    def flush_runs(self) -> None:
        """Report the scoped runs since the last report as one (module docstring); nothing when there were none."""
        with self._pending_lock:
            if not self._pending_runs:
                return
            pending, kinds = self._pending, self._pending_kinds
            runs, marked, at_ms = self._pending_runs, self._pending_marked, self._pending_at
            self._pending, self._pending_kinds = {}, {}
            self._pending_runs = self._pending_marked = 0
        duration_ms = pending[("coordinator/time", None, None)]
        values = [(metric, dim, key, round(value, 3) if metric == "coordinator/time" else value)
                  for (metric, dim, key), value in sorted(pending.items(), key=_value_order)]
        self._report(values, at_ms, duration_ms, kinds, marked, runs)

    def _report(self, values: list[Value], at_ms: int, duration_ms: float, kinds: Mapping[str, int], marked: int,
                runs: int) -> None:
        self._set(values)
        self.last_plan = {"at": at_ms, "durationMs": round(duration_ms, 3)}
        self._publish(values, at_ms)
        if any(kinds.values()) or marked:
            log.info("planned %d loads, %d drops, %d moves, %d cancels, %d marked unused in %.0f ms%s",
                     kinds.get("load", 0), kinds.get("drop", 0), kinds.get("move", 0), kinds.get("cancel", 0),
                     marked, duration_ms, f" over {runs} runs" if runs > 1 else "")

    def load_health(self, state: PlacementState, at_ms: int) -> None:
        """``segment/unavailable/count`` and ``segment/underReplicated/count`` per tier over every used segment
        (the read model :func:`coordinator.readmodel.placement.tier_health`); O(used segments) in one go."""
        counts = HealthCounts()
        counts.add(state, at_ms, state.used)
        self.publish_health(counts, at_ms)

    def publish_health(self, counts: HealthCounts, at_ms: int) -> None:
        """The counts of :meth:`load_health`, counted by the caller (a slice at a time: streaming.service.observe),
        to the gauges and the topic."""
        values: list[Value] = [("segment/unavailable/count", None, None, float(counts.unavailable))]
        values.extend(("segment/underReplicated/count", "tier", tier, float(h["underReplicated"]))
                      for tier, h in counts.tiers().items())
        self._set(values)
        self._publish(values, at_ms)

    def _set(self, values: Sequence[Value]) -> None:
        for metric, dim, key, value in values:
            g = self._gauge(metric, dim)
            (g.labels(key) if dim else g).set(value)

    # -- the agents --------------------------------------------------------------------------
    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None:
        children = self._children.get(agent)
        if children is None:  # each labels() call takes the metric's lock and builds a key: once per agent
            children = self._children[agent] = (self.events.labels(agent), self.batch_time.labels(agent),
                                                self.lag.labels(agent))
        events, batch_time, lag_gauge = children
        events.inc(records)
        batch_time.observe(seconds)
        if lag is not None:
            lag_gauge.set(lag)

    def publish_agents(self, at_ms: int) -> None:
        """The agents' lag and events/s since the last call, to the gauges and the topic (called on the
        planner's timer)."""
        values: list[Value] = [("segcoord/agent/lag", "agent", s.labels["agent"], s.value)
                               for m in self.lag.collect() for s in m.samples]
        counts = {s.labels["agent"]: s.value for m in self.events.collect() for s in m.samples
                  if s.name.endswith("_total")}
        for agent, count in sorted(counts.items()):
            before = self._counted.get(agent)
            if before is not None and at_ms > before[1]:
                rate = (count - before[0]) * 1000.0 / (at_ms - before[1])
                values.append(("segcoord/agent/events/rate", "agent", agent, round(rate, 3)))
            self._counted[agent] = (count, at_ms)
        self._set([v for v in values if v[0] == "segcoord/agent/events/rate"])
        self._publish(values, at_ms)

    def balancer(self, alive: bool | float, at_ms: int) -> None:
        """Whether the Spark balancer ``segcoord run --balancer spark`` started is running: 1 yes, 0 it ended (and is
        restarted after a backoff), -1 it failed too often and the planner agent balances instead."""
        values: list[Value] = [("segcoord/balancer/alive", None, None, float(alive))]
        self._set(values)
        self._publish(values, at_ms)

    # -- output ------------------------------------------------------------------------------
    def _publish(self, values: Sequence[Value], at_ms: int) -> None:
        if self.emit is None:
            return
        from events.instant import format_instant

        stamp = format_instant(at_ms)
        for metric, dim, key, value in values:
            doc: dict[str, Any] = {"feed": "metrics", "timestamp": stamp, "service": SERVICE, "host": self.host,
                                   "version": VERSION, "metric": metric,
                                   "value": int(value) if float(value).is_integer() else value}
            if dim:
                doc[dim] = key
            self.emit(metric.encode(), orjson.dumps(doc))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)


def _values(result: Plan, full: bool) -> list[Value]:
    """A run's metrics as values (``decisions`` left out; a scoped run's whole-cluster counts too)."""
    values: list[Value] = []
    for metric, value in sorted(result.metrics.items()):
        if metric == "decisions" or (not full and metric in WHOLE_CLUSTER):
            continue
        if isinstance(value, Mapping):
            dim = "server" if metric in BY_SERVER else "tier"
            values.extend((metric, dim, str(k), float(v)) for k, v in sorted(value.items()))
        elif isinstance(value, int | float):
            values.append((metric, None, None, float(value)))
    return values


def _value_order(item: tuple[tuple[str, str | None, str | None], float]) -> tuple[bool, str, str, str]:
    """Pending values in a run's report order: metrics by name (``coordinator/time`` last), then dimension."""
    (metric, dim, key), _ = item
    return metric == "coordinator/time", metric, dim or "", key or ""


def _kinds(result: Plan) -> dict[str, int]:
    kinds = {k: 0 for k in ("load", "drop", "move", "cancel")}
    for cmd in result.commands:
        kinds[cmd.type] = kinds.get(cmd.type, 0) + 1
    return kinds


def now_ms() -> int:
    return int(time.time() * 1000)
