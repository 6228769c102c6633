"""The client of an ingestion task: start, lock, allocate, publish, finish; each call waits for its decision.

Every call sends one request envelope on ``lock-requests`` (fresh event id and,
where the event has one, a fresh ``requestId``; key = the data source; time =
the shell's clock, which the lockbox uses for lock versions) and then reads
``locks`` until the lockbox agent's answer arrives.

Invariants:

- **No answer is missed.** The consumer of ``locks`` is positioned, before the
  first request is sent, at the end of every partition (explicit offsets read
  from the high watermarks, not a lazy "latest"), and it only moves forward:
  every decision caused by a request of this client is at or after that point.
- **Matching.** A decision answers a request when its ``causation_id`` is the
  request's event id (what the agent decides while handling it) or its
  ``requestId`` is the request's (a waiting lock granted or denied later, while
  the agent handles another task's release). Each event id is seen once:
  re-emissions after an agent crash are dropped.
- **Waiting.** ``LockWaiting`` is not an answer: the call keeps reading until
  ``LockGranted`` or ``LockDenied`` arrives, or the timeout.
- **Refusals raise.** ``LockDenied`` (for a lock or an allocation) and
  ``PublishRejected`` raise :class:`RequestRefused`, which carries the decision
  and its reason; a timeout raises :class:`TaskClientError` naming the request
  (type, request id, event id), what was awaited and the last decision seen.
  Successful calls return a :class:`Decision` (the answer and every decision
  seen for the request, in log order).
- **Revocations.** Every ``LockRevoked`` naming a lock this client was granted
  is recorded in :attr:`TaskClient.revoked`; a revoked lock makes the next
  publish under it be rejected by the lockbox (the client does not pre-judge).

``start`` answers with ``TaskRegistered`` and ``finish`` with
``TaskDeregistered``; the lockbox is silent for a second start of a registered
task and for finishing an unknown task, so those calls time out.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from events.envelope import Envelope, decode
from events.instant import parse_instant
from events.interval import Interval
from events.locks import (
    LockDenied,
    LockGranted,
    LockReleased,
    LockRevoked,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    TaskDeregistered,
    TaskLock,
    TaskRegistered,
)
from events.registry import Event
from events.schema import EventValidationError, Instant, JsonValue
from events.segment import SegmentDescriptor
from events.tasks import (
    LockGranularity,
    LockMode,
    LockReleaseRequested,
    LockRequested,
    LockType,
    PublishKind,
    PublishRequested,
    SegmentAllocationRequested,
    TaskFinished,
    TaskStarted,
    TaskStatus,
)
from events.topics import LOCKS, Topics
from streaming import credentials
from streaming.producer import EventProducer

DEFAULT_TIMEOUT_S = 30.0


class TaskClientError(RuntimeError):
    """A request got no answer in time (or the broker failed); the message names the request and what was awaited."""


class RequestRefused(TaskClientError):
    """The lockbox refused the request (``LockDenied`` or ``PublishRejected``); ``decision`` is its answer."""

    def __init__(self, message: str, decision: Envelope[Event], seen: list[Envelope[Event]]) -> None:
        super().__init__(message)
        self.decision = decision
        self.seen = seen

    @property
    def reason(self) -> str:
        return str(getattr(self.decision.event, "reason", ""))


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request and every decision seen for it (waiting, revocations, ...), in log order."""

    request: Envelope[Event]
    answer: Envelope[Event]
    seen: list[Envelope[Event]] = field(default_factory=list)

    @property
    def event(self) -> Event:
        return self.answer.event


def _time_ms() -> int:
    return int(time.time() * 1000)


def _interval(value: Interval | str) -> Interval:
    return value if isinstance(value, Interval) else Interval.parse(value)


def _instant(value: int | str) -> int:
    return value if isinstance(value, int) else parse_instant(value)


