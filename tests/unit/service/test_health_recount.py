"""The worker's health recount: counted in slices on the planner's thread, published once, equal to the whole."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import orjson
import pytest

from streaming.metrics import ServiceMetrics
from streaming.service import observe
from streaming.service.planner_feed import PlannerThread
from tests.unit.readmodel.test_placement_readmodel import T0, cluster


def test_the_recount_runs_in_slices_and_publishes_what_one_whole_count_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe, "HEALTH_SLICE", 2)  # three used segments: two slices
    state = cluster().p
    whole: list[dict[str, Any]] = []
    ServiceMetrics(lambda key, value: whole.append(orjson.loads(value))).load_health(state, T0)
    sliced: list[dict[str, Any]] = []
    host = types.SimpleNamespace(planner=types.SimpleNamespace(state=state), _health_every=0.0,
                                 metrics=ServiceMetrics(lambda key, value: sliced.append(orjson.loads(value))))
    pool = PlannerThread()
    jobs: list[str] = []
    submit = pool.submit

    def counted(fn: Any, /, *args: Any) -> Any:
        jobs.append(fn.__name__)
        return submit(fn, *args)

    monkeypatch.setattr(pool, "submit", counted)
    try:
        asyncio.run(observe.Observer._recount_health(host, pool, T0))  # type: ignore[arg-type]
    finally:
        pool.shutdown()
    assert jobs == ["_used_ids", "_count_slice", "_count_slice"]
    assert [(d["metric"], d.get("tier"), d["value"]) for d in sliced] == \
        [(d["metric"], d.get("tier"), d["value"]) for d in whole]
    assert ("segment/unavailable/count", None, 1) in [(d["metric"], d.get("tier"), d["value"]) for d in sliced]
    assert host._health_every >= observe.HEALTH_EVERY_S
