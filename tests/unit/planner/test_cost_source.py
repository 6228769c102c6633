"""The planner's costs come from one query of the tier's ClusterCostIndex; the per-server cost caches (one tree walk
per server) are the reference. On random clusters both make the same decisions: cost-based assignment (round robin
off) of first copies and replicas, drains, and balancing moves, through several runs whose commands change the
placement the index is kept current with (and a server joining half-way, which rebuilds the tier's index)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.placement.records import ServerFacts
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import plan_state
from events import Interval, SegmentDescriptor

HOUR = 3_600_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR
NOW = T0 + 400 * 24 * HOUR

_segment = st.builds(lambda ds, hour, hours, v: SegmentDescriptor(f"ds{ds}", Interval(T0 + hour * HOUR,
                                                                                       T0 + (hour + hours) * HOUR),
                                                                  f"v{v}", 0, 1000),
                     st.integers(0, 2), st.integers(0, 24 * 40), st.sampled_from([1, 1, 2, 24]), st.integers(0, 1))


def _cluster(segments: list[SegmentDescriptor], holders: list[list[int]], servers: int,
             decommissioning: set[int]) -> PlacementState:
    st_ = PlacementState()
    st_.set_rules("_default", [{"type": "loadForever", "tieredReplicants": {"hot": 2, "cold": 1}}], "rules")
    st_.set_config({"useRoundRobinSegmentAssignment": False, "smartSegmentLoading": False,
                    "maxSegmentsToMove": 25, "maxSegmentsInNodeLoadingQueue": 20, "replicationThrottleLimit": 30})
    names = [f"{'hot' if i % 3 else 'cold'}{i:02d}" for i in range(servers)]
    for i, name in enumerate(names):
        st_.set_server(name, ServerFacts("hot" if i % 3 else "cold", 10**7, decommissioning=i in decommissioning))
    for seg, where in zip(segments, holders, strict=False):
        st_.learn(seg, True)
        for i in where:
            st_.hold(names[i % servers], seg.id, True)
    st_.touched_segments, st_.dirty = set(), set()
    st_.start = st_.last_event_at = NOW
    return st_


def _commands(segments: list[SegmentDescriptor], holders: list[list[int]], servers: int,
              decommissioning: set[int], per_server_caches: bool) -> list[tuple[object, ...]]:
    state = _cluster(segments, holders, servers, decommissioning)
    out: list[tuple[object, ...]] = []
    for run in range(1, 4):
        if run == 3:
            state.set_server("hot99", ServerFacts("hot", 10**7))
        plan = plan_state(state, NOW + run, run, NOW, per_server_caches=per_server_caches)
        out.extend((c.type, c.server, str(c.segment), c.source, c.stage, c.command_id) for c in plan.commands)
        for c in plan.commands:  # half of the loads complete: the placement the next run's index must follow
            if c.type in ("load", "move") and int(c.command_id or '0', 16) % 2 == 0:
                state.hold(c.server, c.segment, True)
    return out


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_segment, min_size=1, max_size=60, unique_by=lambda s: s.id),
       st.lists(st.lists(st.integers(0, 20), max_size=3), max_size=60), st.integers(2, 9),
       st.sets(st.integers(0, 9), max_size=2))
def test_the_index_and_the_per_server_caches_decide_alike(segments: list[SegmentDescriptor],
                                                          holders: list[list[int]], servers: int,
                                                          decommissioning: set[int]) -> None:
    by_index = _commands(segments, holders, servers, decommissioning, per_server_caches=False)
    by_caches = _commands(segments, holders, servers, decommissioning, per_server_caches=True)
    assert by_index == by_caches


def test_a_balancing_run_moves_the_same_with_either_cost_source() -> None:
    """A fixed cluster where balancing has work: everything on two of six hot servers."""
    segments = [SegmentDescriptor(f"ds{h % 3}", Interval(T0 + h * HOUR, T0 + (h + 1) * HOUR), "v1", 0, 1000)
                for h in range(200)]
    holders = [[1, 2, 4][h % 2:h % 2 + 2] for h in range(200)]
    by_index = _commands(segments, holders, 7, set(), per_server_caches=False)
    assert sum(1 for c in by_index if c[0] == "move") > 10
    assert by_index == _commands(segments, holders, 7, set(), per_server_caches=True)
