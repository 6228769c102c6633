"""The upsert agent of ``segcoord run`` killed with SIGKILL mid-stream, restarted on its store: at the end its
RocksDB state equals the pure fold of the log (``segments`` and ``cluster`` through the pure timeline and the
upsert fold), and the last strategy on ``upsert-strategy`` carries the pure filter.

Re-ingests (a publish and an announce each) are produced in rounds; after each round the test waits for the
strategy to name the round's last version (progress is made), then kills the worker while the next round is
produced, and restarts it.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import orjson
import pytest

from coordinator.upserts.replay import UpsertReplay
from events import (
    Envelope,
    Event,
    Instant,
    Interval,
    SegmentAnnounced,
    SegmentDescriptor,
    Topics,
    UpsertPartition,
    UpsertTableSet,
    decode,
)
from events.topics import CLUSTER, SEGMENTS, UPSERT_STRATEGY
from streaming.producer import EventProducer
from streaming.service.state import AgentStateStore
from streaming.service.upsert_agent import FORMAT_VERSION, STORE_NAME, load_state
from tests.accepted import import_request
from tests.integration.test_service_planner import PlanService
from tests.integration.test_service_timeline import T0, read_all, wait_for

pytestmark = pytest.mark.integration
DAY_MS = 86_400_000
ROUNDS, PER_ROUND, KEYS = 4, 60, 25


def test_kill_9_mid_stream_ends_equal_to_the_pure_fold(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=1)
    producer = EventProducer(kafka_bootstrap, topics)

    def send(event: Event, key: str) -> None:
        producer.send(Envelope(event, uuid.uuid4().hex, Instant(int(time.time() * 1000)), key))

    def strategy_versions() -> set[str]:
        try:
            records = read_all(kafka_bootstrap, topics.name(UPSERT_STRATEGY), timeout=10)
        except AssertionError:
            return set()
        return {row["version"] for r in records[-1:] for row in orjson.loads(r.value)["latest"]}

    service.start()
    try:
        send(UpsertTableSet(name="ads", append_data_source="ads_append", primary_data_source="ads_primary",
                            key_columns=("source", "date"), version_column="version",
                            stale_grace_millis=3_600_000, consolidation_period_millis=0), "upserts/ads")
        n = 0
        for round_ in range(ROUNDS):
            for _ in range(PER_ROUND):
                n += 1
                d = n % 3
                seg = SegmentDescriptor("ads_append", Interval(T0 + d * DAY_MS, T0 + (d + 1) * DAY_MS), "A", n, 100,
                                        upsert_partitions=(UpsertPartition(
                                            key={"source": f"src{n % KEYS:02d}", "date": str(d)},
                                            version=f"v{n:05d}", rows=1),))
                send(import_request((seg,), f"import-{n}"), "ads_append")  # only the lockbox publishes
                send(SegmentAnnounced(server="h1", segment=seg), "ads_append")
                if round_ < ROUNDS - 1 and n % PER_ROUND == PER_ROUND // 2:
                    producer.flush()
                    service.loaded(round_ + 1)  # the kill hits the worker, not the interpreter's start-up
                    service.kill()  # mid-round: part of the round is in the log, the rest comes while it is down
                    service.start()
            producer.flush()
            last = f"v{n:05d}"
            wait_for(f"the strategy naming {last}", lambda last=last: last in strategy_versions(), service,
                     timeout=90)
        assert service.stop() == 0
    finally:
        producer.close()
        if service.alive():
            service.stop()
    assert (tmp_path / "run.log").read_text().count(" resumes at ") == ROUNDS

    envs = [decode(r.value) for t in (CLUSTER, SEGMENTS) for r in read_all(kafka_bootstrap, topics.name(t))]
    pure = UpsertReplay().apply_all(envs)
    with AgentStateStore(tmp_path / "state" / STORE_NAME, FORMAT_VERSION) as store:
        state, _ = load_state(store)
    assert state.held == pure.state.held and state.visible == pure.state.visible
    keys = {(i % KEYS, i % 3) for i in range(1, ROUNDS * PER_ROUND + 1)}
    assert state.fresh("ads") == pure.state.fresh("ads") and len(state.fresh("ads")) == len(keys)
    assert set(state.stale) == set(pure.state.stale)  # stale times: of the input that made it so, per interleaving
    last_record = orjson.loads(read_all(kafka_bootstrap, topics.name(UPSERT_STRATEGY))[-1].value)
    assert last_record["filter"] == pure.report()["tables"]["ads"]["filter"]
