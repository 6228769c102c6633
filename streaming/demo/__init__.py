"""``segcoord demo`` (``make run``): the coordinator at work on a cluster of its own, for about two minutes.

On an isolated home (``$SEGCOORD_HOME/demo``: its own local broker) and a topic
prefix of its own (``demo-<run>.``), so the user's broker and topics are never
touched, it starts ``segcoord run --balancer spark`` and four simulated
historicals on two tiers (``hot``, ``_default_tier``), then drives a workload:

1. three streaming data sources append hourly segments (tasks lock, allocate, publish);
2. a compaction swaps one day of ``wikipedia`` at once (one new version overshadows 24 hours);
3. a rule change (``loadByPeriod P1D`` on ``hot``) moves the recent hours to the hot tier;
4. a fifth historical joins ``_default_tier`` and the Spark balancer moves segments onto it;
5. one historical is decommissioned and drained, then stopped;
6. one historical is killed (SIGKILL); historicals have no liveness check yet, so the
   demo writes its ``server_left`` as an operator would, and its segments are loaded again.

Each step waits for its outcome (conditions on the log, with a timeout). Progress is
shown live; at the end ``segcoord audit`` runs over the whole log and the report
(``<out>/index.html`` with plots, ``report.json``, ``logs/``) is written.
``--keep`` leaves the broker, the service and the historicals running;
``--quick`` runs a shortened workload (the CI smoke test).
"""

from __future__ import annotations

import gc
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from events.topics import Topics
from streaming.demo.display import Display
from streaming.demo.processes import Child, Processes
from streaming.demo.watch import Watch
from streaming.demo.workload import DAY, HOT_RULES, HOUR, INITIAL_RULES, Ingestion, Operator, compact, hours_of

MAX_SIZE = "50GB"
MAX_SIZE_BYTES = 50 * 10**9


class DemoFailed(RuntimeError):
    """A step did not reach its outcome in time (or a process died)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How long the workload is."""

    recent_hours: int  # hours of recent data (besides the compaction day) per data source
    pace_s: float  # between two hours of one data source
    step_timeout_s: float
    load_ms: int

    @staticmethod
    def of(quick: bool) -> Plan:
        return Plan(6, 0.2, 150.0, 50) if quick else Plan(24, 1.6, 240.0, 150)


@dataclass
class Step:
    name: str
    started: float
    ended: float | None = None
    outcome: str = ""


