"""The lockbox agent: ``lock-requests`` -> pure :class:`Lockbox` -> decisions on ``locks``, publishes on ``segments``.

It is transport-free like :mod:`streaming.service.timeline_agent`:
:meth:`LockboxAgent.process` takes a batch of raw input records (any number of
partitions, each in offset order) and a sink; the Faust worker of
:mod:`streaming.service.app` feeds it.

Per batch, in this order (the exactly-once effect of DESIGN.md):

1. each record below the stored next offset of its partition is skipped
   (already applied); undecodable or invalid records (bad JSON, bad fields, an
   event type of another topic) are dead-lettered with the reason; events whose
   id was already applied are dropped; the others go through
   ``Lockbox.handle``;
2. every decision becomes an envelope on ``locks``, in emission order, with
   event id ``derived_event_id(topic, partition, offset, i)`` (i = the
   decision's index), ``causation_id`` = the request's event id,
   ``occurred_at`` = the request's, key = the request's key (its dataSource);
   every ``PublishAccepted`` also becomes a ``SegmentsPublished`` on
   ``segments`` (keyed by the segments' dataSource) with index
   ``len(decisions) + j`` for the j-th accepted publish of that request, so
   every output id of one input is distinct and a re-emission is byte-identical;
3. the sink is flushed (every output and dead letter acknowledged);
4. ONE RocksDB write batch commits the applied requests, the next offsets and
   the applied ids.

**What is stored, and why.** The state kept is the sequence of applied request
envelopes (their original bytes, under ``data/in/<global sequence number>``),
not a serialized lockbox. ``Lockbox.handle`` is a pure, deterministic function
of the request envelopes in order (no clock, explicit tie-breaks), so
re-handling the stored requests on start restores the lockbox *exactly*,
including what ``LockboxState.persistent()`` leaves out: the waiting requests
and their order, which decide later grants. A serialized form would need a
codec for every part of the state (tasks, ended tasks, locks, holders,
allocations, metadata, appends under replace locks, waiters) and would restore
exactly only as long as that codec stays complete. The price is a start-up
time linear in the number of applied requests (about 10-20 µs each); a
snapshot of the state at a stored sequence number would shorten it and is not
built yet. The sequence number is global over partitions because the task
registry is shared by all data sources: the restore must see the requests in
the order the agent applied them, whatever the partition interleaving was.

A crash anywhere before 4 leaves the store at the previous batch: the restart
re-reads from its offsets, re-decides identically and re-emits identical
records. If ``Lockbox.handle`` itself raises on a request (a defect of the
core), the request is dead-lettered with the error and the in-memory lockbox
(which may have been part-way mutated) is rebuilt from the stored requests
plus the ones of the current batch. After an exception from :meth:`process`
the in-memory lockbox is ahead of the store: discard the agent and build a new
one from the store (the worker exits and is restarted).
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.locks.lockbox import Lockbox
from events.envelope import Envelope, decode
from events.ids import derived_event_id
from events.locks import PublishAccepted
from events.registry import Event
from events.segments import SegmentsPublished
from events.topics import LOCK_REQUESTS, Topics
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, seen
from streaming.service.state import AgentStateStore

FORMAT_VERSION = "lockbox-agent/1"
STORE_NAME = "lockbox"
INPUT_PREFIX = b"in/"
_SEQ_WIDTH = 16


def _input_key(seq: int) -> bytes:
    return INPUT_PREFIX + str(seq).zfill(_SEQ_WIDTH).encode()


class LockboxAgent:
    """The lockbox, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: Sink) -> None:
        self.store = store
        self.topics = topics
        self.input_topic = topics.name(LOCK_REQUESTS)
        self.sink = sink
        self.counters = AgentCounters()
        self.lockbox, self._seq = load_lockbox(store)
        self.counters_restored = self._seq
        self._next = store.offsets()

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Where to resume each partition applied so far (absent partitions: from the beginning)."""
        return dict(self._next)

    def process(self, records: Sequence[InputRecord]) -> None:
        """Apply a batch: decide, emit, flush, then commit requests + offsets + applied ids in one write batch."""
        batch = self.store.batch()
        applied_now: list[bytes] = []
        c = self.counters
        for rec in records:
            env = admit(rec, LOCK_REQUESTS, self._next, batch, c, self._dead_letter)
            if env is None or seen(env, batch, self.store, c):
                continue
            try:
                decisions = self.lockbox.handle(env)
            except Exception as e:  # a defect of the core: do not stop the stream, do not keep a half-applied box
                self._dead_letter(rec, f"lockbox failed on {env.event_type} {env.event_id}: {type(e).__name__}: {e}")
                self.lockbox = _replay(self._stored_inputs() + applied_now)
                continue
            assert rec.value is not None  # decode refused tombstones
            applied_now.append(rec.value)
            batch.mark_applied(env.event_id)
            batch.put(_input_key(self._seq), rec.value)
            self._seq += 1
            c.applied += 1
            self._emit(rec, env, decisions)
        self.sink.flush()
        self.store.commit(batch)
        c.batches += 1

    def _emit(self, rec: InputRecord, env: Envelope[Event], decisions: list[Event]) -> None:
        for i, decision in enumerate(decisions):
            out_id = derived_event_id(rec.topic, rec.partition, rec.offset, i)
            self.sink.send(Envelope(decision, out_id, env.occurred_at, env.key, env.event_id))
        published = [d for d in decisions if isinstance(d, PublishAccepted)]
        for j, accepted in enumerate(published):
            out = SegmentsPublished(task_id=accepted.task_id, segments=accepted.segments,
                                    start_metadata=accepted.start_metadata, end_metadata=accepted.end_metadata)
            out_id = derived_event_id(rec.topic, rec.partition, rec.offset, len(decisions) + j)
            self.sink.send(Envelope(out, out_id, env.occurred_at, accepted.segments[0].data_source, env.event_id))
        self.counters.emitted += len(decisions) + len(published)

    def _stored_inputs(self) -> list[bytes]:
        return [v for _, v in self.store.scan(INPUT_PREFIX)]

    def _dead_letter(self, rec: InputRecord, reason: str) -> None:
        """As :class:`~streaming.consumer.EventConsumer` does: original bytes, position, reason; id from position."""
        self.sink.send(dead_letter_of(rec, reason))
        self.counters.dead_lettered += 1
        self.counters.last_reasons = [*self.counters.last_reasons[-9:], reason]


def _replay(inputs: Sequence[bytes]) -> Lockbox:
    """Re-handle applied requests in order (a request that made the core raise was never stored)."""
    box = Lockbox()
    for raw in inputs:
        box.handle(decode(raw))
    return box


def load_lockbox(store: AgentStateStore) -> tuple[Lockbox, int]:
    """The lockbox rebuilt from the stored requests, and the next sequence number (empty store: empty lockbox, 0)."""
    stored = store.scan(INPUT_PREFIX)
    next_seq = int(stored[-1][0][len(INPUT_PREFIX):]) + 1 if stored else 0
    return _replay([v for _, v in stored]), next_seq


def stored_requests(store: AgentStateStore) -> list[Envelope[Event]]:
    """The applied requests, in the order the agent applied them."""
    return [decode(v) for _, v in store.scan(INPUT_PREFIX)]
