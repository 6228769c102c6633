"""What ``segcoord demo`` shows: the whole log followed live and folded, sampled into time series.

:class:`Watch` reads every topic of the demo's prefix from the beginning (assigned
partitions, no group, nothing committed) and folds what it reads with
:class:`~streaming.replay.LogFold`, the fold ``segcoord replay`` and ``audit`` use
(timeline states, live locks, placement by announces). It adds only what the
report needs and the fold does not keep:

- **latencies**: publish -> first announce of each segment (the time to load it),
  first announce -> the timeline agent's ``visible`` (the time to become queryable);
- **commands in flight**: LoadSegment / DropSegment not yet answered (announce,
  unannounce or refusal by causation id, as the audit counts them) and still
  answerable (see :meth:`Watch.abandoned`), moves counted by target;
- **samples**: each :meth:`Watch.sample` records, at that instant, segments per
  server, each tier's total balancing cost (Druid's cost function over the
  segments each server holds), one data source's segment states, and the
  coordinator's consumer lag (its group's committed offsets against the ends).

The watcher writes nothing to Kafka.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from coordinator.balancer.cost import CostModel, costs
from events.cluster import (
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerJoined,
    ServerLeft,
    ServerLost,
    ServerRecommissioned,
)
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import decode
from events.interval import Interval
from events.schema import EventValidationError
from events.segment import SegmentDescriptor
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE, Topics
from events.visibility import SegmentVisibilityChanged
from streaming import credentials
from streaming.replay import LogFold, LogRecord

FOLLOWED = (LOCK_REQUESTS, LOCKS, SEGMENTS, CLUSTER, COMMANDS, TIMELINE)
LAGGED = (LOCK_REQUESTS, SEGMENTS, CLUSTER, COMMANDS)  # what the coordinator's agents consume


@dataclass
class Sample:
    at: float  # seconds since the watch started
    per_server: dict[str, int]  # server -> segments held
    cost_by_tier: dict[str, float]
    states: dict[str, str]  # segment id of the watched data source -> state
    in_flight: int
    lag: int | None
    tier_of: dict[str, str]


@dataclass
class Watch:
    bootstrap: str
    topics: Topics
    data_source: str  # the one whose timeline the report draws
    fold: LogFold = field(default_factory=LogFold)
    started: float = field(default_factory=time.time)
    samples: list[Sample] = field(default_factory=list)
    published_at: dict[str, float] = field(default_factory=dict)  # segment id -> publish record time (s)
    segments: dict[str, SegmentDescriptor] = field(default_factory=dict)
    first_announce: dict[str, float] = field(default_factory=dict)
    visible_at: dict[str, float] = field(default_factory=dict)
    load_latency: list[float] = field(default_factory=list)  # publish -> first announce, seconds
    visible_latency: list[float] = field(default_factory=list)  # first announce -> visible, seconds
    pending: dict[str, LoadSegment | DropSegment] = field(default_factory=dict)  # command event id -> command
    answered: set[str] = field(default_factory=set)
    decommissioning: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # event type -> how many
    moves_to: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # server -> moves onto it
    move_target: dict[str, str] = field(default_factory=dict)  # move id -> target server
    refused_moves: set[str] = field(default_factory=set)
    events: int = 0

    def __post_init__(self) -> None:
        self._consumer = Consumer({**credentials.client_config(self.bootstrap), "group.id": "segcoord-demo-watch",
                                   "enable.auto.commit": False, "enable.partition.eof": False})
        parts = []
        for name in FOLLOWED:
            topic = self.topics.name(name)
            meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
            parts += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
        self._consumer.assign(parts)
        self._logical = {self.topics.name(n): n for n in FOLLOWED}
        self._lag_reader = Consumer({**credentials.client_config(self.bootstrap),
                                     "group.id": f"{self.topics.prefix}coordinator", "enable.auto.commit": False})
        self._model = CostModel()

    def now(self) -> float:
        return time.time() - self.started

    # -- following ------------------------------------------------------------------------
    def poll(self, timeout: float = 0.2, budget: int = 5000) -> int:
        """Fold what arrived (at most ``budget`` records); how many records were read."""
        read = 0
        for msg in self._consumer.consume(budget, timeout):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {msg.topic()}: {msg.error()}")
                continue
            read += 1
            try:
                env = decode(msg.value())
            except EventValidationError:
                continue  # the agents dead-letter it; the watch only shows what is valid
            _kind, ts = msg.timestamp()
            record = LogRecord(self._logical[msg.topic()], msg.partition(), msg.offset(), ts, env)
            self._observe(record)
            self.fold.apply(record)
        return read

    def _observe(self, record: LogRecord) -> None:
        env, event = record.envelope, record.envelope.event
        at = record.timestamp / 1000 - self.started
        self.events += 1
        self.counts[env.event_type] += 1
        if isinstance(event, SegmentsPublished):
            for seg in event.segments:
                self.published_at.setdefault(str(seg.id), at)
                self.segments[str(seg.id)] = seg
        elif isinstance(event, SegmentAnnounced):
            sid = str(event.segment.id)
            if sid not in self.first_announce:
                self.first_announce[sid] = at
                if sid in self.published_at:
                    self.load_latency.append(max(0.0, at - self.published_at[sid]))
        elif isinstance(event, SegmentVisibilityChanged) and event.to_state == "visible" \
                and event.segment_id not in self.visible_at:
            self.visible_at[event.segment_id] = at
            if event.segment_id in self.first_announce:
                self.visible_latency.append(max(0.0, at - self.first_announce[event.segment_id]))
        elif isinstance(event, ServerDecommissioned):
            self.decommissioning.add(event.server)
        elif isinstance(event, ServerRecommissioned | ServerLeft | ServerLost | ServerJoined):
            self.decommissioning.discard(event.server)
        if record.topic == COMMANDS and isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad) \
                and not self.fold.placement.admits(event):  # read before the fold applies it: its decision
            return  # a deposed planner's command: nobody acts on it (coordinator.placement.fence)
        if record.topic == COMMANDS and isinstance(event, LoadSegment | DropSegment):
            if env.event_id not in self.answered:
                self.pending[env.event_id] = event
            if isinstance(event, LoadSegment) and event.move_id is not None:
                self.moves_to[event.server] += 1
                self.move_target[event.move_id] = event.server
        if isinstance(event, SegmentAnnounced | SegmentUnannounced | SegmentLoadRefused) and env.causation_id:
            self.answered.add(env.causation_id)
            self.pending.pop(env.causation_id, None)
        # as the audit counts them: a refusal answers the load its commandId names; a cancel withdraws its load
        if isinstance(event, SegmentLoadRefused):
            if event.move_id is not None:
                self.refused_moves.add(event.move_id)
            self._settle(lambda eid, c: eid == event.command_id or c.command_id == event.command_id)
        if record.topic == COMMANDS and isinstance(event, CancelSegmentLoad):
            if event.cancels is not None:
                self._settle(lambda eid, c: event.cancels in (eid, c.command_id))
            else:
                self._settle(lambda eid, c: isinstance(c, LoadSegment) and c.server == event.server
                             and str(c.segment.id) == event.segment_id)

    def _settle(self, answered: Callable[[str, LoadSegment | DropSegment], bool]) -> None:
        for eid in [eid for eid, c in self.pending.items() if answered(eid, c)]:
            self.answered.add(eid)
            del self.pending[eid]

    # -- what it shows --------------------------------------------------------------------
    def abandoned(self, command: LoadSegment | DropSegment) -> bool:
        """A command nobody will answer: its server left (the coordinator forgets its queue), or it is the
        drop half of a move whose target refused the load or left (the source keeps its copy and, as of
        now, never answers the drop)."""
        if command.server not in self.fold.servers:
            return True
        if isinstance(command, DropSegment) and command.move_id is not None:
            return command.move_id in self.refused_moves or self.move_target.get(command.move_id) \
                not in self.fold.servers
        return False

    def in_flight(self) -> int:
        """Commands not answered yet that still can be."""
        return sum(1 for c in self.pending.values() if not self.abandoned(c))

    def tiers(self) -> dict[str, str]:
        return {s.name: s.tier or "_default_tier" for s in self.fold.servers.values()}

    def holders(self) -> dict[str, set[str]]:
        """Segment id -> the servers announcing it."""
        out: dict[str, set[str]] = defaultdict(set)
        for s in self.fold.servers.values():
            for sid in s.segments:
                out[sid].add(s.name)
        return out

    def states(self) -> dict[str, str]:
        return dict(self.fold.timelines.states())

    def tier_cost(self) -> dict[str, float]:
        """Each tier's total cost: the pairwise joint cost of the segments on each of its servers, summed."""
        out: dict[str, float] = defaultdict(float)
        for server in self.fold.servers.values():
            segs = [self.segments[sid] for sid in server.segments if sid in self.segments]
            if len(segs) < 2:
                out[server.tier or "_default_tier"] += 0.0
                continue
            starts = np.array([s.interval.start for s in segs], dtype=np.int64)
            ends = np.array([s.interval.end for s in segs], dtype=np.int64)
            sources = np.array([s.data_source for s in segs])
            total = 0.0
            for i, seg in enumerate(segs):
                total += float(np.sum(costs(seg.interval, starts[i + 1:], ends[i + 1:],
                                            sources[i + 1:] == seg.data_source, self._model)))
            out[server.tier or "_default_tier"] += total
        return dict(out)

    def lag(self) -> int | None:
        """Records the coordinator's agents have not committed yet (None before its group committed)."""
        parts = []
        for name in LAGGED:
            topic = self.topics.name(name)
            meta = self._lag_reader.list_topics(topic, timeout=5).topics[topic]
            parts += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        try:
            committed = self._lag_reader.committed(parts, timeout=5)
        except Exception:
            return None
        if all(tp.offset < 0 for tp in committed):
            return None
        total = 0
        for tp in committed:
            _low, high = self._lag_reader.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5)
            total += high - max(tp.offset, 0)
        return total

    def sample(self, with_lag: bool = True) -> Sample:
        per_server = {s.name: len(s.segments) for s in self.fold.servers.values()}
        ds_states = {sid: st for sid, st in self.states().items() if sid in self.segments
                     and self.segments[sid].data_source == self.data_source}
        s = Sample(self.now(), per_server, self.tier_cost(), ds_states, self.in_flight(),
                   self.lag() if with_lag else None, self.tiers())
        self.samples.append(s)
        return s

    def in_interval(self, interval: Interval) -> list[str]:
        """Visible segments whose interval lies in ``interval``."""
        states = self.states()
        return sorted(sid for sid, seg in self.segments.items() if states.get(sid) == "visible"
                      and interval.start <= seg.interval.start and seg.interval.end <= interval.end)

    def summary(self) -> dict[str, Any]:
        states = self.states()
        by_state: dict[str, int] = defaultdict(int)
        for st in states.values():
            by_state[st] += 1
        return {"events": self.events, "segmentStates": dict(sorted(by_state.items())),
                "servers": {s.name: {"tier": s.tier, "segments": len(s.segments), "usedBytes": s.used_bytes}
                            for s in sorted(self.fold.servers.values(), key=lambda s: s.name)},
                "commandsInFlight": self.in_flight(),
                "commandsAbandoned": len(self.pending) - self.in_flight(),
                "movesOnto": dict(sorted(self.moves_to.items())),
                "eventCounts": dict(sorted(self.counts.items()))}

    def close(self) -> None:
        self._consumer.close()
        self._lag_reader.close()
