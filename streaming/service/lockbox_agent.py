"""The lockbox agent: ``lock-requests`` -> pure :class:`Lockbox` -> decisions on ``locks``, publishes on ``segments``.

It is transport-free like :mod:`streaming.service.timeline_agent`:
:meth:`LockboxAgent.process` takes a batch of raw input records (any number of
partitions, each in offset order) and a sink; the Faust worker of
:mod:`streaming.service.app` feeds it.

Per batch, in this order (its exactly-once effect, docs/architecture.md):

1. each record below the stored next offset of its partition is skipped
   (already applied); undecodable or invalid records (bad JSON, bad fields, an
   event type of another topic) are dead-lettered with the reason; events whose
   id was already applied are dropped; the others go through
   ``Lockbox.handle``;
2. every decision becomes an envelope on ``locks``, in emission order, with
   event id ``derived_event_id(topic, partition, offset, i)`` (i = the
   decision's index), ``causation_id`` = the request's event id,
   ``occurred_at`` = the request's, key = the request's key (its dataSource);
   every ``PublishAccepted`` (and every ``SegmentsImported`` that commits
   something) also becomes a ``SegmentsPublished`` on ``segments`` (keyed by
   the segments' dataSource) with index ``len(decisions) + j`` for the j-th
   such decision of that request, so every output id of one input is distinct
   and a re-emission is byte-identical; it names the decision's event id
   (``decisionId``) and is sealed with the publish key
   (:mod:`coordinator.locks.seal`): the timeline and planner take no other;
   an operator's mark (``segments_marked_unused``/``segments_marked_used``, the
   lockbox's decision on a mark request, :mod:`coordinator.locks.marks`) goes to
   ``segments`` instead of ``locks``, keyed by its dataSource and sealed too;
3. the sink is flushed (every output and dead letter acknowledged);
4. ONE RocksDB write batch commits the state (the tail's new requests, or a
   new snapshot replacing the tail; the segments the batch committed), the
   applied order, the next offsets and the applied ids.

**What is stored: the committed segments, a snapshot of the rest, a bounded tail.** Under ``data/``:

- ``seg/<dataSource>\\x00<index>`` (index: 12 digits from 0) -> the JSON record of the ``index``-th segment
  the lockbox committed in that data source, in commit order: one entry per segment, written by the batch
  that commits it. The lockbox never forgets a committed segment (``SourceState.segments`` is append-only,
  :meth:`~coordinator.locks.state.SourceState.add_segment`), so these entries only grow; which segments a
  batch committed is the fold's answer (:meth:`~coordinator.locks.state.LockboxState.segments_since` the
  counts stored so far), never re-derived from the decisions here;
- ``snapshot`` -> ``{"seq": S, "lockbox": <split snapshot>}`` (orjson): the lockbox after the first ``S``
  applied requests **without its committed segments**, as
  :func:`coordinator.locks.snapshot.split_snapshot_to_json` writes it: tasks, locks and holders, lock
  sequences, each data source's number of committed segments (``segmentCount``), allocations (the partition
  counters and the ended tasks a decision needs are derived from them), metadata, appends under replace
  locks, committed replaces and the waiting requests in arrival order, with every order a decision reads;
- ``in/<seq>`` -> the original bytes of applied request ``seq``, for
  ``S <= seq < next``: the **tail** after the snapshot;
- ``order/<seq>`` -> the event id of applied request ``seq``, for every
  ``seq < next``: the audit of what was applied in which order (never read on
  start; the request bytes themselves are in the log).

**Invariant** (after every commit): the ``seg/`` entries of each data source are its committed segments, in
order; restoring ``snapshot`` with the first ``segmentCount`` entries of each data source and handling the
tail in ``seq`` order gives the lockbox the agent had in memory when it committed (the entries past
``segmentCount`` are the tail's own commits: handling the tail commits them again, in the same order), and
``next - S < snapshot_every``. The agent snapshots at the end of
a batch as soon as the tail would reach ``snapshot_every`` requests: that batch
writes the new snapshot (``S = next``) and deletes the committed tail keys
instead of writing its own, in the same write batch as the offsets and applied
ids. So a start reads one snapshot, the committed segments, fewer than ``snapshot_every`` tail requests
and the offsets, whatever the number of requests applied (what it reads is the state's size, not the
history's), and handles at most ``snapshot_every - 1``
requests. The restore is exact (a restored lockbox decides as the
never-restarted one, waiting requests included: property-tested in
``tests/unit/locks/test_lockbox_snapshot.py``; a restore after every batch equals the live agent:
``tests/unit/locks/test_lockbox_agent_store.py``). The sequence number is global
over partitions because the task registry is shared by all data sources: the
tail is handled in the order the agent applied it, whatever the partition
interleaving was.

**What a snapshot costs.** The snapshot is written inside :meth:`stage`, on the worker's event loop, once per
``snapshot_every`` requests (``SNAPSHOT_EVERY``, or the ``SEGCOORD_LOCKBOX_SNAPSHOT_EVERY`` environment
variable). It no longer holds the segments, which are most of a lockbox (the lockbox never forgets one): a
snapshot costs the live locks, tasks, allocations and waiters only. With one task and one lock, the batch
that writes it took 1.3 ms at 10k, 30k and 80k committed segments (a 0.7 kB snapshot), as long as a batch
without one, against 21 ms, 75 ms and 425 ms (2.1, 6.3 and 16.6 MB) when the snapshot held every segment;
storing each segment costs its batch about 2 us instead (``python -m bench.lockbox_agent --snapshot-cost``,
docs/lockbox.md). The default of 5000
bounds a start to one snapshot read, the segments, and under 5000 re-handled requests.

A crash anywhere before 4 leaves the store at the previous batch: the restart
re-reads from its offsets, re-decides identically and re-emits identical
records. If ``Lockbox.handle`` itself raises on a request (a defect of the
core), the request is dead-lettered with the error and the in-memory lockbox
(which may have been part-way mutated) is rebuilt from the stored snapshot and
tail plus the requests applied earlier in the current batch. After an exception
from :meth:`process` the in-memory lockbox is ahead of the store: discard the
agent and build a new one from the store (the worker exits and is restarted).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import seal_event, sealed_publish
from coordinator.locks.snapshot import lockbox_from_split_json, split_snapshot_to_json
from events.compiled import constructor
from events.envelope import Envelope, decode
from events.ids import derived_event_id
from events.keys import partition_key
from events.locks import PublishAccepted, SegmentsImported
from events.registry import Event
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor
from events.segments import SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentsPublished
from events.topics import LOCK_REQUESTS, Topics
from streaming import credentials
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, prior_ids, seen_in
from streaming.service.state import AgentStateStore, StoreBatch

# 6: committed segments stored apart (``seg/``), the snapshot in the split form; 5: snapshot format 4 (allocators,
# pruning); 4: format 3; 3: format 2
FORMAT_VERSION = "lockbox-agent/6"
STORE_NAME = "lockbox"
SNAPSHOT_KEY = b"snapshot"
INPUT_PREFIX = b"in/"
ORDER_PREFIX = b"order/"
SEGMENT_PREFIX = b"seg/"
SNAPSHOT_EVERY = 5000
SNAPSHOT_EVERY_ENV = "SEGCOORD_LOCKBOX_SNAPSHOT_EVERY"
_SEQ_WIDTH = 16
_SEGMENT_INDEX_WIDTH = 12
_envelope = constructor(Envelope)  # Envelope's __init__ only stores its fields: the same object, built faster


def _seq_key(prefix: bytes, seq: int) -> bytes:
    return prefix + str(seq).zfill(_SEQ_WIDTH).encode()


def _input_key(seq: int) -> bytes:
    return _seq_key(INPUT_PREFIX, seq)


def _segment_key(data_source: str, index: int) -> bytes:
    """``seg/<dataSource>\\x00<index, 12 digits>``: a scan returns each data source's segments in commit order."""
    return SEGMENT_PREFIX + data_source.encode() + b"\x00" + str(index).zfill(_SEGMENT_INDEX_WIDTH).encode()


