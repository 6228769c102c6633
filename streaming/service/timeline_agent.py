"""The timeline agent: ``segments`` -> pure :class:`Timelines` fold -> ``SegmentVisibilityChanged`` on ``timeline``.

It is transport-free: :meth:`TimelineAgent.process` takes a batch of raw input
records (any number of partitions, each in offset order) and a sink; the Faust
worker of :mod:`streaming.service.app` feeds it.

Per batch, in this order (its exactly-once effect, docs/architecture.md):

1. each record below the stored next offset of its partition is skipped
   (already applied); undecodable or invalid records (bad JSON, bad fields, an
   event type of another topic, a segment id text naming no segment, a
   ``segments_published`` the lockbox did not seal: :mod:`coordinator.locks.seal`)
   are dead-lettered with the reason; events whose id was already applied are
   dropped; the others are folded through ``Timelines.apply``;
2. every state change becomes a ``SegmentVisibilityChanged`` envelope, in
   order, keyed by dataSource, with ``causation_id`` = the input event's id,
   ``occurred_at`` = the input's, and event id =
   ``derived_event_id(topic, partition, offset, index)``: a re-emission after a
   crash is byte-identical and consumers drop it by id;
3. the sink is flushed (every output and dead letter acknowledged);
4. ONE RocksDB write batch commits the touched facts and states, the next
   offsets and the applied ids.

A crash anywhere before 4 leaves the store at the previous batch: the restart
re-reads from its offsets and re-emits identical records. After an exception
from :meth:`process` the in-memory fold is ahead of the store: discard the
agent and build a new one from the store (the worker exits and is restarted).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from coordinator.locks.seal import use_refusal
from coordinator.timeline.timelines import Timelines
from events.envelope import Envelope
from events.ids import derived_event_id
from events.instant import format_instant
from events.schema import EventValidationError, Instant
from events.segment import SegmentId
from events.topics import SEGMENTS, TIMELINE, Topics
from events.visibility import SegmentState, SegmentVisibilityChanged
from streaming import credentials
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, prior_ids, seen_in
from streaming.service.state import AgentStateStore, StoreBatch
from streaming.service.timeline_facts import (
    ID_PREFIX,
    SEG_PREFIX,
    STATE_PREFIX,
    SegmentFacts,
    facts_of,
    id_key,
    parse_id_key,
    restore,
    touched_ids,
    unrecorded_ids,
)

FORMAT_VERSION = "timeline-agent/2"  # 2: only used segments take part (an announce alone is never served)
STORE_NAME = "timeline"


class TimelineAgent:
    """The fold, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: Sink, publish_key: bytes | None = None) -> None:
        self.store = store
        self.publish_key = publish_key if publish_key is not None else credentials.publish_key()
        self.topics = topics
        self.input_topic = topics.name(SEGMENTS)
        self.output_topic = topics.name(TIMELINE)
        self.sink = sink
        self.counters = AgentCounters()
        self.timelines = load_timelines(store)
        self._next = store.offsets()

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Where to resume each partition applied so far (absent partitions: from the beginning)."""
        return dict(self._next)

    def process(self, records: Sequence[InputRecord]) -> None:
        """Apply a batch: fold, emit, flush, then commit state + offsets + applied ids in one write batch."""
        batch = self.store.batch()
        touched: dict[SegmentId, None] = {}
        states: dict[SegmentId, SegmentState] = {}
        c = self.counters
        prior = prior_ids(records, self._next, self.store)
        send_raw = getattr(self.sink, "send_raw", None)  # a producer: outputs go as bytes (change_value)
        for rec in records:
            env = admit(rec, SEGMENTS, self._next, batch, c, self._dead_letter)
            if env is None or seen_in(env, batch, prior, c):
                continue
            refused = use_refusal(env, self.publish_key)  # only the lockbox's publishes (docs/security.md)
            if refused is not None:
                self._dead_letter(rec, refused)
                continue
            learned = unrecorded_ids(self.timelines, env.event)  # the id texts whose stored entry changes
            try:
                sids = touched_ids(self.timelines, env.event)
                changes = self.timelines.apply(env.event)
            except EventValidationError as e:
                self._dead_letter(rec, str(e))
                continue
            batch.mark_applied(env.event_id, rec.timestamp_ms)
            c.applied += 1
            for sid in learned:
                batch.put(ID_PREFIX + str(sid).encode(), id_key(sid))
            touched.update(dict.fromkeys(sids))
            for i, change in enumerate(changes):
                sid = change.segment_id
                states[sid] = change.new
                touched[sid] = None
                event_id = derived_event_id(rec.topic, rec.partition, rec.offset, i)
                if send_raw is not None:
                    send_raw(self.output_topic, sid.data_source.encode(),
                             change_value(sid, change.old, change.new, event_id, env.occurred_at, env.event_id))
                else:
                    out = SegmentVisibilityChanged(segment_id=str(sid), data_source=sid.data_source,
                                                   interval=sid.interval, from_state=change.old, to_state=change.new)
                    self.sink.send(Envelope(out, event_id, env.occurred_at, sid.data_source, env.event_id))
                c.emitted += 1
        self._stage_facts(batch, touched, states)
        self.sink.flush()
        self.store.commit(batch)
        c.batches += 1

    def _stage_facts(self, batch: StoreBatch, touched: dict[SegmentId, None],
                     states: dict[SegmentId, SegmentState]) -> None:
        for sid in touched:
            key = id_key(sid)
            facts = facts_of(self.timelines, sid)
            if facts is None:
                batch.delete(SEG_PREFIX + key)
            else:
                batch.put(SEG_PREFIX + key, facts.to_bytes())
        for sid, state in states.items():
            if state == "absent":
                batch.delete(STATE_PREFIX + id_key(sid))
            else:
                batch.put(STATE_PREFIX + id_key(sid), state.encode())

    def _dead_letter(self, rec: InputRecord, reason: str) -> None:
        """As :class:`~streaming.consumer.EventConsumer` does: original bytes, position, reason; id from position."""
        self.sink.send(dead_letter_of(rec, reason))
        self.counters.dead_lettered += 1
        self.counters.last_reasons = [*self.counters.last_reasons[-9:], reason]


_CHANGE_VERSION = SegmentVisibilityChanged.schema_version


def change_value(sid: SegmentId, old: SegmentState, new: SegmentState, event_id: str, occurred_at: Instant,
                 cause: str) -> bytes:
    """The message value of the ``SegmentVisibilityChanged`` envelope the agent emits, built straight from the
    change: the same bytes as ``encode(Envelope(SegmentVisibilityChanged(...), event_id, occurred_at,
    sid.data_source, cause))`` (tested), at half the cost (no event or envelope objects on the way)."""
    return orjson.dumps({
        "event_type": "segment_visibility_changed", "schema_version": _CHANGE_VERSION, "event_id": event_id,
        "occurred_at": format_instant(occurred_at), "key": sid.data_source, "causation_id": cause,
        "payload": {"segmentId": str(sid), "dataSource": sid.data_source, "interval": sid.interval.iso(),
                    "from": old, "to": new},
    })


def load_timelines(store: AgentStateStore) -> Timelines:
    """Rebuild the fold from the stored facts (empty store: empty timelines)."""
    facts = [(parse_id_key(k[len(SEG_PREFIX):]), SegmentFacts.from_bytes(v)) for k, v in store.scan(SEG_PREFIX)]
    known = [(k[len(ID_PREFIX):].decode(), parse_id_key(v)) for k, v in store.scan(ID_PREFIX)]
    return restore(facts, known)


def stored_states(store: AgentStateStore) -> dict[SegmentId, SegmentState]:
    return {parse_id_key(k[len(STATE_PREFIX):]): v.decode() for k, v in store.scan(STATE_PREFIX)}  # type: ignore[misc]


def stored_facts(store: AgentStateStore) -> dict[SegmentId, SegmentFacts]:
    return {parse_id_key(k[len(SEG_PREFIX):]): SegmentFacts.from_bytes(v) for k, v in store.scan(SEG_PREFIX)}
