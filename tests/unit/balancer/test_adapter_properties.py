"""The Spark balancer's adapter holds the one fold: from the same random history, cut into micro-batches and
restored from its store at random points, its placement equals the pure fold's of the same history plus the moves
the adapter sent, and its store holds exactly the state's entries.

The history starts with one server holding every segment next to an empty one, so batches make moves (about one
batch in five); the moves are read back in the next batch and answered then, a record later, or never (they time
out). Renaming a move to its sent ids, settling answers that arrive before their command is read back, and
counting a move once all show here."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.placement import codec
from coordinator.placement.projected import snapshot
from coordinator.placement.state import PlacementState
from events.cluster import RulesSet, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from streaming.balancer.batch import run_batch
from streaming.balancer.placement import BalancerPlacement
from tests.accepted import through_lockbox
from tests.unit.balancer.test_rolling_balancer import Store
from tests.unit.placement.history import POOL, T0, TIERS, history

EXAMPLES = int(os.environ.get("PLACEMENT_EXAMPLES", "300"))


def _preamble() -> list[Envelope[Event]]:
    """Two servers of a tier, one holding every segment of the pool: the balancer has moves to make."""
    events: list[Event] = [
        RulesSet(data_source="_default", rules=({"type": "loadForever", "tieredReplicants": {TIERS[0]: 1}},)),
        ServerJoined(server="h1", tier=TIERS[0], max_size_bytes=10_000),
        ServerJoined(server="h2", tier=TIERS[0], max_size_bytes=10_000),
        *(SegmentsPublished(task_id="t", segments=tuple(s for s in POOL if s.data_source == ds))  # one per source
          for ds in sorted({s.data_source for s in POOL})),
        *(SegmentAnnounced(server="h1", segment=seg) for seg in POOL)]
    return [through_lockbox(Envelope(e, f"pre{i}", Instant(T0), "pre")) for i, e in enumerate(events)]


def _answers(commands: list[Envelope[Event]], batch: int) -> list[Envelope[Event]]:
    """What historicals answer to the moves (the target announces, then the source unannounces)."""
    out: list[Envelope[Event]] = []
    for env in commands:
        e = env.event
        answer: Event
        if isinstance(e, LoadSegment):
            answer = SegmentAnnounced(server=e.server, segment=e.segment)
        else:
            assert isinstance(e, DropSegment)
            answer = SegmentUnannounced(server=e.server, segment_id=e.segment_id)
        out.append(Envelope(answer, f"a{batch}-{len(out)}", env.occurred_at, "ans", env.event_id))
    return out


def _with_caches(state: PlacementState) -> PlacementState:
    for name in sorted(state.tier_of):
        state.cache(name)
    return state


@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history(), st.lists(st.integers(1, 6), min_size=1, max_size=20), st.lists(st.booleans(), max_size=20),
       st.lists(st.sampled_from(["now", "later", "never"]), max_size=20))
def test_the_restored_and_folded_view_equals_the_pure_fold(events: list[Envelope[Event]], cuts: list[int],
                                                           restores: list[bool], answering: list[str]) -> None:
    events = _preamble() + events
    store = Store()
    live = BalancerPlacement(PlacementState(load_timeout_ms=20 * 60_000))
    pure = PlacementState(load_timeout_ms=20 * 60_000)
    settled: set[str] = set()
    pure.settled_before = settled.__contains__
    start, b = 0, 0
    limit = 4 * len(events) + 20  # feedback (moves read back, answers) is bounded: stop if it has not settled
    while start < len(events) and b < limit:
        batch = events[start:start + cuts[b % len(cuts)]]
        start += len(batch)
        if b < len(restores) and restores[b]:
            live = store.restore()
            live.state.load_timeout_ms = 20 * 60_000
        result = run_batch(live, batch, b, TIERS, store.answered.__contains__)
        store.save(live)
        triggered = False
        for env in batch:  # the pure fold of the same records; a triggered batch settles timed-out commands
            triggered = pure.evolve(env).trigger or triggered
        if triggered:
            pure.expire(pure.last_event_at)
        for env in result.commands:  # the moves, as the adapter reads them back
            pure.evolve(env)
        events = events[:start] + result.commands + events[start:]  # read back from ``commands`` next batch
        how = answering[b % len(answering)] if answering else "never"
        if how != "never":  # the answers arrive with the read-back commands, or after the next history event
            at = start + len(result.commands) + (0 if how == "now" else 1)
            events = events[:at] + _answers(result.commands, b) + events[at:]
        settled.update(pure.settled)
        pure.settled.clear()
        restored = store.restore()
        assert restored.runs == live.runs and restored.version == live.version == b
        restored.state.load_timeout_ms = 20 * 60_000
        assert snapshot(_with_caches(restored.state)) == snapshot(_with_caches(pure))
        assert snapshot(_with_caches(live.state)) == snapshot(pure)
        whole = {(f, k): v.decode() for f, k, v in codec.entries(live.state, live.meta()) if v is not None and
                 f != "meta"}
        assert {(f, k): v for (f, k), v in store.placement.items()} == whole
        b += 1
