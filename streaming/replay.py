"""Replay and audit the whole log: the coordinator's state as of any point, and its invariants checked.

:func:`read_log` reads every topic to its current end (no group, nothing
committed) and merges the partitions into one sequence by broker timestamp,
keeping each partition's own order (a k-way merge of the partitions; ties by
topic, then partition). ``until`` stops the merge at a time (ms, inclusive) or
right after a given ``topic:partition:offset``.

:class:`LogFold` folds that sequence with the pure cores: the segment timeline
(``segments``), the live locks (``locks``: granted, minus revoked and
released), and the placement: a :class:`~coordinator.placement.state.PlacementState`
fed with every event of ``segments``, ``cluster`` and ``commands`` (the one fold the
planner agent keeps, so replay and the planner agree by construction: a server that
left is shown with ``joined: false`` and keeps what it announced, as the planner
keeps it; the commands in flight are the fold's queue). No placement logic lives
here; the fold's docstring defines every event's effect. An event the fold refuses
(rules or config that do not parse) is skipped, as the planner agent dead-letters it.
Replay prints it; :func:`audit` runs the same fold and checks, at every step:

- the timeline agent's output (``timeline``, deduplicated by id) is exactly the
  pure fold's, change for change, up to where the agent has read: per partition of
  ``segments``, every change the fold derives from a record at or before the last
  record the agent emitted a change for must be there (a gap is a violation); the
  changes of the records after it are the agent's lag (``AuditReport.behind``), not
  a violation: a service stopped right after the planner wrote its last unannounces
  has not read them yet, and emits them when it resumes from its stored offsets;
- the fold never serves two versions of a data source at one instant;
- every segment a ``publish_accepted`` commits lies inside a live lock of its task (or the task's group)
  when the decision is taken (imports are under no lock);
- every ``segments_published`` carries the lockbox's seal (:mod:`coordinator.locks.seal`; the fold skips
  the others, as the timeline and planner agents dead-letter them) and its ``decisionId`` is a
  ``publish_accepted`` or ``segments_imported`` on ``locks`` with the same segments;
- every ``segments_marked_used``/``segments_marked_unused`` carries the coordinator's seal (the fold
  skips the others: ``mark not sealed by the coordinator``);
- no server holds more than its ``maxSizeBytes`` (what it announced, by the fold);
- every LoadSegment/DropSegment left the fold's queue by the end of the log or is
  younger than the command timeout then (broker time of the command's record).
  The fold settles a command by an announce, unannounce or refusal naming it (causation
  id; a refusal also the load its ``commandId`` names, and a refused move's drop half),
  by an announce/unannounce of the same server and segment, by a ``CancelSegmentLoad``
  (the load it ``cancels``, else the server's queued loads of the segment: the
  coordinator withdrew it, nothing more is owed; the cancel itself needs no answer), or
  by its server leaving (a removed server's queue vanishes with it). A drop of a segment the
  fold never knew, or a half of a refused move read after the refusal, never enters the queue.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from coordinator.locks.seal import use_refusal
from coordinator.placement.state import PlacementState
from coordinator.timeline.timelines import Timelines
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope, decode
from events.ids import derived_event_id
from events.instant import format_instant
from events.interval import Interval
from events.locks import LockGranted, LockReleased, LockRevoked, PublishAccepted, SegmentsImported, TaskLock
from events.registry import Event
from events.schema import EventValidationError
from events.segment import SegmentDescriptor, SegmentId
from events.segments import SegmentAnnounced, SegmentsPublished
from events.tasks import TaskStarted
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE, Topics
from events.visibility import SegmentVisibilityChanged
from streaming import credentials
from streaming.offsets import watermarks

ORDER = (LOCK_REQUESTS, LOCKS, SEGMENTS, CLUSTER, COMMANDS, TIMELINE)
PLACEMENT_TOPICS = (SEGMENTS, CLUSTER, COMMANDS)  # what the planner agent folds


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


LEADERLESS = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})  # a missing topic fails


def _watermarks(consumer: Consumer, name: str, partition: int) -> tuple[int, int]:
    """A partition's low and high offsets; a topic created a moment ago may have no leader yet: wait for one."""
    try:
        return watermarks(consumer, TopicPartition(name, partition), electing=LEADERLESS)
    except KafkaException as e:
        raise ReplayError(f"cannot read the offsets of {name}[{partition}]: {e}") from None


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
            low, high = _watermarks(consumer, name, p)
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
    consumer = Consumer({**credentials.client_config(bootstrap),
                         "group.id": "segcoord-replay", "enable.auto.commit": False,
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


@dataclass(frozen=True, slots=True)
class JoinedServer:
    """A server in the cluster now, as the placement fold has it."""

    name: str
    tier: str
    segments: frozenset[str]
    used_bytes: int


@dataclass
class LogFold:
    """The coordinator's state from the log: timeline, live locks, placement (the placement fold's state)."""

    timelines: Timelines = field(default_factory=Timelines)
    locks: dict[str, TaskLock] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)  # task -> group
    placement: PlacementState = field(default_factory=PlacementState)
    seen: set[str] = field(default_factory=set)
    last: LogRecord | None = None
    publish_key: bytes | None = None  # None: the deployment's (streaming.credentials.publish_key)
    refused: list[tuple[LogRecord, str]] = field(default_factory=list)  # publishes and marks not sealed

    def __post_init__(self) -> None:
        if self.publish_key is None:
            self.publish_key = credentials.publish_key()

    def apply(self, record: LogRecord) -> list[object]:
        """Fold one record; returns the timeline's state changes, if any.

        Each event id counts once, as the agents count it: the placement fold sees every copy of a command
        (it settles or ignores repeats itself, as the planner agent's does) and one copy of any other input
        (``segments`` and ``cluster`` share one id space, as in the planner agent's applied ids)."""
        env = record.envelope
        key = f"input/{env.event_id}" if record.topic in (SEGMENTS, CLUSTER) else f"{record.topic}/{env.event_id}"
        first = key not in self.seen
        self.seen.add(key)
        event = env.event
        if first and record.topic == SEGMENTS:
            assert self.publish_key is not None
            reason = use_refusal(env, self.publish_key)
            if reason is not None:  # dead-lettered by the timeline and planner agents: changes nothing
                self.refused.append((record, reason))
                return []
        if record.topic == COMMANDS or (first and record.topic in PLACEMENT_TOPICS):
            with contextlib.suppress(EventValidationError, ValueError):  # the planner dead-letters what it refuses
                self.placement.evolve(env)
            self.placement.dirty.clear()  # nothing is stored: the fold's record of what to write is not needed
        if not first:
            return []
        self.last = record
        changes: list[object] = []
        if record.topic == SEGMENTS:
            try:
                changes = list(self.timelines.apply(event))
            except EventValidationError:
                changes = []
        elif isinstance(event, TaskStarted):
            self.groups[event.task_id] = event.group_id
        elif isinstance(event, LockGranted):
            for lock_id in event.revoked_lock_ids:
                self.locks.pop(lock_id, None)
            self.locks[event.lock.lock_id] = event.lock
        elif isinstance(event, LockRevoked | LockReleased):
            for lock_id in event.lock_ids:
                self.locks.pop(lock_id, None)
        return changes

    # -- the placement, as the fold says ----------------------------------------------------
    @property
    def servers(self) -> dict[str, JoinedServer]:
        """The servers in the cluster now (joined and not left), with what each announced: the watch's view
        (a server that left keeps its holdings in the fold, as in the planner, but is not listed here)."""
        st = self.placement
        out = {}
        for name, facts in st.servers.items():
            if facts.joined:
                out[name] = JoinedServer(name, facts.tier, frozenset(str(s) for s in st.held.get(name, ())),
                                         self.used_bytes(name))
        return out

    @property
    def server_names(self) -> list[str]:
        """Servers the fold knows (joined once) or that announced something without joining, by name."""
        st = self.placement
        return sorted(set(st.servers) | {n for n, held in st.held.items() if held})

    def held(self, name: str) -> list[SegmentId]:
        return sorted(self.placement.held.get(name, ()), key=str)

    def used_bytes(self, name: str) -> int:
        """Bytes of what the server announced (the segment's published size when known)."""
        segments = self.placement.segments
        return sum(segments[s].size for s in self.placement.held.get(name, ()) if s in segments)

    def to_json(self) -> dict[str, object]:
        st = self.placement
        in_flight: dict[str, list[dict[str, object]]] = {}
        for cid, item in sorted(st.queue.items()):
            in_flight.setdefault(item.server, []).append(
                {"commandId": cid, "action": item.action, "segment": str(item.segment), "purpose": item.purpose,
                 "moveId": item.move_id, "sentAt": format_instant(item.sent_at)})
        placement: dict[str, object] = {}
        for name in self.server_names:
            facts = st.servers.get(name)
            placement[name] = {
                "tier": None if facts is None else facts.tier,
                "maxSizeBytes": None if facts is None else facts.max_size_bytes,
                "joined": facts is not None and facts.joined,
                "decommissioning": facts is not None and (facts.decommissioning or name in st.config_decommissioning),
                "usedBytes": self.used_bytes(name),
                "segments": [str(s) for s in self.held(name)],
                "inFlight": in_flight.get(name, []),
            }
        return {
            "position": None if self.last is None else {"record": self.last.position,
                                                        "time": format_instant(self.last.timestamp)},
            "timeline": {"states": self.timelines.states(), "visible": self.timelines.visible()},
            "locks": [{"lockId": lk.lock_id, "taskId": lk.task_id, "groupId": lk.group_id,
                       "dataSource": lk.data_source, "interval": lk.interval.iso(), "type": lk.lock_type,
                       "granularity": lk.granularity, "version": lk.version, "priority": lk.priority}
                      for lk in sorted(self.locks.values(), key=lambda lk: lk.lock_id)],
            "placement": placement,
            "usedSegments": len(st.used),
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
    lines.append(f"placement: {len(fold.server_names)} servers, {len(fold.placement.queue)} commands in flight, "
                 f"{doc['usedSegments']} used segments")
    for name, s in doc["placement"].items():  # type: ignore[attr-defined]
        state = "" if s["joined"] else " (left)"
        state += " (decommissioning)" if s["decommissioning"] else ""
        lines.append(f"  {name} [{s['tier']}]{state} {s['usedBytes']}/{s['maxSizeBytes']} bytes, "
                     f"{len(s['segments'])} segments, {len(s['inFlight'])} commands in flight")
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
    return audit_records(read_log(bootstrap, topics), topics, command_timeout_ms).violations


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What :func:`audit_records` found: the violations, and the fold's changes the timeline agent has not
    emitted yet because it has not read their input (ids, after its last emitted change on each partition)."""

    violations: list[Violation]
    behind: list[str]


def audit_records(records: Iterable[LogRecord], topics: Topics, command_timeout_ms: int = 15 * 60_000,
                  publish_key: bytes | None = None) -> AuditReport:
    """:func:`audit` over records already read (merged as :func:`read_log` merges them)."""
    fold = LogFold(publish_key=publish_key)
    violations: list[Violation] = []
    expected: list[str] = []  # the pure fold's visibility change ids, in order
    origin: dict[str, tuple[int, int]] = {}  # fold's change id -> (partition, offset) of its input on segments
    emitted: dict[str, SegmentVisibilityChanged] = {}
    emitted_order: list[str] = []
    want: dict[str, tuple[str, str | None, str | None]] = {}  # fold's change id -> (segment, from, to)
    sent: dict[str, LogRecord] = {}  # command event id -> where it was read (whether it is answered: the fold's)
    decisions: dict[str, tuple[SegmentDescriptor, ...]] = {}  # publish_accepted/segments_imported id -> segments
    sealed: list[LogRecord] = []
    end = 0
    for record in records:
        end = max(end, record.timestamp)
        env, event = record.envelope, record.envelope.event
        if isinstance(event, PublishAccepted | SegmentsImported):
            decisions.setdefault(env.event_id, event.segments)
        refused_before = len(fold.refused)
        if record.topic == TIMELINE and isinstance(event, SegmentVisibilityChanged):
            if env.event_id not in emitted:
                emitted[env.event_id] = event
                emitted_order.append(env.event_id)
            continue
        if record.topic == COMMANDS and isinstance(event, LoadSegment | DropSegment):
            sent.setdefault(env.event_id, record)
        first_decision = f"{record.topic}/{env.event_id}" not in fold.seen  # a re-emitted copy is checked once
        changes = fold.apply(record)
        if isinstance(event, PublishAccepted) and not event.already_published and first_decision:
            # the lockbox's decision, checked against the locks live when it was taken (the twin on segments
            # may be read after a later release of the same batch: another topic, the same millisecond)
            group = fold.groups.get(event.task_id)
            mine = [lk for lk in fold.locks.values() if lk.data_source == event.segments[0].data_source
                    and (lk.task_id == event.task_id or (group is not None and lk.group_id == group))]
            for seg in event.segments:
                if not _covered(seg.interval, mine):
                    violations.append(Violation("publish without a live lock", record.position,
                                                f"task {event.task_id} published {seg.id}"))
        for refused, reason in fold.refused[refused_before:]:
            kind = ("publish not accepted by the lockbox" if isinstance(refused.envelope.event, SegmentsPublished)
                    else "mark not sealed by the coordinator")
            violations.append(Violation(kind, refused.position, reason))
        if isinstance(event, SegmentsPublished) and len(fold.refused) == refused_before:
            sealed.append(record)
        for index, change in enumerate(changes):
            change_id = derived_event_id(topics.name(SEGMENTS), record.partition, record.offset, index)
            expected.append(change_id)
            origin[change_id] = (record.partition, record.offset)
            want[change_id] = (str(change.segment_id), change.old, change.new)  # type: ignore[attr-defined]
        if isinstance(event, SegmentAnnounced):
            facts = fold.placement.servers.get(event.server)
            used = fold.used_bytes(event.server)
            if facts is not None and used > facts.max_size_bytes:
                violations.append(Violation("server beyond its size", record.position,
                                            f"{event.server} holds {used} of {facts.max_size_bytes} bytes"))
        if record.topic == SEGMENTS and changes:
            for ds in sorted({c.segment_id.data_source for c in changes}):  # type: ignore[attr-defined]
                pieces = sorted(piece for piece, _chunk in fold.timelines.timeline(ds).served_pieces())
                for a, b in itertools.pairwise(pieces):
                    if b.start < a.end:
                        violations.append(Violation("two visible versions at one instant", record.position,
                                                    f"{ds}: {a.iso()} and {b.iso()}"))
    behind: list[str] = []
    if emitted:  # the agent ran: its output must be the pure fold's, change for change, as far as it has read
        read_to: dict[int, int] = {}  # segments partition -> offset of the last input the agent emitted for
        for change_id in expected:
            if change_id in emitted:
                partition, offset = origin[change_id]
                read_to[partition] = max(offset, read_to.get(partition, -1))
        for change_id in expected:
            got = emitted.get(change_id)
            segment, old, new = want[change_id]
            partition, offset = origin[change_id]
            if got is None and offset > read_to.get(partition, -1):
                behind.append(change_id)  # not read by the agent yet (it resumes from its stored offsets)
            elif got is None:
                violations.append(Violation("timeline change missing", change_id, f"{segment}: {old} -> {new}"))
            elif (got.segment_id, got.from_state, got.to_state) != (segment, old, new):
                violations.append(Violation("timeline change differs", change_id,
                                            f"{got.segment_id}: {got.from_state} -> {got.to_state}, "
                                            f"the fold says {segment}: {old} -> {new}"))
        for change_id in emitted_order:
            if change_id not in want:
                violations.append(Violation("timeline change without cause", change_id, str(emitted[change_id])))
    for record in sealed:  # the seal's other half: its decision is on ``locks``, with the same segments
        published = record.envelope.event
        assert isinstance(published, SegmentsPublished) and published.decision_id is not None
        if decisions.get(published.decision_id) != published.segments:
            violations.append(Violation("publish without its lockbox decision", record.position,
                                        f"decision {published.decision_id} is not on locks with these segments"))
    for command_id in sorted(fold.placement.queue, key=lambda cid: _position_key(sent.get(cid))):
        record = sent.get(command_id)
        if record is not None and end - record.timestamp > command_timeout_ms:
            violations.append(Violation("command unanswered", record.position,
                                        f"{type(record.envelope.event).__name__} for "
                                        f"{getattr(record.envelope.event, 'server', '?')} "
                                        f"older than {command_timeout_ms} ms"))
    return AuditReport(violations, behind)


def _position_key(record: LogRecord | None) -> tuple[int, str, int, int]:
    return (0, "", 0, 0) if record is None else (record.timestamp, record.topic, record.partition, record.offset)


def as_json(violations: list[Violation]) -> list[Mapping[str, str]]:
    return [{"rule": v.rule, "at": v.at, "detail": v.detail} for v in violations]
