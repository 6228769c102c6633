"""A balancing run taken in slices: stages 7, 10 and 11 of every tier, stopped and resumed between candidates.

Druid balances once per coordinator period (``druid.coordinator.period``, PT60S), and a run at scale is
long: with smart loading, ``computeMaxSegmentsToMove`` allows about 16,000 moves per tier at a million
segments, each a cost search over the tier's servers. An event-driven planner must not make a publish wait
for that, so a :class:`BalancingRun` is advanced in **slices** of at most ``draws`` candidates, and the
caller folds and plans events between any two slices.

**Invariants.**

- A run is the same computation as the balancing stages of :func:`~coordinator.planner.planner.plan_state`
  (same seeded draws per run number, tier and stage, same 80-of-100 stop, same per-tier budget computed at
  the run's start from ``maxSegmentsToMove`` less the drains reserved), only stopped between candidates.
  Taken in one slice on an unchanged state it makes exactly the moves of ``balance_state`` for each tier.
- Every slice reads the live placement: a candidate drawn after a publish, announce or unannounce is judged
  on the placement as the fold has it then, so a move never contradicts what an event changed (a segment
  with a queued load stays put; a server without room takes nothing).
- Slices are counted in candidates drawn (never in wall time), so what a run decides is a function of the
  events folded before each slice; the move ids are content-derived by the fold (``plan_load``).
- A run whose rules, dynamic config or servers changed is stale: the caller replaces it by a new run
  (:meth:`BalancingRun.stale`), as Druid's next period starts from the new cluster.

>>> from coordinator.planner.cluster import ClusterView, Server, ServerState
>>> from coordinator.rules.ruleset import RuleSet
>>> from events import Interval, SegmentDescriptor
>>> segs = [SegmentDescriptor("wiki", Interval(h * 3_600_000, (h + 1) * 3_600_000), "v1") for h in range(4)]
>>> servers = {"a": ServerState(Server("a", "hot", 10**9), frozenset(s.id for s in segs)),
...            "b": ServerState(Server("b", "hot", 10**9))}
>>> rules = RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]})
>>> state = ClusterView(0, servers, {s.id: s for s in segs}, frozenset(s.id for s in segs), rules).placement()
>>> run = BalancingRun(state, now=0, run=1, start=0)
>>> first = run.step(0, draws=1)
>>> [(c.type, c.source, c.server) for c in first.commands], run.done
([('move', 'a', 'b')], False)
>>> rest = run.step(0, draws=100)
>>> [(c.type, c.source, c.server) for c in rest.commands], run.done
([('move', 'a', 'b')], True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from coordinator.placement.state import PlacementState
from coordinator.planner.planner import Plan, _put, _Run

DEFAULT_PERIOD_MS = 60_000  # Druid's druid.coordinator.period (PT60S): one balancing run per period
DEFAULT_SLICE_DRAWS = 32  # candidates a slice may draw: bounds what an event can wait behind


class BalancingRun:
    """One balancing run over a live :class:`PlacementState`, advanced by :meth:`step`."""

    def __init__(self, state: PlacementState, *, now: int, run: int, start: int,
                 per_server_caches: bool = False) -> None:
        self.state = state
        self.run_number = run
        self.started = now
        self._rules, self._config, self._servers = state.rules, state.config, dict(state.tier_of)
        self._decommissioning = set(state.decommissioning)
        self._run = _Run(state, now=now, run=run, start=start, compute_cost=False, scope=set(),
                         mark_overshadowed=False, per_server_caches=per_server_caches)
        self._steps: Iterator[None] = iter(())
        if not state.config.pause_coordination:
            self._run.budget("")  # every tier's move budget, from the placement at the run's start
            self._steps = self._run.balancing_steps()
        self.done = False
        self.draws = 0  # candidates drawn so far, over every slice

    @property
    def moves(self) -> Counter[str]:
        """Balancing moves made so far, per tier."""
        return self._run.moves_made

    def stale(self) -> bool:
        """Whether the rules, the dynamic config or the servers (their tiers, decommissioning) changed since the run
        began."""
        st = self.state
        return (st.rules is not self._rules or st.config is not self._config or st.tier_of != self._servers
                or st.decommissioning != self._decommissioning)

    def step(self, now: int, draws: int = DEFAULT_SLICE_DRAWS) -> Plan:
        """Draw at most ``draws`` more candidates (``draws`` >= 1) and return the moves they made, folded into the
        state (sent at ``now``). ``done`` is set once the run has nothing left to draw."""
        if draws < 1:
            raise ValueError(f"draws: at least 1, got {draws}")
        r = self._run
        r.now = now
        r.commands, r.metrics = [], Counter()
        taken = 0
        while taken < draws and not self.done:
            if next(self._steps, StopIteration) is StopIteration:
                self.done = True
            else:
                taken += 1
        self.draws += taken
        metrics: dict[str, object] = {}
        for key, value in sorted(r.metrics.items()):
            _put(metrics, key, value)
        metrics["decisions"] = len(r.commands)
        return Plan(tuple(r.commands), (), metrics)
