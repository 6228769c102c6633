"""The planner agent builds its tier cost index's rebuilds on the shell's thread: handed over between batches,
adopted at a later one with the changes made meanwhile, the index exact throughout (real RocksDB store)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from events.segments import SegmentAnnounced, SegmentsPublished
from streaming.service.planner_agent import FORMAT_VERSION
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox
from tests.deferred_executor import Deferred
from tests.unit.placement import test_tier_index
from tests.unit.placement.history import POOL, T0
from tests.unit.placement.test_liveness import Run, _cluster, _env


def test_a_rebuild_due_is_built_elsewhere_and_adopted_at_a_later_batch_with_what_changed_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_tier_index, "NAMES", ["h1", "h2"])  # _exact's servers: those of _cluster()
    with tempfile.TemporaryDirectory() as tmp:
        store = AgentStateStore(Path(tmp) / "planner", FORMAT_VERSION)
        run = Run(store)
        builder = Deferred()
        run.agent.build_index_rebuilds_on(builder)
        run.feed(_cluster())
        state = run.agent.state
        index = state.tier_index("_default_tier")
        assert index.deferred_rebuilds
        index.rebuild_due = True  # as a query or an outgrown delta would leave it
        segs = POOL[1:4]
        run.feed([through_lockbox(_env(SegmentsPublished(task_id="t2", segments=(segs[0],)), "p2", T0 + 2000,
                                       "wiki"))])
        assert len(builder.queued) == 1 and index.rebuilding and not index.rebuild_due  # handed over, not built
        taken = index.static_rows
        run.feed([_env(SegmentAnnounced(server="h2", segment=s), f"a-{i}", T0 + 3000 + i, "wiki")
                  for i, s in enumerate(segs)])  # changes while it is built: kept for the adoption
        builder.run_all()
        run.feed([_env(SegmentAnnounced(server="h1", segment=segs[1]), "a-late", T0 + 5000, "wiki")])
        assert state.tier_index("_default_tier") is index and not index.rebuilding
        assert index.static_rows >= taken and len(builder.queued) == 0
        assert len(index) == sum(len(state.projected_segments(n)) for n in ("h1", "h2"))
        assert all(index.holds(n, sid) for n in ("h1", "h2") for sid in state.projected_segments(n))
        test_tier_index._exact(state, list(POOL[:6]))
        store.close()
