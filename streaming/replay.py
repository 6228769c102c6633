"""Replay and audit the whole log: the coordinator's state as of any point, and its invariants checked.

:func:`read_log` reads every topic to its current end (no group, nothing
committed) and merges the partitions into one sequence by broker timestamp,
keeping each partition's own order (a k-way merge of the partitions; ties by
topic, then partition). ``until`` stops the merge at a time (ms, inclusive) or
right after a given ``topic:partition:offset``.

:class:`LogFold` folds that sequence with the pure cores: the segment timeline
(``segments``), the live locks (``locks``: granted, minus revoked and
released), and the placement (servers from ``cluster``, what each serves from
announces). Replay prints it; :func:`audit` runs the same fold and checks, at
every step:

- the timeline agent's output (``timeline``, deduplicated by id) is exactly the
  pure fold's, change for change, and the fold never serves two versions of a
  data source at one instant;
- every published segment lies inside a live lock of its task (or the task's group);
- no server holds more than its ``maxSizeBytes``;
- every LoadSegment/DropSegment is answered (announce, unannounce or refusal,
  by causation id; a refusal also answers the load its ``commandId`` names) or
  is younger than the command timeout at the end of the log. A
  ``CancelSegmentLoad`` answers the load it ``cancels`` (without ``cancels``:
  the server's earlier loads of the segment): the coordinator withdrew it, and
  whether the server then refuses it or had announced it already, nothing more
  is owed. The cancel itself counts as answered when sent: a server answers it
  only when it withdrew a queued load, so silence is a valid outcome.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from coordinator.timeline.timelines import Timelines
from events.cluster import SegmentLoadRefused, ServerJoined, ServerLeft
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import Envelope, decode
from events.ids import derived_event_id
from events.instant import format_instant
from events.interval import Interval
from events.locks import LockGranted, LockReleased, LockRevoked, TaskLock
from events.registry import Event
from events.schema import EventValidationError
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.tasks import TaskStarted
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE, Topics
from events.visibility import SegmentVisibilityChanged

ORDER = (LOCK_REQUESTS, LOCKS, SEGMENTS, CLUSTER, COMMANDS, TIMELINE)


class ReplayError(ValueError):
    """A bad ``--until`` or an unreachable broker."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    topic: str  # logical name
    partition: int
    offset: int
    timestamp: int
    envelope: Envelope[Event]

    @property
    def position(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


@dataclass(frozen=True, slots=True)
class Until:
    """Stop at a time (inclusive) or right after one record."""

    time: int | None = None
    topic: str | None = None
    partition: int = 0
    offset: int = 0

    @staticmethod
    def parse(text: str) -> Until:
        parts = text.split(":")
        if len(parts) == 3 and parts[0] in ORDER:
            try:
                return Until(None, parts[0], int(parts[1]), int(parts[2]))
            except ValueError:
                raise ReplayError(f"--until: {text!r}: partition and offset must be integers") from None
        from events.instant import parse_instant
        try:
            return Until(parse_instant(text))
        except ValueError as e:
            raise ReplayError(f"--until: {text!r} is neither an ISO-8601 time nor topic:partition:offset "
                              f"(topics: {', '.join(ORDER)}): {e}") from None


def _all_records(consumer: Consumer, topics: Topics) -> list[list[LogRecord]]:
    """Every partition of every topic read to its end offset at the start of the read, in one assignment."""
    ends: dict[tuple[str, int], int] = {}
    logical_of: dict[str, str] = {}
    for logical in ORDER:
        name = topics.name(logical)
        logical_of[name] = logical
        meta = consumer.list_topics(name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None:
            raise ReplayError(f"topic {name} does not exist (run `segcoord topics create`)")
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
            if high > low:
                ends[(name, p)] = high
    queues: dict[tuple[str, int], list[LogRecord]] = {tp: [] for tp in ends}
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for name, p in ends])
    remaining = set(ends)
    while remaining:
        # one blocking poll, then what is buffered: consume(n, t) alone waits for n messages or t
        first = consumer.poll(10.0)
        if first is None:
            raise ReplayError(f"the log stopped before its end: {sorted(remaining)} unread")
        for msg in [first, *consumer.consume(999, 0)]:
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise ReplayError(f"reading {msg.topic()}: {msg.error().str()}")
            tp = (msg.topic(), msg.partition())
            if tp not in remaining:
                continue
            if msg.offset() >= ends[tp] - 1:
                remaining.discard(tp)
            if msg.offset() >= ends[tp]:
                continue
            try:
                env = decode(msg.value())
            except EventValidationError:
                continue  # dead-lettered by the agents; not part of the state
            queues[tp].append(LogRecord(logical_of[tp[0]], tp[1], msg.offset(), msg.timestamp()[1], env))
    return [queues[tp] for tp in sorted(queues, key=lambda tp: (ORDER.index(logical_of[tp[0]]), tp[1]))]