@dataclass
class Demo:
    bootstrap: str
    topics: Topics
    home: Path
    out: Path
    plan: Plan
    display: Display
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.procs = Processes(self.bootstrap, self.topics, self.out / "logs")
        self.watch = Watch(self.bootstrap, self.topics, "wikipedia")
        self.operator = Operator(self.bootstrap, self.topics)
        self.service: Child | None = None
        self.http = ""  # the service's HTTP address (dashboard, API), once started
        self.ingestion: Ingestion | None = None
        self._next_sample = 0.0

    # -- the loop ---------------------------------------------------------------------------
    def pump(self) -> None:
        self.watch.poll(0.2)
        if time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + 1.0
            sample = self.watch.sample()
            self.display.update(self.watch, sample.lag)
        if self.service is not None and not self.service.alive():
            raise DemoFailed(f"segcoord run exited ({self.service.proc.returncode}); its log ends:\n"
                             f"{self.service.tail()}")

    def until(self, what: str, cond: Callable[[], bool], timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.plan.step_timeout_s)
        while not cond():
            if time.monotonic() > deadline:
                raise DemoFailed(f"timed out waiting for {what}")
            self.pump()

    def begin(self, name: str) -> Step:
        step = Step(name, self.watch.now())
        self.steps.append(step)
        self.display.step = name
        self.display.say(f"[{step.started:6.1f}s] {name}")
        return step

    def end(self, step: Step, outcome: str) -> None:
        step.ended, step.outcome = self.watch.now(), outcome
        self.display.say(f"[{step.ended:6.1f}s]   -> {outcome}")

    # -- questions on the log ---------------------------------------------------------------
    def servers_of_tier(self, tier: str) -> set[str]:
        return {n for n, t in self.watch.tiers().items() if t == tier}

    def recent_on_hot(self, now_ms: int) -> bool:
        """Every visible segment well inside the P1D window is on a hot server and on no other."""
        holders = self.watch.holders()
        hot = self.servers_of_tier("hot")
        window = now_ms - DAY + HOUR
        states = self.watch.states()
        recent = [sid for sid, seg in self.watch.segments.items()
                  if states.get(sid) == "visible" and seg.interval.start >= window]
        return bool(recent) and all(holders.get(sid, set()) and holders[sid] <= hot for sid in recent)

    def settled(self) -> bool:
        states = set(self.watch.states().values())
        return not self.watch.in_flight() and not states & {"offline", "standby", "overshadowed"}

    # -- the story --------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        now_ms = int(time.time() * 1000)
        day, hours = hours_of(now_ms, self.plan.recent_hours)
        tiers = {"hot-1": "hot", "hot-2": "hot", "default-1": "_default_tier", "default-2": "_default_tier"}

        step = self.begin("starting segcoord run (Spark balancer) and 4 historicals on tiers hot, _default_tier")
        self.http = f"127.0.0.1:{_free_port()}"
        self.service = self.procs.service(self.home / "service" / self.topics.prefix.rstrip("."), "spark",
                                          ["hot", "_default_tier"], plan_every=3, http=self.http)
        print(f"dashboard: http://{self.http}/  (Druid's API under /druid/coordinator/v1/, metrics at /metrics)",
              flush=True)
        for name, tier in tiers.items():
            self.procs.historical(name, tier, MAX_SIZE, self.plan.load_ms)
        self.until("the 4 historicals to join", lambda: len(self.watch.fold.servers) == 4)
        self.operator.rules("_default", INITIAL_RULES)
        self.operator.config({"millisToWaitBeforeDeleting": 0, "maxSegmentsToMove": 20})
        self.end(step, "4 servers joined; rules: loadForever 1 replica on _default_tier")

        step = self.begin(f"streaming ingestion: 3 data sources x {len(hours)} hourly segments")
        ingestion = Ingestion(self.bootstrap, self.topics, hours, self.plan.pace_s)
        ingestion.start()
        self.ingestion = ingestion
        self.until("the first segments to be visible", lambda: "visible" in self.watch.states().values())
        self.end(step, f"first segment visible {self.watch.load_latency[0]:.1f}s after its publish"
                 if self.watch.load_latency else "first segment visible")

        step = self.begin(f"compaction of wikipedia {day.iso()} (24 hourly segments -> 1 day segment)")
        self.until("wikipedia's day to be ingested", lambda: len(self.watch.in_interval(day)) >= 24
                   and sum(1 for s in ingestion.published.get("wikipedia", []) if day.start <= s.interval.start
                           < day.end) >= 24)
        inputs = [s for s in ingestion.published["wikipedia"] if day.start <= s.interval.start < day.end]
        compacted = compact(self.bootstrap, self.topics, "wikipedia", day, inputs)
        cid = str(compacted.id)
        self.until("the compacted day to be visible", lambda: self.watch.states().get(cid) == "visible")
        hidden = [self.watch.states().get(str(s.id)) for s in inputs]
        self.end(step, f"version {compacted.version} visible; the 24 hours at once: "
                 f"{sum(1 for h in hidden if h != 'visible')}/24 no longer visible")

        step = self.begin("rule change: loadByPeriod P1D on hot, loadForever on _default_tier")
        self.operator.rules("_default", HOT_RULES)
        self.until("the recent hours to move to the hot tier", lambda: self.recent_on_hot(int(time.time() * 1000)))
        on_hot = sum(len(self.watch.fold.servers[s].segments) for s in self.servers_of_tier("hot"))
        self.end(step, f"{on_hot} recent segments on the hot tier")

        step = self.begin("default-3 joins _default_tier")
        self.procs.historical("default-3", "_default_tier", MAX_SIZE, self.plan.load_ms)
        self.until("default-3 to join", lambda: "default-3" in self.watch.fold.servers)
        self.until("the balancer to move segments onto default-3", lambda: self.watch.moves_to.get("default-3", 0) > 0
                   and "default-3" in self.watch.fold.servers and len(self.watch.fold.servers["default-3"].segments)
                   >= 3)
        self.end(step, f"default-3 holds {len(self.watch.fold.servers['default-3'].segments)} segments "
                 f"({self.watch.moves_to.get('default-3', 0)} moved onto it by the Spark balancer)")

        step = self.begin("decommissioning default-1")
        held = len(self.watch.fold.servers["default-1"].segments)
        self.operator.decommission("default-1", "_default_tier", MAX_SIZE_BYTES)
        self.until("default-1 to be drained", lambda: not self.watch.fold.servers["default-1"].segments)
        self.procs.children["default-1"].stop()
        self.until("default-1 to leave", lambda: "default-1" not in self.watch.fold.servers)
        self.end(step, f"{held} segments moved off default-1; it left the cluster")

        step = self.begin("killing hot-2 (SIGKILL)")
        lost = sorted(self.watch.fold.servers["hot-2"].segments)
        self.procs.children["hot-2"].kill()
        self.display.dead.add("hot-2")
        note = ("the coordinator would decide server_lost after serverTimeoutMillis (30 s) of silence; the demo "
                "writes server_left for hot-2 at once, as an operator would, and the coordinator re-replicates "
                "what it held")
        self.notes.append(note)
        self.display.say(f"           {note}")
        self.operator.server_left("hot-2", "hot", MAX_SIZE_BYTES)
        self.until("hot-2 to be gone", lambda: "hot-2" not in self.watch.fold.servers)
        self.until("hot-2's segments to be served again",
                   lambda: all(self.watch.holders().get(s) or self.watch.states().get(s) != "visible" for s in lost)
                   and self.recent_on_hot(int(time.time() * 1000)))
        self.end(step, f"{len(lost)} segments of hot-2 loaded again on hot-1")

        step = self.begin("ingestion finishing; waiting for the cluster to settle")
        self.until("the ingestion to end", ingestion.done, timeout=self.plan.step_timeout_s * 2)
        if ingestion.errors:
            raise DemoFailed("ingestion failed: " + "; ".join(ingestion.errors))
        self.until("no command in flight, every segment loaded or dropped", self.settled)
        gone = len(self.watch.pending)
        self.end(step, f"{ingestion.count()} segments published by {ingestion.tasks} tasks; settled"
                 + (f" ({gone} commands abandoned: to servers that left, or a move's drop whose target left)"
                    if gone else ""))
        self.watch.sample()
        return {"day": day.iso(), "hours": len(hours), "compacted": cid}

    def close(self, keep: bool) -> None:
        self.watch.close()
        self.operator.close()
        if self.ingestion is not None:
            self.ingestion.stop()
        if not keep:
            self.procs.stop_all()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_demo(*, bootstrap: str | None, home: Path, out: Path, quick: bool = False, keep: bool = False,
             live: bool | None = None) -> int:
    """Run the demo; 0 when every step reached its outcome and the audit is clean."""
    from streaming.admin import create_topics
    from streaming.demo.report import write_report
    from streaming.local_broker import LocalBroker
    from streaming.replay import audit

    demo_home = home / "demo"
    topics = Topics(f"demo-{uuid.uuid4().hex[:6]}.")
    started = time.monotonic()
    broker, started_broker = None, False
    if bootstrap is None:
        broker = LocalBroker(demo_home)
        started_broker = not broker.status().running
        bootstrap = broker.start()
    print(f"segcoord demo: broker {bootstrap} ({'started' if started_broker else 'reused'}, home {demo_home}), "
          f"topics {topics.prefix}*, report in {out}", flush=True)
    create_topics(bootstrap, topics)
    out.mkdir(parents=True, exist_ok=True)
    failure: str | None = None
    result: dict[str, Any] = {}
    with Display(live) as display:
        demo = Demo(bootstrap, topics, demo_home, out, Plan.of(quick), display)
        try:
            result = demo.run()
        except DemoFailed as e:
            failure = str(e)
            display.say(f"FAILED: {failure}")
        except Exception as e:  # a client's error (a timeout, a refusal): reported like a failed step
            failure = f"{type(e).__name__}: {e}"
            display.say(f"FAILED: {failure}")
        finally:
            try:
                violations = audit(bootstrap, topics)
            finally:  # the service and historicals stop even when the audit cannot read the log
                demo.close(keep)
    result.update({"bootstrap": bootstrap, "topicPrefix": topics.prefix, "quick": quick, "failure": failure,
                   "seconds": round(time.monotonic() - started, 1), "notes": demo.notes,
                   "audit": [str(v) for v in violations]})
    page = write_report(demo.watch, demo.steps, result, out)
    fig = orjson.loads((out / "report.json").read_bytes())["figures"]
    load, visible = fig["publishToLoad"], fig["announceToVisible"]
    print(f"figures: {fig['events']} events; publish -> load median {load.get('medianMs', '-')} ms "
          f"(p95 {load.get('p95Ms', '-')}), announce -> visible median {visible.get('medianMs', '-')} ms "
          f"(p95 {visible.get('p95Ms', '-')}) over {load['count']} segments; "
          f"{sum(fig['movesOnto'].values())} balancer/decommissioning moves; segments "
          + ", ".join(f"{k} {v}" for k, v in fig["segmentStates"].items()))
    print(f"audit: {len(violations)} violation(s)" + "".join(f"\n  {v}" for v in violations[:20]))
    print(f"report: {page}")
    if keep:
        running = ", ".join(f"{c.name} (pid {c.proc.pid})" for c in demo.procs.children.values() if c.alive())
        print(f"--keep: the dashboard stays at http://{demo.http}/")
        print(f"--keep: still running on broker {bootstrap} (topics {topics.prefix}*, logs in {out / 'logs'}): "
              f"{running}. Stop them with kill PID (SIGTERM) and the broker with "
              f"`segcoord kafka stop --home {demo_home}`")
    elif broker is not None and started_broker:
        del demo
        gc.collect()  # the clients' librdkafka handles, before their broker goes (else they log its absence)
        broker.stop()
    ok = failure is None and not violations
    print(f"segcoord demo: {'OK' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1
