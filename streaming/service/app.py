"""The coordinator service: one Faust (faust-streaming 0.15.3) worker per ``segcoord run``; for now the timeline agent.

Positioning is ours, not Faust's. Faust positions stream partitions in its
recovery service (``Recovery._resume_streams``: it sends ``on_rebalance_complete``,
then calls ``Consumer.perform_seek()``, which seeks every partition to the
offset committed in Kafka). A seek made from the public hooks
(``app.on_partitions_assigned``, ``on_rebalance_complete``) is therefore
overwritten whenever the group has a committed offset (checked on the real
broker: a seek to 5 in the signal, a committed 15, the agent got 15, 16, 17).
So :func:`_position_from_store` replaces the consumer's ``seek_to_committed``
(the one method ``perform_seek`` asks) with a seek to the offsets in RocksDB,
or to the beginning of partitions never applied. That is the only Faust
internal touched. Faust's own Kafka offset commits still happen but are never
read: RocksDB holds the offsets that count (one write batch with the state).

Other settings and why: no tables (``memory://`` store, no changelogs; Faust's
table changelog writes data and offset separately); ``topic_disable_leader``
(no ``__assignor-__leader`` topic); ``consumer_group_instance_id`` (static
membership: a worker killed with SIGKILL and restarted takes its partitions back
at once instead of waiting for the dead member's session to expire); no web
server. The agent body takes batches (``take_events``) so one flush and one
write batch cover many records. If the agent raises, the process exits with
status 70 at once: the store is at its last whole batch, and a restart resumes
from there (DESIGN.md: a crash at any point then restart equals full replay).

Dependency: the project's producers compress with lz4, and aiokafka (Faust's
client) decodes lz4 only with ``cramjam`` installed (``aiokafka[lz4]``);
without it the fetcher crashes on the first batch.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events.topics import SEGMENTS, Topics
from streaming.producer import EventProducer
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, STORE_NAME, InputRecord, TimelineAgent

log = logging.getLogger("segcoord.service")

BATCH_MAX = 1000
BATCH_WITHIN_S = 0.05
EXIT_AGENT_FAILED = 70


def build_app(bootstrap: str, topics: Topics, agent: TimelineAgent) -> Any:
    """A Faust app with the timeline agent over every partition of ``segments``."""
    import faust

    app_id = f"{topics.prefix}coordinator"
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        topic_disable_leader=True,
        consumer_group_instance_id=f"{app_id}.{socket.gethostname()}",
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        stream_buffer_maxsize=4 * BATCH_MAX,
    )
    segments = app.topic(topics.name(SEGMENTS), key_serializer="raw", value_serializer="raw")

    async def timeline(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            records = [
                InputRecord(m.topic, m.partition, m.offset, m.key, m.value, round((m.timestamp or 0) * 1000))
                for m in (e.message for e in events)
            ]
            try:
                agent.process(records)
            except Exception:
                log.exception("timeline agent failed; exiting so a restart resumes from the store")
                logging.shutdown()
                os._exit(EXIT_AGENT_FAILED)

    app.agent(segments, name=f"{app_id}.timeline")(timeline)
    _position_from_store(app, agent.next_offsets, topics.name(SEGMENTS))
    return app


def _position_from_store(app: Any, stored: Callable[[], dict[tuple[str, int], int]], topic: str) -> None:
    """Make Faust's post-assignment seek go to the stored offsets (or the beginning), not Kafka's commits."""
    consumer = app.consumer

    async def seek_to_stored() -> dict[Any, int]:
        offsets = stored()
        positions: dict[Any, int] = {}
        for tp in sorted(consumer.assignment()):
            if tp.topic != topic:
                continue
            offset = offsets.get((tp.topic, tp.partition))
            if offset is None:
                offset = (await consumer.earliest_offsets(tp))[tp]
            await consumer._seek(tp, offset)
            positions[tp] = offset
        log.info("positioned %s from the state store: %s", topic, positions)
        return positions

    consumer.seek_to_committed = seek_to_stored


def run_service(bootstrap: str, topics: Topics, state_dir: Path, *, loglevel: str = "warn") -> int:
    """Run the worker until SIGTERM/SIGINT; the state store is closed on the way out."""
    import faust

    store = AgentStateStore(state_dir / STORE_NAME, FORMAT_VERSION)
    producer = EventProducer(bootstrap, topics)
    try:
        agent = TimelineAgent(store, topics, producer)
        resume = ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(agent.next_offsets().items())) or "the beginning"
        print(f"timeline agent resumes at {resume}{' (store wiped: older format)' if store.wiped else ''}",
              flush=True)
        app = build_app(bootstrap, topics, agent)
        worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        except SystemExit as e:
            return int(e.code or 0)
        return 0
    finally:
        try:
            producer.flush()
        finally:
            store.close()
        sys.stdout.flush()
