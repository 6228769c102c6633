"""Readable logs and Druid-named metrics: the outage summary, the per-run line, the emitter's JSON shape."""

from __future__ import annotations

import logging

import orjson
import pytest

from coordinator.placement.state import PlacementState
from coordinator.planner.planner import Plan, PlanCommand
from events import Interval, SegmentDescriptor
from streaming.logs import ConnectionErrors, strip_escapes
from streaming.metrics import ServiceMetrics, prometheus_name

T0 = 1_795_219_200_000


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def record(msg: str, name: str = "aiokafka.conn", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_an_outage_is_two_lines_and_a_reminder(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    f = ConnectionErrors(remind_s=60, clock=clock)
    first = record("Unable connect to node with id 1: [Errno 111] Connect call failed")
    assert f.filter(first) and first.getMessage().startswith("broker unreachable since 00:16:40Z: Unable connect")
    passed = 0
    for _ in range(2000):
        clock.t += 0.01
        passed += f.filter(record("Unable connect to node with id 1: refused"))
    assert passed == 0  # 2000 errors in 20 s: none printed
    clock.t += 60
    reminder = record("Unable connect to node with id 1")
    assert f.filter(reminder) and "2000 connection errors suppressed" in reminder.getMessage()
    # other lines are never touched, nor the service's own
    assert f.filter(record("something else went wrong"))
    assert f.filter(record("Connection refused", name="segcoord.service"))
    with caplog.at_level(logging.WARNING, logger="segcoord.service"):
        clock.t += 5
        f.healthy()
        f.healthy()  # once only
    assert [r.getMessage() for r in caplog.records] == [
        "broker reconnected after 85 s (2000 connection errors suppressed)"]
    assert not f.unreachable
    again = record("Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
    assert f.filter(again) and "unreachable since" in again.getMessage()


def test_escape_codes_are_stripped() -> None:
    f = ConnectionErrors()
    r = record("\x1b[32mgreen\x1b[0m progress\r", name="faust", level=logging.WARNING)
    assert f.filter(r) and r.getMessage() == "green progress"
    assert strip_escapes("\x1b[?25l\x1b[?25h") == ""


def test_a_rewritten_line_formats_through_fausts_formatter() -> None:
    """The outage line reaches the worker's log through mode's ``ExtensionFormatter`` (Faust's), which turns
    non-tuple arguments into a tuple: a rewritten record whose arguments were ``None`` came out as "--- Logging
    error --- ... not all arguments converted" instead of the line."""
    import io

    from mode.utils.logging import ExtensionFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ExtensionFormatter(stream=out, fmt="%(levelname)s %(message)s"))
    f = ConnectionErrors(remind_s=0, clock=Clock())
    handler.addFilter(f)
    logger = logging.getLogger("kafka.librdkafka.test-format")
    logger.propagate, logger.handlers = False, [handler]
    try:
        # as confluent-kafka logs: a format and three arguments
        logger.error("%s [%s] %s", "FAIL", "rdkafka#producer-4", "Connect to ipv4#127.0.0.1:1 failed: "
                     "Connection refused (after 0ms in state CONNECT)")
        logger.error("%s [%s] %s", "FAIL", "rdkafka#producer-4", "Connection refused")  # the reminder
        logger.warning("\x1b[32m%s\x1b[0m progress", "green")  # an escape-stripped line, not an outage one
    finally:
        logger.handlers = []
    lines = out.getvalue().splitlines()
    assert lines == [
        "ERROR broker unreachable since 00:16:40Z: FAIL [rdkafka#producer-4] Connect to ipv4#127.0.0.1:1 failed: "
        "Connection refused (after 0ms in state CONNECT)",
        "ERROR broker unreachable since 00:16:40Z (0 s, 0 connection errors suppressed)",
        "WARNING green progress"], out.getvalue()


def seg(d: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * 86_400_000, T0 + (d + 1) * 86_400_000), "v1", 0, 100)


def test_a_run_becomes_druid_metrics_gauges_topic_json_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    emitted: list[tuple[bytes, bytes]] = []
    m = ServiceMetrics(lambda k, v: emitted.append((k, v)), host="test")
    commands = (PlanCommand("load", "h1", seg(0).id, "hot", 1, "r"),
                PlanCommand("load", "h2", seg(0).id, "hot", 1, "r"),
                PlanCommand("drop", "h3", seg(1).id, "hot", 12, "r"))
    plan = Plan(commands, (), {"segment/assigned/count": {"hot": 2}, "segment/dropped/count": {"hot": 1},
                               "segment/unavailable/count": 4, "segment/loadQueue/count": {"h1": 1},
                               "decisions": 3})
    with caplog.at_level(logging.INFO, logger="segcoord.planner"):
        m.plan_run(plan, PlacementState(), 4.2, T0)
        m.plan_run(Plan((), (), {}), PlacementState(), 1.0, T0)  # decided nothing: no line
    assert [r.getMessage() for r in caplog.records] == [
        "planned 2 loads, 1 drops, 0 moves, 0 cancels, 0 marked unused in 4 ms"]
    text = m.exposition().decode()
    assert 'druid_segment_assigned_count{tier="hot"} 2.0' in text
    assert 'druid_segment_loadQueue_count{server="h1"} 1.0' in text
    assert "druid_segment_unavailable_count 4.0" in text and "druid_coordinator_time 1.0" in text
    docs = [orjson.loads(v) for _, v in emitted]
    assigned = next(d for d in docs if d["metric"] == "segment/assigned/count")
    assert assigned == {"feed": "metrics", "timestamp": "2026-11-21T00:00:00.000Z", "service": "segcoord/coordinator",
                        "host": "test", "version": "0.1.0", "metric": "segment/assigned/count", "value": 2,
                        "tier": "hot"}
    assert not any(d["metric"] == "decisions" for d in docs)
    # a scoped run's unavailable count covers its scope only: it does not replace the cluster's
    m.plan_run(Plan((), (), {"segment/unavailable/count": 0}), PlacementState(), 1.0, T0, full=False)
    assert "druid_segment_unavailable_count 4.0" in m.exposition().decode()



def test_scoped_runs_are_reported_together_at_the_next_flush(caplog: pytest.LogCaptureFixture) -> None:
    """Event runs (``full=False``) cost no report each: the next flush (the observer's timer, or a full run) reports
    them as one, counts summed, levels as the last run left them, one log line for all."""
    emitted: list[tuple[bytes, bytes]] = []
    m = ServiceMetrics(lambda k, v: emitted.append((k, v)), host="test")
    load = PlanCommand("load", "h1", seg(0).id, "hot", 1, "r")
    with caplog.at_level(logging.INFO, logger="segcoord.planner"):
        m.plan_run(Plan((load,), (), {"segment/assigned/count": {"hot": 1}, "segment/loadQueue/count": {"h1": 3},
                                      "segment/unavailable/count": 1, "decisions": 1}), PlacementState(), 1.5, T0,
                   full=False)
        m.plan_run(Plan((load, load), (), {"segment/assigned/count": {"hot": 2},
                                           "segment/loadQueue/count": {"h1": 5}}), PlacementState(), 2.0, T0 + 7,
                   full=False)
        assert not emitted and not caplog.records and "druid_segment_assigned_count{" not in m.exposition().decode()
        m.flush_runs()
        m.flush_runs()  # nothing pending: nothing more
    assert [r.getMessage() for r in caplog.records] == [
        "planned 3 loads, 0 drops, 0 moves, 0 cancels, 0 marked unused in 4 ms over 2 runs"]
    docs = [orjson.loads(v) for _, v in emitted]
    assert [(d["metric"], d.get("tier") or d.get("server"), d["value"]) for d in docs] == [
        ("segment/assigned/count", "hot", 3), ("segment/loadQueue/count", "h1", 5), ("coordinator/time", None, 3.5)]
    assert {d["timestamp"] for d in docs} == {"2026-11-21T00:00:00.007Z"}  # the last run's time
    text = m.exposition().decode()
    assert 'druid_segment_assigned_count{tier="hot"} 3.0' in text and "druid_coordinator_time 3.5" in text
    assert "druid_segment_unavailable_count" not in text  # a scoped run's count of its scope is not the cluster's
    # a full run reports the pending runs first, then itself
    emitted.clear()
    m.plan_run(Plan((load,), (), {"segment/assigned/count": {"hot": 1}}), PlacementState(), 1.0, T0 + 9, full=False)
    m.plan_run(Plan((), (), {"segment/assigned/count": {"hot": 7}}), PlacementState(), 9.0, T0 + 10)
    assert [(orjson.loads(v)["metric"], orjson.loads(v)["value"]) for _, v in emitted] == [
        ("segment/assigned/count", 1), ("coordinator/time", 1), ("segment/assigned/count", 7), ("coordinator/time", 9)]
    assert 'druid_segment_assigned_count{tier="hot"} 7.0' in m.exposition().decode()

def test_agent_metrics_and_names() -> None:
    m = ServiceMetrics()
    m.batch("timeline", 10, 0.004, 3)
    m.batch("timeline", 5, 0.002, 0)
    text = m.exposition().decode()
    assert 'druid_segcoord_agent_events_total{agent="timeline"} 15.0' in text
    assert 'druid_segcoord_agent_batch_time_count{agent="timeline"} 2.0' in text
    assert 'druid_segcoord_agent_lag{agent="timeline"} 0.0' in text
    assert prometheus_name("segment/loadQueue/size") == "druid_segment_loadQueue_size"
    emitted: list[bytes] = []
    m.emit = lambda _k, v: emitted.append(v)
    m.publish_agents(T0)
    m.batch("timeline", 30, 0.001, 0)
    m.publish_agents(T0 + 2000)
    rates = [orjson.loads(v) for v in emitted if b"events/rate" in v]
    assert [(d["agent"], d["value"]) for d in rates] == [("timeline", 15)]  # 30 events in 2 s
    assert 'druid_segcoord_agent_events_rate{agent="timeline"} 15.0' in m.exposition().decode()
