"""Clients for consumers of the coordinator: the visibility feed and a queryable view of the timeline.

- :class:`VisibilityFeed` iterates ``SegmentVisibilityChanged`` events of the
  ``timeline`` topic from the beginning, from given offsets, or from a time
  (Kafka's offsets-for-times), dropping events whose id it already yielded (an
  agent restarted after a crash re-emits identical ids).
- :class:`QueryableView` answers, for a data source and an interval, which
  segments are queryable, the part of the interval each one serves and the
  servers serving it. It folds the ``segments`` log (publishes, announces,
  unannounces, unused marks) with the same pure :class:`~coordinator.timeline.timelines.Timelines`
  the timeline agent runs, after the same seal check (publishes and marks the
  coordinator did not seal are skipped; it needs the deployment's publish key),
  so at the same log position its states are the agent's states. (The feed
  carries each segment's state, not which instants each version serves: that
  depends on chunk completeness, which the fold knows.)

**Invariants.** Neither client writes anything (no offsets committed, no dead
letters: undecodable records are counted and skipped; the agents dead-letter
them). Partitions are assigned explicitly, so any number of clients read
independently. A view never serves two versions for one instant (the fold's
served pieces are disjoint).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from coordinator.locks.seal import use_refusal
from coordinator.timeline.timelines import Timelines
from events.envelope import Envelope, decode
from events.interval import Interval
from events.registry import Event
from events.schema import EventValidationError
from events.topics import SEGMENTS, TIMELINE, Topics
from events.visibility import SegmentState, SegmentVisibilityChanged
from streaming import credentials


@dataclass(frozen=True, slots=True)
class Change:
    """One visibility change and where it was read."""

    partition: int
    offset: int
    envelope: Envelope[SegmentVisibilityChanged]

    @property
    def event(self) -> SegmentVisibilityChanged:
        return self.envelope.event


class _Reader:
    """All partitions of one topic, assigned (no group membership), from a start position."""

    def __init__(self, bootstrap: str, topic: str, *, offsets: Mapping[int, int] | None = None,
                 since_ms: int | None = None) -> None:
        self.topic = topic
        self.undecodable = 0
        self._consumer = Consumer({**credentials.client_config(bootstrap), "group.id": "segcoord-subscriber",
                                   "enable.auto.commit": False, "isolation.level": "read_committed"})
        partitions = sorted(self._consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        if since_ms is not None:
            wanted = [TopicPartition(topic, p, since_ms) for p in partitions]
            starts = self._consumer.offsets_for_times(wanted, timeout=10)
            assignment = [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else _end(self, tp))
                          for tp in starts]
        else:
            given = offsets or {}
            assignment = [TopicPartition(topic, p, given.get(p, OFFSET_BEGINNING)) for p in partitions]
        self._consumer.assign(assignment)

    def poll(self, timeout: float) -> list[tuple[int, int, Envelope[Event]]]:
        first = self._consumer.poll(timeout)
        messages = [] if first is None else [first, *self._consumer.consume(499, 0)]
        out = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {err.str()}")
            try:
                out.append((msg.partition(), msg.offset(), decode(msg.value())))
            except EventValidationError:
                self.undecodable += 1
        return out

    def close(self) -> None:
        self._consumer.close()


def _end(reader: _Reader, tp: TopicPartition) -> int:
    """A partition's end offset (where offsets-for-times points when no message is that recent)."""
    _low, high = reader._consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
    return int(high)


class VisibilityFeed:
    """Visibility changes in log order per partition, each event id once."""

    def __init__(self, bootstrap: str, topics: Topics, *, offsets: Mapping[int, int] | None = None,
                 since_ms: int | None = None) -> None:
        if offsets is not None and since_ms is not None:
            raise ValueError("start from offsets or from a time, not both")
        self._reader = _Reader(bootstrap, topics.name(TIMELINE), offsets=offsets, since_ms=since_ms)
        self._seen: set[str] = set()
        self.duplicates = 0

    def poll(self, timeout: float = 1.0) -> list[Change]:
        out = []
        for partition, offset, envelope in self._reader.poll(timeout):
            if not isinstance(envelope.event, SegmentVisibilityChanged):
                continue
            if envelope.event_id in self._seen:
                self.duplicates += 1
                continue
            self._seen.add(envelope.event_id)
            out.append(Change(partition, offset, envelope))  # type: ignore[arg-type]
        return out

    def until_idle(self, idle_timeout: float = 3.0) -> Iterator[Change]:
        while True:
            batch = self.poll(idle_timeout)
            if not batch:
                return
            yield from batch

    def close(self) -> None:
        self._reader.close()


@dataclass(frozen=True, slots=True)
class Queryable:
    """A segment queries use, the parts of the asked interval it serves, and the servers serving it."""

    segment_id: str
    intervals: tuple[Interval, ...]
    servers: tuple[str, ...]


class QueryableView:
    """The queryable segments of any data source and interval, kept current by :meth:`refresh`."""

    def __init__(self, bootstrap: str, topics: Topics, publish_key: bytes | None = None) -> None:
        """``publish_key``: the deployment's (None: :func:`streaming.credentials.publish_key`). Publishes and
        marks whose seal does not verify are skipped, as every fold skips them (docs/security.md); a
        subscriber that must not hold the key reads the coordinator's ``timeline`` feed instead."""
        self._reader = _Reader(bootstrap, topics.name(SEGMENTS))
        self._fold = Timelines()
        self._seen: set[str] = set()
        self._key = publish_key if publish_key is not None else credentials.publish_key()
        self.applied = 0
        self.refused = 0

    def refresh(self, timeout: float = 0.2) -> int:
        """Apply what the log has gained; returns the number of events applied."""
        applied = 0
        for _partition, _offset, envelope in self._reader.poll(timeout):
            if envelope.event_id in self._seen:
                continue
            self._seen.add(envelope.event_id)
            if use_refusal(envelope, self._key) is not None:
                self.refused += 1  # not sealed by the coordinator: the timeline agent dead-letters it
                continue
            try:
                self._fold.apply(envelope.event)
            except EventValidationError:
                continue  # the timeline agent dead-letters it; the view skips it alike
            applied += 1
        self.applied += applied
        return applied

    def catch_up(self, idle_timeout: float = 2.0) -> None:
        while self.refresh(idle_timeout):
            pass

    def lookup(self, data_source: str, interval: Interval) -> list[Queryable]:
        timeline = self._fold.timeline(data_source) if data_source in self._fold.data_sources() else None
        if timeline is None:
            return []
        return [Queryable(str(entry.segment_id), tuple(entry.intervals), tuple(timeline.servers(entry.segment_id)))
                for entry in timeline.lookup(interval)]

    def states(self) -> dict[str, SegmentState]:
        return self._fold.states()

    def close(self) -> None:
        self._reader.close()
