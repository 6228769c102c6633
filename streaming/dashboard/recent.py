"""The dashboard's "recent" feeds: the last commands and visibility changes, tailed from the log.

:class:`RecentEvents` reads ``commands`` (loads, drops, cancels: the planner's and the Spark balancer's
alike) and ``timeline`` (``SegmentVisibilityChanged``) like ``segcoord tail`` does: no consumer group,
nothing committed, starting ``KEEP`` records before each partition's end, then following. It keeps the
newest ``KEEP`` entries of each feed in memory (a bounded deque: a restart starts again from the log) and
never feeds anything back. Each entry has a ``seq`` (increasing per process), so a page can ask only for
what it has not shown. An undecodable record becomes an entry saying so, never an error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import Envelope, decode
from events.registry import Event
from events.schema import EventValidationError
from events.topics import COMMANDS, TIMELINE, Topics
from events.visibility import SegmentVisibilityChanged
from streaming import credentials

log = logging.getLogger("segcoord.dashboard")
KEEP = 50
FEEDS = {COMMANDS: "commands", TIMELINE: "visibility"}


def entry_of(env: Envelope[Event]) -> dict[str, Any]:
    """One decoded record as a dashboard entry: when, what, which segment, and the command's server or the
    visibility change's states."""
    ev = env.event
    out: dict[str, Any] = {"at": int(env.occurred_at), "type": env.event_type}
    if isinstance(ev, LoadSegment):
        out.update(action="move in" if ev.move_id else "load", server=ev.server, segment=str(ev.segment.id),
                   stage=ev.stage, purpose=ev.purpose, reason=ev.reason)
    elif isinstance(ev, DropSegment):
        out.update(action="move out" if ev.move_id else "drop", server=ev.server, segment=ev.segment_id,
                   stage=ev.stage, purpose=ev.purpose, reason=ev.reason)
    elif isinstance(ev, CancelSegmentLoad):
        out.update(action="cancel", server=ev.server, segment=ev.segment_id, reason=ev.reason)
    elif isinstance(ev, SegmentVisibilityChanged):
        out.update(segment=ev.segment_id, dataSource=ev.data_source, **{"from": ev.from_state, "to": ev.to_state})
    return out


class RecentEvents:
    """A daemon thread tailing the feeds' topics into bounded deques (read with :meth:`since`)."""

    def __init__(self, bootstrap: str, topics: Topics, keep: int = KEEP) -> None:
        self.bootstrap = bootstrap
        self.names = {topics.name(t): feed for t, feed in FEEDS.items()}
        self.keep = keep
        self.feeds: dict[str, deque[dict[str, Any]]] = {f: deque(maxlen=keep) for f in FEEDS.values()}
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-recent", daemon=True)

    def start(self) -> RecentEvents:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def since(self, seq: int = 0) -> dict[str, Any]:
        """Each feed's entries with ``seq`` above the given one (oldest first), and the latest ``seq``."""
        with self._lock:
            return {"seq": self._seq, **{f: [e for e in d if e["seq"] > seq] for f, d in self.feeds.items()}}

    def add(self, topic: str, value: bytes | None) -> None:
        try:
            entry = entry_of(decode(value))
        except EventValidationError as e:
            entry = {"at": int(time.time() * 1000), "type": "undecodable", "reason": str(e)}
        with self._lock:
            self._seq += 1
            self.feeds[self.names[topic]].append({"seq": self._seq, **entry})

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
                return
            except KafkaException as e:  # topics not there yet, broker away: try again, quietly
                log.debug("recent events: %s; retrying", e)
                self._stop.wait(2.0)

    def _follow(self) -> None:
        consumer = Consumer({**credentials.client_config(self.bootstrap), "group.id": "segcoord-dashboard",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "logger": logging.getLogger("segcoord.dashboard.kafka")})
        try:
            consumer.assign(self._starts(consumer))
            while not self._stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                err, topic = msg.error(), msg.topic()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.debug("recent events: %s", err.str())
                    continue
                if topic is not None:
                    self.add(topic, msg.value())
        finally:
            consumer.close()

    def _starts(self, consumer: Consumer) -> list[TopicPartition]:
        """Every partition of the feeds' topics, ``keep`` records before its end."""
        out = []
        for name in self.names:
            meta = consumer.list_topics(name, timeout=10).topics.get(name)
            if meta is None or meta.error is not None:
                raise KafkaException(f"topic {name} is not there yet")
            for p in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                out.append(TopicPartition(name, p, max(low, high - self.keep)))
        return out
