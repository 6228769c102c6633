"""What every agent does first with an input record, in one place: position, decode, topic, duplicates.

**Invariants.** A record below the agent's stored next offset of its partition
was applied before a restart and is skipped. Every other record moves that
offset (in memory and in the batch being built), whatever becomes of it. An
undecodable record, or an event that belongs on another topic, goes to the
agent's ``reject`` (dead letter) with the reason. :func:`seen` tells an event
already applied (in this batch or a committed one) by its id.

**Decoded once.** A record is decoded at most once, whatever number of agents
read it (``segments`` has two): :meth:`InputRecord.decoded` keeps the envelope
or the validation error on the record, and the worker hands the same record
objects to every agent of the topic. Envelopes are immutable, so sharing one
between agents is safe; two threads racing on a first decode both compute the
same result. So is the seal check (:meth:`InputRecord.refusal`): the timeline and the upsert agents ask it
of the same ``segments`` records, and it is a pure function of the envelope and the key.
Across the consumers of one process (the worker's and the planner
feed's) and from a producer of the process to its readers, the envelope is shared
through :mod:`streaming.service.shared_envelopes` (exact: keyed by the value bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.locks.seal import Sealed, use_refusal
from events.deadletter import DeadLettered
from events.envelope import Envelope, decode
from events.registry import Event
from events.schema import EventValidationError
from streaming.consumer import dead_letter_envelope
from streaming.service.shared_envelopes import SHARED
from streaming.service.state import AgentStateStore, StoreBatch


@dataclass(slots=True)
class InputRecord:
    """One message as read from Kafka, before decoding.

    Read-only by convention: no code assigns its fields after it is built (only :meth:`decoded` and
    :meth:`refusal` fill their caches), and the agents of a topic share one object per record. It is not a
    frozen dataclass because a frozen one's ``__init__`` sets each of its nine fields through
    ``object.__setattr__``: 3-4 us per record against 0.8 us, and the worker builds one per record per
    consumer (``segments`` twice on the leader, plus every ``timeline`` record it reads back): about 5% of the
    worker's CPU in ``bench.service --only timeline``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0
    _decoded: Envelope[Event] | EventValidationError | None = field(default=None, compare=False, repr=False)
    _refusal_key: bytes | None = field(default=None, compare=False, repr=False)  # the key _refusal was checked under
    _refusal: str | None = field(default=None, compare=False, repr=False)

    def decoded(self) -> Envelope[Event]:
        """The record's envelope, decoded on the first call only; raises EventValidationError (every call)."""
        got = self._decoded
        if got is None:
            if SHARED.readers:  # (unconfigured, the process shares nothing: no call, no position built)
                position = (self.partition, self.offset)
                got = SHARED.taken(self.topic, self.value, position)
                if got is None:
                    try:
                        got = decode(self.value)
                        SHARED.decoded(self.topic, self.value, got, position)
                    except EventValidationError as e:
                        got = e
            else:
                try:
                    got = decode(self.value)
                except EventValidationError as e:
                    got = e
            self._decoded = got
        if isinstance(got, EventValidationError):
            raise got
        return got

    def refusal(self, env: Envelope[Event], key: bytes) -> str | None:
        """:func:`~coordinator.locks.seal.use_refusal` of ``env`` (this record's decoded envelope) under ``key``.
        The seal of a sealed event (a publish or a mark) is checked on the first call for that key only: its HMAC
        was a tenth of the timeline agent, and the upsert agent checked the same records again. Any other event
        is refused by no one, as ``use_refusal`` says, without a look at the record."""
        if not isinstance(env.event, Sealed):
            return None
        if self._refusal_key == key:
            return self._refusal
        refused = use_refusal(env, key, self.value if type(self.value) is bytes else None)
        self._refusal = refused  # no tuple: one allocation less per record
        self._refusal_key = key
        return refused


class Sink(Protocol):
    """Where envelopes go (an :class:`~streaming.producer.EventProducer`); ``flush`` raises on any failure."""

    def send(self, envelope: Envelope[Event]) -> None: ...

    def flush(self, timeout: float = 30.0) -> None: ...


@dataclass(slots=True)
class AgentCounters:
    applied: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    emitted: int = 0
    batches: int = 0
    last_reasons: list[str] = field(default_factory=list)


def dead_letter_of(rec: InputRecord, reason: str) -> Envelope[DeadLettered]:
    """The dead letter of a bad input record (as :class:`~streaming.consumer.EventConsumer` writes them)."""
    return dead_letter_envelope(rec.topic, rec.partition, rec.offset, rec.key, rec.value, rec.timestamp_ms, reason)


def admit(rec: InputRecord, expected_topic: str, next_offsets: dict[tuple[str, int], int], batch: StoreBatch,
          counters: AgentCounters, reject: Callable[[InputRecord, str], None]) -> Envelope[Event] | None:
    """The record's envelope, or None when it was applied before a restart or is rejected."""
    tp = (rec.topic, rec.partition)
    if rec.offset < next_offsets.get(tp, -1):
        counters.skipped += 1
        return None
    next_offsets[tp] = rec.offset + 1
    batch.set_offset(rec.topic, rec.partition, rec.offset + 1)
    try:
        env = rec.decoded()
        if env.event.event_topic != expected_topic:
            raise EventValidationError("event_type", env.event_type,
                                       f"belongs on topic {env.event.event_topic!r}, not {expected_topic!r}")
    except EventValidationError as e:
        reject(rec, str(e))
        return None
    return env


def prior_ids(records: Sequence[InputRecord], next_offsets: dict[tuple[str, int], int],
              store: AgentStateStore) -> set[str]:
    """The ids of the batch's decodable records (those :func:`admit` will not skip by offset) that a committed
    batch applied: one store look-up for the batch, for :func:`seen_in`."""
    ids = []
    append, position = ids.append, next_offsets.get
    for rec in records:  # try/except, not contextlib.suppress: a context manager per record cost 6% of the agent
        if rec.offset >= position((rec.topic, rec.partition), -1):
            try:
                event_id = rec.decoded().event_id
            except EventValidationError:
                continue
            append(event_id)
    return store.applied_among(ids)


def seen_in(env: Envelope[Event], batch: StoreBatch, prior: set[str], counters: AgentCounters) -> bool:
    """:func:`seen`, with the store's answer for the whole batch looked up before (:func:`prior_ids`)."""
    if env.event_id in prior or batch.applied(env.event_id):
        counters.duplicates += 1
        return True
    return False


def seen(env: Envelope[Event], batch: StoreBatch, store: AgentStateStore, counters: AgentCounters) -> bool:
    """Whether the event was applied already (its id is in this batch or the store); counts it if so."""
    if batch.applied(env.event_id) or store.applied(env.event_id):
        counters.duplicates += 1
        return True
    return False