class TaskClient:
    """One ingestion task's requests to the lockbox agent; not thread-safe, one call at a time."""

    def __init__(self, bootstrap: str, topics: Topics, task_id: str, group_id: str, task_type: str,
                 data_source: str, priority: int | None = None, *, timeout: float = DEFAULT_TIMEOUT_S,
                 clock: Callable[[], int] = _time_ms) -> None:
        self.topics = topics
        self.task_id = task_id
        self.group_id = group_id
        self.task_type = task_type
        self.data_source = data_source
        self.priority = priority
        self.timeout = timeout
        self.clock = clock
        self.locks: dict[str, TaskLock] = {}  # granted to this task, by lock id
        self.revoked: dict[str, Envelope[Event]] = {}  # lock id -> the LockRevoked naming it
        self._seen: set[str] = set()
        self._producer = EventProducer(bootstrap, topics)
        self._consumer = Consumer({
            **credentials.client_config(bootstrap),
            "group.id": f"task-client-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
        })
        self._position_at_end(topics.name(LOCKS))

    def _position_at_end(self, topic: str, wait: float = 15.0) -> None:
        """Assign every partition of ``topic`` at its high watermark; retries while a new topic gets its leaders."""
        deadline = time.monotonic() + wait
        while True:
            try:
                meta = self._consumer.list_topics(topic, timeout=10)
                info = meta.topics.get(topic)
                if info is None or info.error is not None or not info.partitions:
                    raise TaskClientError(f"topic {topic} does not exist "
                                          "(run `segcoord topics create` or `segcoord run`)")
                ends = [TopicPartition(topic, p, self._consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                                     timeout=10)[1])
                        for p in sorted(info.partitions)]
                break
            except Exception as e:  # KafkaException: no leader yet, broker unreachable
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                self._consumer.close()
                if isinstance(e, TaskClientError):
                    raise
                raise TaskClientError(f"cannot read {topic}: {e}") from None
        self._consumer.assign(ends)

    # -- the calls --------------------------------------------------------------------
    def start(self, timeout: float | None = None) -> Decision:
        """Register the task (``task_started``); answered by ``TaskRegistered``."""
        event = TaskStarted(task_id=self.task_id, group_id=self.group_id, task_type=self.task_type,
                            data_source=self.data_source, priority=self.priority)
        return self._call(event, None, "TaskRegistered", (TaskRegistered,), (), timeout)

    def lock(self, interval: Interval | str, lock_type: LockType = "exclusive",
             granularity: LockGranularity = "timeChunk", *, partition_ids: Sequence[int] | None = None,
             priority: int | None = None, mode: LockMode | None = None, timeout_ms: int | None = None,
             version: str | None = None, timeout: float | None = None) -> Decision:
        """Request a lock; answered by ``LockGranted`` (returned) or ``LockDenied`` (raises); waits through
        ``LockWaiting``. ``mode="try"`` is denied at once when the lock cannot be had now; ``timeout_ms``
        bounds the lockbox-side wait (event time); ``version`` names a segment lock's version or a timeChunk
        lock's preferred one."""
        rid = uuid.uuid4().hex
        event = LockRequested(
            request_id=rid, task_id=self.task_id, group_id=self.group_id, task_type=self.task_type,
            data_source=self.data_source, interval=_interval(interval), granularity=granularity, lock_type=lock_type,
            priority=priority if priority is not None else self.priority,
            partition_ids=tuple(partition_ids) if partition_ids is not None else None,
            mode=mode, timeout_ms=timeout_ms, version=version,
        )
        return self._call(event, rid, "LockGranted or LockDenied", (LockGranted,), (LockDenied,), timeout)

    def release(self, interval: Interval | str, timeout: float | None = None) -> Decision:
        """Release the task's locks on exactly ``interval`` (Druid's LockReleaseAction); answered by
        ``LockReleased`` (returned) or ``LockDenied`` (raises: the task holds no lock there)."""
        rid = uuid.uuid4().hex
        event = LockReleaseRequested(request_id=rid, task_id=self.task_id, data_source=self.data_source,
                                     interval=_interval(interval))
        return self._call(event, rid, "LockReleased or LockDenied", (LockReleased,), (LockDenied,), timeout)

    def allocate(self, timestamp: int | str, sequence_name: str, previous_segment_id: str | None = None, *,
                 interval: Interval | str | None = None, lock_granularity: LockGranularity = "timeChunk",
                 lock_type: LockType = "exclusive", skip_lineage_check: bool = False,
                 timeout: float | None = None) -> Decision:
        """Allocate a segment id for a row at ``timestamp``; answered by ``SegmentAllocated`` or ``LockDenied``."""
        rid = uuid.uuid4().hex
        event = SegmentAllocationRequested(
            request_id=rid, task_id=self.task_id, data_source=self.data_source, timestamp=Instant(_instant(timestamp)),
            sequence_name=sequence_name, lock_granularity=lock_granularity, lock_type=lock_type,
            interval=_interval(interval) if interval is not None else None, previous_segment_id=previous_segment_id,
            skip_lineage_check=skip_lineage_check,
        )
        return self._call(event, rid, "SegmentAllocated or LockDenied", (SegmentAllocated,), (LockDenied,), timeout)

    def publish(self, segments: Sequence[SegmentDescriptor], start_metadata: JsonValue | None = None,
                end_metadata: JsonValue | None = None, *, kind: PublishKind | None = None,
                segments_to_be_overwritten: Sequence[str] | None = None, timeout: float | None = None) -> Decision:
        """Publish segments as ``kind`` (insert, the default; append; replace); answered by
        ``PublishAccepted`` (returned) or ``PublishRejected`` (raises)."""
        rid = uuid.uuid4().hex
        event = PublishRequested(request_id=rid, task_id=self.task_id, segments=tuple(segments),
                                 start_metadata=start_metadata, end_metadata=end_metadata, kind=kind,
                                 segments_to_be_overwritten=tuple(segments_to_be_overwritten)
                                 if segments_to_be_overwritten is not None else None)
        return self._call(event, rid, "PublishAccepted or PublishRejected", (PublishAccepted,), (PublishRejected,),
                          timeout)

    def finish(self, status: TaskStatus = "success", timeout: float | None = None) -> Decision:
        """End the task (its locks are released); answered by ``TaskDeregistered``."""
        event = TaskFinished(task_id=self.task_id, status=status)
        return self._call(event, None, "TaskDeregistered", (TaskDeregistered,), (), timeout)

    def close(self) -> None:
        try:
            self._producer.flush()
        finally:
            self._consumer.close()

    def __enter__(self) -> TaskClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the machinery ------------------------------------------------------------------
    def _call(self, event: Event, request_id: str | None, awaited: str, answers: tuple[type, ...],
              refusals: tuple[type, ...], timeout: float | None) -> Decision:
        request: Envelope[Event] = Envelope(event, uuid.uuid4().hex, Instant(self.clock()), self.data_source)
        label = f"{event.event_type} {request_id or ''} (event {request.event_id}) of task {self.task_id}"
        label = label.replace("  ", " ")
        try:
            self._producer.send(request)
            self._producer.flush()
        except Exception as e:
            raise TaskClientError(f"could not send {label}: {e}") from None
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        seen: list[Envelope[Event]] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                last = f"; last seen: {_describe(seen[-1])}" if seen else "; nothing seen for it"
                raise TaskClientError(f"timeout after {limit:g}s waiting for {awaited} answering {label}{last}")
            for env in self._read(min(left, 0.5)):
                if not self._answers(env, request, request_id):
                    continue
                seen.append(env)
                if isinstance(env.event, refusals):
                    raise RequestRefused(f"{type(env.event).__name__} for {label}: "
                                         f"{getattr(env.event, 'reason', '')}", env, seen)
                if isinstance(env.event, answers):
                    return Decision(request, env, seen)

    def _answers(self, env: Envelope[Event], request: Envelope[Event], request_id: str | None) -> bool:
        # A decision naming a request answers that request only: handling one request may also deny
        # another task's waiter whose timeout passed, under this request's causation.
        answered = getattr(env.event, "request_id", None)
        if request_id is not None and answered is not None:
            return bool(answered == request_id)
        return env.causation_id == request.event_id

    def _read(self, wait: float) -> list[Envelope[Event]]:
        """New decisions (each event id once), with this task's locks and revocations noted."""
        msgs = []
        msg = self._consumer.poll(wait)  # consume(n, t) would wait for n messages or the whole t
        while msg is not None:
            msgs.append(msg)
            if len(msgs) >= 1000:
                break
            msg = self._consumer.poll(0)
        out: list[Envelope[Event]] = []
        for m in msgs:
            if m.error() is not None:
                continue
            try:
                env = decode(m.value())
            except EventValidationError:
                continue  # not ours to judge: the agent writes valid events only
            if env.event_id in self._seen:
                continue
            self._seen.add(env.event_id)
            self._note(env)
            out.append(env)
        return out

    def _note(self, env: Envelope[Event]) -> None:
        event = env.event
        if isinstance(event, LockGranted) and event.task_id == self.task_id:
            self.locks[event.lock.lock_id] = event.lock
            if event.lock.revoked:
                self.revoked.setdefault(event.lock.lock_id, env)
        elif isinstance(event, LockReleased) and event.task_id == self.task_id:
            for lock_id in event.lock_ids:
                self.locks.pop(lock_id, None)
        elif isinstance(event, LockRevoked):
            for lock_id in event.lock_ids:
                if lock_id in self.locks:
                    self.revoked.setdefault(lock_id, env)


def _describe(env: Envelope[Event]) -> str:
    reason = getattr(env.event, "reason", None)
    return f"{type(env.event).__name__}" + (f" ({reason})" if reason else "")


def decision_json(env: Envelope[Event]) -> dict[str, Any]:
    """The wire JSON of a decision envelope (what ``segcoord task`` prints, one per line)."""
    return env.to_json()