def read_log(bootstrap: str, topics: Topics, until: Until | None = None) -> Iterator[LogRecord]:
    """Every decodable record of every topic, merged by timestamp with each partition's order kept."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "segcoord-replay", "enable.auto.commit": False,
                         "enable.partition.eof": False, "isolation.level": "read_committed"})
    try:
        queues = [q for q in _all_records(consumer, topics) if q]
    finally:
        consumer.close()
    heap = [(q[0].timestamp, ORDER.index(q[0].topic), q[0].partition, i, 0) for i, q in enumerate(queues)]
    heapq.heapify(heap)
    while heap:
        _ts, rank, partition, i, j = heapq.heappop(heap)
        record = queues[i][j]
        if until is not None and until.time is not None and record.timestamp > until.time:
            continue  # this partition is past the time (its later records are too)
        yield record
        if until is not None and until.topic == record.topic and until.partition == record.partition \
                and until.offset <= record.offset:
            return
        if j + 1 < len(queues[i]):
            nxt = queues[i][j + 1]
            heapq.heappush(heap, (nxt.timestamp, rank, partition, i, j + 1))


@dataclass
class Server:
    name: str
    tier: str | None = None
    max_size_bytes: int | None = None
    segments: dict[str, int] = field(default_factory=dict)  # id -> size

    @property
    def used_bytes(self) -> int:
        return sum(self.segments.values())


@dataclass
class LogFold:
    """The coordinator's state from the log: timeline, live locks, placement."""

    timelines: Timelines = field(default_factory=Timelines)
    locks: dict[str, TaskLock] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)  # task -> group
    servers: dict[str, Server] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    last: LogRecord | None = None

    def apply(self, record: LogRecord) -> list[object]:
        """Fold one record (each event id once); returns the timeline's state changes, if any."""
        env = record.envelope
        key = f"{record.topic}/{env.event_id}"
        if key in self.seen:
            return []
        self.seen.add(key)
        self.last = record
        event = env.event
        changes: list[object] = []
        if record.topic == SEGMENTS:
            try:
                changes = list(self.timelines.apply(event))
            except EventValidationError:
                changes = []
            if isinstance(event, SegmentAnnounced):
                self._server(event.server).segments[str(event.segment.id)] = event.segment.size
            elif isinstance(event, SegmentUnannounced):
                self._server(event.server).segments.pop(event.segment_id, None)
        elif isinstance(event, TaskStarted):
            self.groups[event.task_id] = event.group_id
        elif isinstance(event, LockGranted):
            for lock_id in event.revoked_lock_ids:
                self.locks.pop(lock_id, None)
            self.locks[event.lock.lock_id] = event.lock
        elif isinstance(event, LockRevoked | LockReleased):
            for lock_id in event.lock_ids:
                self.locks.pop(lock_id, None)
        elif isinstance(event, ServerJoined):
            server = self._server(event.server)
            server.tier, server.max_size_bytes = event.tier, event.max_size_bytes
        elif isinstance(event, ServerLeft):
            self.servers.pop(event.server, None)
        return changes

    def _server(self, name: str) -> Server:
        return self.servers.setdefault(name, Server(name))

    def to_json(self) -> dict[str, object]:
        return {
            "position": None if self.last is None else {"record": self.last.position,
                                                        "time": format_instant(self.last.timestamp)},
            "timeline": {"states": self.timelines.states(), "visible": self.timelines.visible()},
            "locks": [{"lockId": lk.lock_id, "taskId": lk.task_id, "groupId": lk.group_id,
                       "dataSource": lk.data_source, "interval": lk.interval.iso(), "type": lk.lock_type,
                       "granularity": lk.granularity, "version": lk.version, "priority": lk.priority}
                      for lk in sorted(self.locks.values(), key=lambda lk: lk.lock_id)],
            "placement": {s.name: {"tier": s.tier, "maxSizeBytes": s.max_size_bytes, "usedBytes": s.used_bytes,
                                   "segments": sorted(s.segments)} for s in sorted(self.servers.values(),
                                                                                   key=lambda s: s.name)},
        }


def replay(bootstrap: str, topics: Topics, until: Until | None = None) -> LogFold:
    fold = LogFold()
    for record in read_log(bootstrap, topics, until):
        fold.apply(record)
    return fold


def text(fold: LogFold) -> str:
    doc = fold.to_json()
    lines = [f"as of {doc['position'] or 'the empty log'}"]
    visible = doc["timeline"]["visible"]  # type: ignore[index]
    states = doc["timeline"]["states"]  # type: ignore[index]
    lines.append(f"timeline: {len(states)} segments, visible: "
                 + (", ".join(f"{ds} {len(ids)}" for ds, ids in visible.items()) or "none"))
    for sid, state in states.items():
        lines.append(f"  {state:12s} {sid}")
    lines.append(f"locks: {len(fold.locks)} live")
    for lk in doc["locks"]:  # type: ignore[attr-defined]
        lines.append(f"  {lk['lockId']}  {lk['taskId']}  {lk['dataSource']} {lk['interval']}  {lk['type']}/"
                     f"{lk['granularity']} v{lk['version']} p{lk['priority']}")
    lines.append(f"placement: {len(fold.servers)} servers")
    for name, s in doc["placement"].items():  # type: ignore[attr-defined]
        lines.append(f"  {name} [{s['tier']}] {s['usedBytes']}/{s['maxSizeBytes']} bytes, {len(s['segments'])} "
                     "segments")
    return "\n".join(lines)


