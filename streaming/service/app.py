"""The coordinator service: one Faust (faust-streaming 0.15.3) worker per ``segcoord run``: timeline and lockbox agents.

Each agent has its own RocksDB store (``<state dir>/timeline``,
``<state dir>/lockbox``), its own producer and its own input topic
(``segments``, ``lock-requests``); both are positioned from their store.

Positioning is ours, not Faust's. Faust positions stream partitions in its
recovery service (``Recovery._resume_streams``: it sends ``on_rebalance_complete``,
then calls ``Consumer.perform_seek()``, which seeks every partition to the
offset committed in Kafka). A seek made from the public hooks
(``app.on_partitions_assigned``, ``on_rebalance_complete``) is therefore
overwritten whenever the group has a committed offset (checked on the real
broker: a seek to 5 in the signal, a committed 15, the agent got 15, 16, 17).
So :func:`_position_from_store` replaces the consumer's ``seek_to_committed``
(the one method ``perform_seek`` asks) with a seek to the offsets in RocksDB of
the agent owning each assigned topic, or to the beginning of partitions never
applied. That is the only Faust
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

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events.topics import LOCK_REQUESTS, SEGMENTS, Topics
from streaming.producer import EventProducer
from streaming.service import lockbox_agent as lockbox_mod
from streaming.service import timeline_agent as timeline_mod
from streaming.service.lockbox_agent import LockboxAgent
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import InputRecord, TimelineAgent

log = logging.getLogger("segcoord.service")

BATCH_MAX = 1000
BATCH_WITHIN_S = 0.05
EXIT_AGENT_FAILED = 70


StoredOffsets = Callable[[], dict[tuple[str, int], int]]


def build_app(bootstrap: str, topics: Topics, timeline: TimelineAgent, lockbox: LockboxAgent) -> Any:
    """A Faust app with the timeline agent over every partition of ``segments`` and the lockbox agent over
    every partition of ``lock-requests``."""
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
    agents: list[tuple[str, str, TimelineAgent | LockboxAgent]] = [
        ("timeline", topics.name(SEGMENTS), timeline),
        ("lockbox", topics.name(LOCK_REQUESTS), lockbox),
    ]
    for name, topic_name, agent in agents:
        topic = app.topic(topic_name, key_serializer="raw", value_serializer="raw")
        app.agent(topic, name=f"{app_id}.{name}")(_agent_body(name, agent))
    _position_from_store(app, {topic_name: agent.next_offsets for _, topic_name, agent in agents})
    return app


def _agent_body(name: str, agent: TimelineAgent | LockboxAgent) -> Callable[[Any], Any]:
    """The Faust agent coroutine: batches of records into ``agent.process``; any failure exits the process."""

    async def body(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            records = [
                InputRecord(m.topic, m.partition, m.offset, m.key, m.value, round((m.timestamp or 0) * 1000))
                for m in (e.message for e in events)
            ]
            try:
                agent.process(records)
            except Exception:
                log.exception("%s agent failed; exiting so a restart resumes from the store", name)
                logging.shutdown()
                os._exit(EXIT_AGENT_FAILED)

    body.__name__ = name
    return body


def _position_from_store(app: Any, stored: dict[str, StoredOffsets]) -> None:
    """Make Faust's post-assignment seek go to the stored offsets (or the beginning), not Kafka's commits.

    ``stored`` maps each input topic to its agent's stored next offsets."""
    consumer = app.consumer

    async def seek_to_stored() -> dict[Any, int]:
        offsets = {topic: read() for topic, read in stored.items()}
        positions: dict[Any, int] = {}
        for tp in sorted(consumer.assignment()):
            if tp.topic not in offsets:
                continue
            offset = offsets[tp.topic].get((tp.topic, tp.partition))
            if offset is None:
                offset = (await consumer.earliest_offsets(tp))[tp]
            await consumer._seek(tp, offset)
            positions[tp] = offset
        log.info("positioned from the state stores: %s", positions)
        return positions

    consumer.seek_to_committed = seek_to_stored


def _resume_text(offsets: dict[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "the beginning"


def run_service(bootstrap: str, topics: Topics, state_dir: Path, *, loglevel: str = "warn") -> int:
    """Run the worker until SIGTERM/SIGINT; the state stores are closed on the way out."""
    import faust

    with contextlib.ExitStack() as stack:
        tl_store = stack.enter_context(AgentStateStore(state_dir / timeline_mod.STORE_NAME,
                                                       timeline_mod.FORMAT_VERSION))
        lb_store = stack.enter_context(AgentStateStore(state_dir / lockbox_mod.STORE_NAME,
                                                       lockbox_mod.FORMAT_VERSION))
        tl_producer = EventProducer(bootstrap, topics)
        lb_producer = EventProducer(bootstrap, topics)
        stack.callback(sys.stdout.flush)
        stack.callback(lb_producer.flush)
        stack.callback(tl_producer.flush)
        timeline = TimelineAgent(tl_store, topics, tl_producer)
        print(f"timeline agent resumes at {_resume_text(timeline.next_offsets())}"
              f"{' (store wiped: older format)' if tl_store.wiped else ''}", flush=True)
        lockbox = LockboxAgent(lb_store, topics, lb_producer)
        # worded apart from the timeline's " resumes at " line, which tests count
        print(f"lockbox agent: {lockbox.counters_restored} requests restored, resuming from "
              f"{_resume_text(lockbox.next_offsets())}"
              f"{' (store wiped: older format)' if lb_store.wiped else ''}", flush=True)
        app = build_app(bootstrap, topics, timeline, lockbox)
        worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        except SystemExit as e:
            return int(e.code or 0)
        return 0
