"""``segcoord demo --quick`` (the ``make run`` smoke test): the whole system on a cluster of its own.

The user's own setup is a broker named by ``SEGCOORD_BOOTSTRAP`` (the session's)
with the default topics (``segcoord.*``) holding an event. The demo must leave it
alone: it starts its own broker under ``$SEGCOORD_HOME/demo`` and uses a
``demo-<run>.`` prefix; afterwards the user's topics end where they ended before
and no demo topic exists on the user's broker. The run itself must reach every
step, end with a clean ``segcoord audit``, and write the report with its plots.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from events import Envelope, Topics
from events.cluster import RulesSet
from events.schema import Instant
from events.topics import DEFAULT_PREFIX, TOPIC_SPECS
from streaming.admin import create_topics
from streaming.offsets import watermarks
from streaming.producer import EventProducer

pytestmark = [pytest.mark.integration, pytest.mark.spark]
SEGCOORD = str(Path(sys.executable).parent / "segcoord")


def ends(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        out = {}
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                out[(topic, p)] = watermarks(consumer, TopicPartition(topic, p), timeout=10)[1]
        return out
    finally:
        consumer.close()


def test_demo_quick(kafka_bootstrap: str, tmp_path: Path) -> None:
    user = Topics(DEFAULT_PREFIX)
    create_topics(kafka_bootstrap, user)
    producer = EventProducer(kafka_bootstrap, user)
    producer.send(Envelope(RulesSet(data_source="wiki", rules=({"type": "loadForever"},)), uuid.uuid4().hex,
                           Instant(int(time.time() * 1000)), "rules/wiki"))
    producer.flush()
    producer.close()
    user_topics = [user.name(s.name) for s in TOPIC_SPECS]
    before = ends(kafka_bootstrap, user_topics)

    out = tmp_path / "demo-report"
    env = {**os.environ, "SEGCOORD_HOME": str(tmp_path / "home"), "SEGCOORD_BOOTSTRAP": kafka_bootstrap,
           "PYTHONUNBUFFERED": "1"}
    env.pop("SEGCOORD_TOPIC_PREFIX", None)
    result = subprocess.run([SEGCOORD, "demo", "--quick", "--out", str(out)], capture_output=True, text=True,
                            timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "audit: 0 violation(s)" in result.stdout
    assert f"report: {out / 'index.html'}" in result.stdout

    # the user's broker and topics: untouched
    assert ends(kafka_bootstrap, user_topics) == before
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex}"})
    try:
        assert not [t for t in consumer.list_topics(timeout=10).topics if t.startswith("demo-")]
    finally:
        consumer.close()

    # the report: every step reached its outcome, the audit was clean, the plots are there
    report = orjson.loads((out / "report.json").read_bytes())
    assert report["failure"] is None and report["audit"] == []
    assert report["bootstrap"] != kafka_bootstrap and report["topicPrefix"].startswith("demo-")
    assert len(report["steps"]) == 8 and all(s["endedS"] is not None for s in report["steps"])
    figures = report["figures"]
    assert figures["publishToLoad"]["count"] >= 80 and figures["announceToVisible"]["count"] >= 80
    assert figures["commandsInFlight"] == 0
    assert set(figures["servers"]) == {"hot-1", "default-2", "default-3"}  # default-1 drained and left, hot-2 dead
    assert figures["movesOnto"].get("default-3", 0) > 0
    page = (out / "index.html").read_text()
    assert "segcoord audit: clean" in page
    for name in report["plots"]:
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert page.count("data:image/png;base64,") == len(report["plots"]) == 4
    assert (out / "logs" / "coordinator.log").stat().st_size > 0