# -- audit ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    at: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule} at {self.at}: {self.detail}"


def _covered(interval: Interval, locks: list[TaskLock]) -> bool:
    return any(lk.interval.start <= interval.start and interval.end <= lk.interval.end for lk in locks)


def audit(bootstrap: str, topics: Topics, command_timeout_ms: int = 15 * 60_000) -> list[Violation]:
    """Every violation of the log's invariants, in log order."""
    fold = LogFold()
    violations: list[Violation] = []
    expected: list[str] = []  # the pure fold's visibility change ids, in order
    emitted: dict[str, SegmentVisibilityChanged] = {}
    emitted_order: list[str] = []
    want: dict[str, tuple[str, str | None, str | None]] = {}  # fold's change id -> (segment, from, to)
    pending: dict[str, LogRecord] = {}  # command event id -> the command
    answered: set[str] = set()  # command event ids
    by_command_id: dict[str, str] = {}  # commandId -> the command's event id (equal for the planner's commands)
    end = 0
    for record in read_log(bootstrap, topics):
        end = max(end, record.timestamp)
        env, event = record.envelope, record.envelope.event
        if record.topic == TIMELINE and isinstance(event, SegmentVisibilityChanged):
            if env.event_id not in emitted:
                emitted[env.event_id] = event
                emitted_order.append(env.event_id)
            continue
        if isinstance(event, SegmentsPublished):
            for seg in event.segments:
                group = fold.groups.get(event.task_id)
                mine = [lk for lk in fold.locks.values() if lk.data_source == seg.data_source
                        and (lk.task_id == event.task_id or (group is not None and lk.group_id == group))]
                if not _covered(seg.interval, mine):
                    violations.append(Violation("publish without a live lock", record.position,
                                                f"task {event.task_id} published {seg.id}"))
        if record.topic == COMMANDS and isinstance(event, LoadSegment | DropSegment):
            pending[env.event_id] = record
            by_command_id.setdefault(event.command_id, env.event_id)
        if record.topic == COMMANDS and isinstance(event, CancelSegmentLoad):
            answered.update([by_command_id.get(event.cancels, event.cancels)] if event.cancels is not None else [
                cid for cid, r in pending.items() if isinstance(r.envelope.event, LoadSegment)
                and r.envelope.event.server == event.server and str(r.envelope.event.segment.id) == event.segment_id])
        if isinstance(event, SegmentAnnounced | SegmentUnannounced | SegmentLoadRefused) and env.causation_id:
            answered.add(env.causation_id)
        if isinstance(event, SegmentLoadRefused):
            answered.add(by_command_id.get(event.command_id, event.command_id))
        changes = fold.apply(record)
        for index, change in enumerate(changes):
            change_id = derived_event_id(topics.name(SEGMENTS), record.partition, record.offset, index)
            expected.append(change_id)
            want[change_id] = (str(change.segment_id), change.old, change.new)  # type: ignore[attr-defined]
        if isinstance(event, SegmentAnnounced):
            server = fold.servers.get(event.server)
            if server is not None and server.max_size_bytes is not None and \
                    server.used_bytes > server.max_size_bytes:
                violations.append(Violation("server beyond its size", record.position,
                                            f"{server.name} holds {server.used_bytes} of {server.max_size_bytes} "
                                            "bytes"))
        if record.topic == SEGMENTS and changes:
            for ds in sorted({c.segment_id.data_source for c in changes}):  # type: ignore[attr-defined]
                pieces = sorted(piece for piece, _chunk in fold.timelines.timeline(ds).served_pieces())
                for a, b in itertools.pairwise(pieces):
                    if b.start < a.end:
                        violations.append(Violation("two visible versions at one instant", record.position,
                                                    f"{ds}: {a.iso()} and {b.iso()}"))
    if emitted:  # the agent ran: its output must be the pure fold's, change for change
        for change_id in expected:
            got = emitted.get(change_id)
            segment, old, new = want[change_id]
            if got is None:
                violations.append(Violation("timeline change missing", change_id, f"{segment}: {old} -> {new}"))
            elif (got.segment_id, got.from_state, got.to_state) != (segment, old, new):
                violations.append(Violation("timeline change differs", change_id,
                                            f"{got.segment_id}: {got.from_state} -> {got.to_state}, "
                                            f"the fold says {segment}: {old} -> {new}"))
        for change_id in emitted_order:
            if change_id not in want:
                violations.append(Violation("timeline change without cause", change_id, str(emitted[change_id])))
    for command_id, record in pending.items():
        if command_id not in answered and end - record.timestamp > command_timeout_ms:
            violations.append(Violation("command unanswered", record.position,
                                        f"{type(record.envelope.event).__name__} for "
                                        f"{getattr(record.envelope.event, 'server', '?')} "
                                        f"older than {command_timeout_ms} ms"))
    return violations


def as_json(violations: list[Violation]) -> list[Mapping[str, str]]:
    return [{"rule": v.rule, "at": v.at, "detail": v.detail} for v in violations]
