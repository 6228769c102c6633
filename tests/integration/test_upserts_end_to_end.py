"""Upsert tables end to end on the real broker: ``segcoord run`` with historicals, a task client re-ingesting
``DAYS`` days x ``SOURCES`` sources, each day re-pulled ``PULLS`` times into the append data source (append locks,
one segment per pull holding every source's (key, version)), and the ``UpsertStrategy`` client following.

Then: the strategy names the last pull of every key and its filter selects exactly it; every earlier pull's
segment is marked unused by the upsert agent after the grace period and dropped by the historicals (the timeline
says absent); a consolidation asked with ``segcoord upserts consolidate`` names every day; ``segcoord audit`` is
clean. Scale with ``UPSERT_E2E_DAYS`` (default 30), sources 20 and pulls 5 (seed 003's daily re-pull of 30 days).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coordinator.upserts.strategy import matches
from events import Interval, SegmentDescriptor, Topics, UpsertPartition
from events.cluster import RulesSet, ServerJoined
from events.instant import format_instant
from events.locks import LockGranted, PublishAccepted, SegmentAllocated
from events.segments import SegmentsMarkedUnused
from events.upserts import ConsolidationRequested
from events.visibility import SegmentVisibilityChanged
from streaming.cli import main
from streaming.task_client import TaskClient
from streaming.upserts import UpsertStrategy
from tests.integration.test_service_planner import Historicals, PlanService, decoded, send
from tests.integration.test_service_timeline import T0, wait_for

pytestmark = pytest.mark.integration
DAY_MS = 86_400_000
DAYS = int(os.environ.get("UPSERT_E2E_DAYS", "30"))
SOURCES = 20
PULLS = 5
APPEND, PRIMARY = "ads_append", "ads_primary"


def day(d: int) -> Interval:
    return Interval(T0 + d * DAY_MS, T0 + (d + 1) * DAY_MS)


def date_of(d: int) -> str:
    return format_instant(T0 + d * DAY_MS)[:10]


def reingest_days(bootstrap: str, topics: Topics, days: list[int], published: dict[tuple[int, int], str]) -> None:
    """One task per day: an append lock on the day, then ``PULLS`` re-pulls, each one allocated segment holding
    every source's rows of that pull's version."""
    for d in days:
        with TaskClient(bootstrap, topics, f"index_ads_{d}", f"g_ads_{d}", "index", APPEND) as task:
            task.start()
            assert isinstance(task.lock(day(d), lock_type="append").event, LockGranted)
            for pull in range(1, PULLS + 1):  # each pull its own sequence (sequence names are per data source)
                out = task.allocate(T0 + d * DAY_MS + pull, f"ads-{d}-pull{pull}", interval=day(d),
                                    lock_type="append").event
                assert isinstance(out, SegmentAllocated)
                parts = tuple(UpsertPartition(key={"source": f"src{s:02d}", "date": date_of(d)},
                                              version=f"pull{pull}", rows=10 + s) for s in range(SOURCES))
                seg = SegmentDescriptor(APPEND, out.segment.interval, out.segment.version, out.segment.partition_id,
                                        100, shard_spec=out.segment.shard_spec, upsert_partitions=parts)
                assert isinstance(task.publish([seg], kind="append").event, PublishAccepted)
                published[(d, pull)] = str(seg.id)
            task.finish()


def test_reingests_end_to_end(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=1)
    service.start()
    try:
        with Historicals(kafka_bootstrap, topics, ["h1", "h2"], max_size=10_000_000):
            wait_for("both servers joined", lambda: {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                                                     if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, service)
            send(kafka_bootstrap, topics, RulesSet(data_source="_default", rules=(
                {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "rules/_default")
            assert main(["upserts", "define", "ads", "--append", APPEND, "--primary", PRIMARY, "--key",
                         "source,date", "--version-column", "version", "--stale-grace-ms", "500",
                         "--consolidate-every-ms", "0", "--bootstrap", kafka_bootstrap,
                         "--topic-prefix", topics.prefix]) == 0
            client = UpsertStrategy(kafka_bootstrap, topics)
            published: dict[tuple[int, int], str] = {}
            with ThreadPoolExecutor(4) as pool:  # four ingestion tasks at a time; .result() raises their errors
                for done in [pool.submit(reingest_days, kafka_bootstrap, topics, list(range(i, DAYS, 4)), published)
                             for i in range(4)]:
                    done.result(timeout=600)
            assert len(published) == DAYS * PULLS

            # the client follows: every key at its last pull, the filter selecting exactly that pull's rows
            def caught_up() -> bool:
                client.refresh(0.5)
                if "ads" not in client.tables():
                    return False
                latest = client.record("ads")["latest"]
                return len(latest) == DAYS * SOURCES and all(r["version"] == f"pull{PULLS}" for r in latest)

            wait_for("the strategy at the last pull of every key", caught_up, service, timeout=120)
            f = client.filter_for("ads")
            for d in range(DAYS):
                for s in (0, SOURCES - 1):
                    for pull in range(1, PULLS + 1):
                        row = {"table_type": "append", "source": f"src{s:02d}", "date": date_of(d),
                               "version": f"pull{pull}"}
                        assert matches(f, row) == (pull == PULLS)
            narrow = client.filter_for("ads", day(0))
            assert matches(narrow, {"table_type": "append", "source": "src00", "date": date_of(0), "version":
                                    f"pull{PULLS}"})
            assert not matches(narrow, {"table_type": "append", "source": "src00", "date": date_of(1), "version":
                                        f"pull{PULLS}"})

            # stale cleanup: every earlier pull's segment marked unused, then dropped (absent on the timeline)
            stale = {sid for (d, pull), sid in published.items() if pull < PULLS}
            last = {sid for (d, pull), sid in published.items() if pull == PULLS}

            def cleaned() -> bool:
                envs = decoded(kafka_bootstrap, topics, "segments") + decoded(kafka_bootstrap, topics, "timeline")
                marked = {s for e in envs if isinstance(e.event, SegmentsMarkedUnused) for s in e.event.segment_ids}
                assert not marked & last, f"a segment holding a latest version was marked: {sorted(marked & last)}"
                state: dict[str, str] = {}
                for e in envs:
                    if isinstance(e.event, SegmentVisibilityChanged):
                        state[e.event.segment_id] = e.event.to_state
                return stale <= marked and all(state.get(s) == "absent" for s in stale) \
                    and all(state.get(s) == "visible" for s in last)

            wait_for("the stale append segments cleaned and dropped", cleaned, service, timeout=120)

            # a consolidation asked now names every day with the last pull of its sources
            assert main(["upserts", "consolidate", "ads", "--bootstrap", kafka_bootstrap,
                         "--topic-prefix", topics.prefix]) == 0

            def consolidation() -> ConsolidationRequested | None:
                got = [e.event for e in decoded(kafka_bootstrap, topics, "cluster")
                       if isinstance(e.event, ConsolidationRequested)]
                return got[-1] if got else None

            req = wait_for("a consolidation request", consolidation, service)
            assert [iv.interval for iv in req.intervals] == [day(d) for d in range(DAYS)]
            assert {p.version for iv in req.intervals for p in iv.partitions} == {f"pull{PULLS}"}
            assert sum(len(iv.partitions) for iv in req.intervals) == DAYS * SOURCES
            client.close()
        assert service.stop() == 0
    finally:
        if service.alive():
            service.stop()
    assert main(["audit", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]) == 0
    assert main(["upserts", "strategy", "ads", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]) == 0