def snapshot_every_default() -> int:
    """``SEGCOORD_LOCKBOX_SNAPSHOT_EVERY`` when set (a positive integer), else :data:`SNAPSHOT_EVERY`."""
    raw = os.environ.get(SNAPSHOT_EVERY_ENV)
    if raw is None:
        return SNAPSHOT_EVERY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{SNAPSHOT_EVERY_ENV} must be a positive integer, not {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class Restored:
    """What a start read: the lockbox, the next sequence number, the snapshot's and the tail's length."""

    lockbox: Lockbox
    next_seq: int
    snapshot_seq: int
    tail: int


@dataclass(frozen=True, slots=True)
class AppliedRequest:
    """One applied request: its global sequence number and event id."""

    seq: int
    event_id: str


class LockboxAgent:
    """The lockbox, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: Sink, snapshot_every: int | None = None,
                 publish_key: bytes | None = None) -> None:
        self.store = store
        self.publish_key = publish_key if publish_key is not None else credentials.publish_key()
        self.topics = topics
        self.input_topic = topics.name(LOCK_REQUESTS)
        self.sink = sink
        # a sink that takes an envelope with its encoding (the worker's producer): a sealed publish is encoded once
        self._send_encoded: Callable[[Envelope[Event], bytes], None] | None = getattr(sink, "send_encoded", None)
        self.snapshot_every = snapshot_every if snapshot_every is not None else snapshot_every_default()
        if self.snapshot_every < 1:
            raise ValueError(f"snapshot_every must be at least 1, not {self.snapshot_every}")
        self.counters = AgentCounters()
        restored = load_lockbox(store)
        self.lockbox, self._seq, self._snapshot_seq = restored.lockbox, restored.next_seq, restored.snapshot_seq
        # the committed segments of each data source that the store holds (``seg/``), as of the last commit
        self._stored_segments = self.lockbox.segment_counts()
        self.counters_restored = restored.next_seq
        self.restored_tail = restored.tail
        self.snapshots_written = 0
        self._next = store.offsets()
        # stage()d, not yet finish()ed: the batch, its requests, the stored segment counts once it commits
        self._staged: tuple[StoreBatch, int, dict[str, int]] | None = None

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Where to resume each partition applied so far (absent partitions: from the beginning)."""
        return dict(self._next)

    def process(self, records: Sequence[InputRecord]) -> None:
        """Apply a batch: decide, emit, flush, then commit state + offsets + applied ids in one write batch."""
        self.stage(records)
        self.finish()

    def stage(self, records: Sequence[InputRecord]) -> None:
        """The first half of :meth:`process`: decide and send (steps 1 and 2), the write batch built but not
        committed. :meth:`finish` (flush, then commit) must follow before the next ``stage``; in between the
        outputs are on their way and the store is still at the previous batch, as during a flush. The worker
        calls :meth:`finish` after the other agents on its event loop processed the same fetched batch, so the
        wait for the broker's acknowledgements overlaps their work (streaming/service/delivery.py)."""
        if self._staged is not None:
            raise RuntimeError("stage() twice without finish(): the first batch was never committed")
        batch = self.store.batch()
        applied_now: list[bytes] = []
        c = self.counters
        prior = prior_ids(records, self._next, self.store)  # one store look-up for the batch's ids
        for rec in records:
            env = admit(rec, LOCK_REQUESTS, self._next, batch, c, self._dead_letter)
            if env is None or seen_in(env, batch, prior, c):
                continue
            try:
                decisions = self.lockbox.handle(env)
            except Exception as e:  # a defect of the core: do not stop the stream, do not keep a half-applied box
                self._dead_letter(rec, f"lockbox failed on {env.event_type} {env.event_id}: {type(e).__name__}: {e}")
                self.lockbox = load_lockbox(self.store).lockbox
                for raw in applied_now:
                    self.lockbox.handle(decode(raw))
                continue
            assert rec.value is not None  # decode refused tombstones
            applied_now.append(rec.value)
            batch.mark_applied(env.event_id, rec.timestamp_ms)
            batch.put(_seq_key(ORDER_PREFIX, self._seq + len(applied_now) - 1), env.event_id.encode())
            c.applied += 1
            self._emit(rec, env, decisions)
        stored = self._write_segments(batch)
        self._write_state(batch, applied_now)
        self._staged = (batch, len(applied_now), stored)

    def finish(self) -> None:
        """The second half of :meth:`process` (steps 3 and 4): flush every output of the staged batch, then commit
        its write batch. No-op when nothing is staged."""
        if self._staged is None:
            return
        batch, applied, stored = self._staged
        self.sink.flush()
        self.store.commit(batch)
        self._staged = None
        self._stored_segments.update(stored)
        self._seq += applied
        if self._seq - self._snapshot_seq >= self.snapshot_every:
            self._snapshot_seq = self._seq
            self.snapshots_written += 1
        self.counters.batches += 1

    def _write_segments(self, batch: StoreBatch) -> dict[str, int]:
        """One ``seg/`` entry per segment the batch committed, as the fold says (what each data source holds past
        the stored count; a request re-handled after a core failure is counted once: the lockbox was rebuilt
        from the store); the stored counts once the batch commits, for the data sources that grew."""
        stored: dict[str, int] = {}
        for ds, segments in self.lockbox.segments_since(self._stored_segments).items():
            first = self._stored_segments.get(ds, 0)
            for i, seg in enumerate(segments, first):
                batch.put(_segment_key(ds, i), orjson.dumps(encode_record(seg)))
            stored[ds] = first + len(segments)
        return stored

    def _write_state(self, batch: StoreBatch, applied_now: list[bytes]) -> None:
        """The batch's state writes: a new snapshot replacing the tail once the tail reaches ``snapshot_every``,
        else this batch's requests appended to the tail."""
        next_seq = self._seq + len(applied_now)
        if next_seq - self._snapshot_seq >= self.snapshot_every:
            snapshot = {"seq": next_seq, "lockbox": split_snapshot_to_json(self.lockbox)}
            batch.put(SNAPSHOT_KEY, orjson.dumps(snapshot))
            for seq in range(self._snapshot_seq, self._seq):  # the committed tail; this batch's never was written
                batch.delete(_input_key(seq))
            return
        for i, raw in enumerate(applied_now):
            batch.put(_input_key(self._seq + i), raw)

    def _emit(self, rec: InputRecord, env: Envelope[Event], decisions: list[Event]) -> None:
        decision_ids = [derived_event_id(rec.topic, rec.partition, rec.offset, i) for i in range(len(decisions))]
        for decision, out_id in zip(decisions, decision_ids, strict=True):
            out_env: Envelope[Event] = _envelope(decision, out_id, env.occurred_at, env.key, env.event_id)
            if isinstance(decision, SegmentsMarkedUnused | SegmentsMarkedUsed):  # an operator's mark: sealed
                out_env = seal_event(Envelope(decision, out_id, env.occurred_at, partition_key(decision),
                                              env.event_id), self.publish_key)
            self.sink.send(out_env)
        j = 0
        for decision, decision_id in zip(decisions, decision_ids, strict=True):
            out = publish_of(decision, decision_id)
            if out is None:
                continue
            out_id = derived_event_id(rec.topic, rec.partition, rec.offset, len(decisions) + j)
            j += 1
            unsealed = _envelope(out, out_id, env.occurred_at, out.segments[0].data_source, env.event_id)
            sealed, value = sealed_publish(unsealed, decision_id, self.publish_key)
            if self._send_encoded is not None:
                self._send_encoded(sealed, value)
            else:
                self.sink.send(sealed)
        self.counters.emitted += len(decisions) + j

    def _dead_letter(self, rec: InputRecord, reason: str) -> None:
        """As :class:`~streaming.consumer.EventConsumer` does: original bytes, position, reason; id from position."""
        self.sink.send(dead_letter_of(rec, reason))
        self.counters.dead_lettered += 1
        self.counters.last_reasons = [*self.counters.last_reasons[-9:], reason]


def publish_of(decision: Event, decision_id: str | None = None) -> SegmentsPublished | None:
    """The ``segments_published`` twin of a decision that commits segments (unsealed, naming ``decision_id``),
    or None."""
    if isinstance(decision, PublishAccepted):
        return SegmentsPublished(task_id=decision.task_id, segments=decision.segments,
                                 start_metadata=decision.start_metadata, end_metadata=decision.end_metadata,
                                 decision_id=decision_id)
    if isinstance(decision, SegmentsImported) and not decision.already_imported:
        return SegmentsPublished(task_id=f"import:{decision.request_id}", segments=decision.segments,
                                 decision_id=decision_id)
    return None


def load_lockbox(store: AgentStateStore) -> Restored:
    """The lockbox restored from the stored snapshot and tail (empty store: an empty lockbox at sequence 0).

    Reads the snapshot key, the committed segments and the tail keys: fewer than ``snapshot_every`` requests
    are handled. The snapshot counts each data source's segments; the stored ones past that count were committed
    by the tail, which commits them again, in the same order."""
    raw = store.get(SNAPSHOT_KEY)
    if raw is None:
        box, snapshot_seq = Lockbox(), 0
    else:
        obj = orjson.loads(raw)
        box, snapshot_seq = lockbox_from_split_json(obj["lockbox"], stored_segments(store)), int(obj["seq"])
    tail = store.scan(INPUT_PREFIX)
    for _, value in tail:
        box.handle(decode(value))
    next_seq = int(tail[-1][0][len(INPUT_PREFIX):]) + 1 if tail else snapshot_seq
    return Restored(box, next_seq, snapshot_seq, len(tail))


def stored_segments(store: AgentStateStore) -> dict[str, list[SegmentDescriptor]]:
    """Every stored committed segment, per data source in commit order (those the tail committed included)."""
    out: dict[str, list[SegmentDescriptor]] = {}
    for key, value in store.scan(SEGMENT_PREFIX):
        ds = key[len(SEGMENT_PREFIX):-(_SEGMENT_INDEX_WIDTH + 1)].decode()
        segments = out.setdefault(ds, [])
        if int(key[-_SEGMENT_INDEX_WIDTH:]) != len(segments):
            raise ValueError(f"lockbox store: committed segment {key!r} follows {len(segments)} of {ds!r}")
        segments.append(decode_record(SegmentDescriptor, orjson.loads(value), "segment"))
    return out


def applied_requests(store: AgentStateStore) -> list[AppliedRequest]:
    """Every applied request (sequence number, event id), in the order the agent applied them."""
    return [AppliedRequest(int(k[len(ORDER_PREFIX):]), v.decode()) for k, v in store.scan(ORDER_PREFIX)]


#: The former name (the requests' bytes are no longer kept past a snapshot; their ids and order are).
stored_requests = applied_requests


def tail_requests(store: AgentStateStore) -> list[Envelope[Event]]:
    """The applied requests after the stored snapshot, in applied order (what a start handles)."""
    return [decode(v) for _, v in store.scan(INPUT_PREFIX)]
