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

**Per-partition snapshots** (docs/workers.md). The store remembers the input
partition of every data source (``part/<dataSource>``: ``segments`` is keyed by
data source and the fold is per data source, so a partition's state is that of
its data sources). With :meth:`enable_snapshots`, after a batch's commit (its
outputs are acknowledged by then) :meth:`write_snapshots` writes each partition
the policy says is due to ``snapshots`` (:mod:`coordinator.timeline.snapshot`):
its state after every record below its stored next offset, plus the ids of the
last events applied in it. :meth:`adopt` installs such a snapshot when it is
ahead of the store for its partition: the partition's data sources are replaced
by the snapshot's, its next offset becomes the snapshot's and its recent ids
count as applied, in ONE write batch. The worker then folds only the tail from
that offset; the tail's outputs carry the ids and bytes the previous owner's had
(position-derived ids, the same fold), so consumers drop what was sent already.

A snapshot is built from the store, not from the fold: :func:`build_snapshot`
reads a :class:`~streaming.service.state.StoreView` taken right after the
commit it covers (the store holds exactly the fold's facts and id texts of
that commit), one prefix scan per data source. With an executor
(``enable_snapshots(..., executor=...)``, as ``segcoord run`` does) the
reading, encoding and compressing run there, off the worker's event loop (a
partition of 23k segments took about 140 ms of it), and a later
:meth:`write_snapshots` sends the finished ones: the event loop only takes the
view and the partition's recent ids. At most one snapshot per partition is
being built at a time; one whose partition was adopted meanwhile is dropped.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor, Future
from hashlib import blake2b
from operator import itemgetter
from typing import get_args

import orjson

from coordinator.locks.seal import Sealed
from coordinator.timeline.facts import all_facts, count_known, known_ids
from coordinator.timeline.snapshot import (
    PartitionSnapshot,
    encode_snapshot,
    restore_partition,
    snapshot_key,
    take_snapshot,
)
from coordinator.timeline.timelines import Timelines
from events.envelope import Envelope
from events.instant import format_instant
from events.schema import EventValidationError, Instant
from events.segment import SegmentId
from events.segments import SegmentAnnounced, SegmentUnannounced
from events.topics import SEGMENTS, SNAPSHOTS, TIMELINE, Topics
from events.visibility import SegmentState, SegmentVisibilityChanged
from streaming import credentials
from streaming.service import stage_trace
from streaming.service.intake import AgentCounters, InputRecord, Sink, dead_letter_of, prior_ids
from streaming.service.state import DATA_PREFIX, AgentStateStore, StoreBatch, StoreView
from streaming.service.timeline_facts import (
    ID_PREFIX,
    SEG_PREFIX,
    STATE_PREFIX,
    FactsEncoder,
    SegmentFacts,
    id_entry_key,
    id_key,
    id_text_of,
    ids_of,
    parse_id_key,
    restore,
    source_prefix,
)
from streaming.service.timeline_snapshots import MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_SEGMENTS, SnapshotPolicy

# 2: part/<dataSource> (per-partition snapshots); 3: only used segments take part; 4: id/ entries by data source
FORMAT_VERSION = "timeline-agent/4"
STORE_NAME = "timeline"
PART_PREFIX = b"part/"
ADOPTED_PREFIX = b"adopted/"  # adopted/<partition> -> {"offset", "writer", "read"}: the snapshot, records read since

log = logging.getLogger("segcoord.service")


class RawSink(Sink):
    """A sink that also takes raw records (an :class:`~streaming.producer.EventProducer`): the snapshots."""

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None: ...


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
        self._facts = FactsEncoder()  # the stored bytes of touched segments' facts (descriptors' JSON remembered)
        self._values = ChangeValues()  # the outputs' bytes (segments' id texts and intervals remembered)
        self._next = store.offsets()
        self.partition_of: dict[str, int] = {k[len(PART_PREFIX):].decode(): int(v)
                                             for k, v in store.scan(PART_PREFIX)}
        self.snapshot_policy: SnapshotPolicy | None = None
        self._snapshot_sink: RawSink | None = None
        self.writer = ""
        self.clock: Callable[[], float] = time.monotonic
        self._recent: dict[int, deque[str]] = {}  # partition -> ids of the last events applied in it
        self._since: dict[int, int] = {}  # partition -> events applied since its last snapshot
        self._last_snapshot: dict[int, float] = {}  # partition -> clock of its last snapshot (or first apply)
        self.snapshots_written = 0
        # partition -> the segments it held when its snapshot came out over MAX_SNAPSHOT_BYTES (see write_snapshots)
        self._oversized: dict[int, int] = {}
        self.snapshots_skipped = 0  # snapshots due but not taken: the partition is as large as one that did not fit
        self._executor: Executor | None = None  # where snapshots are built (None: on the caller's thread)
        self._building: dict[int, tuple[Future[bytes], int, int]] = {}  # partition -> (its snapshot, held, epoch)
        self._epoch: dict[int, int] = {}  # partition -> adoptions so far: a snapshot built across one is dropped
        self._held_at: dict[int, int] = {}  # partition -> segments it held when its last snapshot was due
        #: partition -> {"offset": the adopted snapshot's, "writer": its writer, "read": records read after it}
        self.adopted: dict[int, dict[str, object]] = {int(k[len(ADOPTED_PREFIX):]): orjson.loads(v)
                                                      for k, v in store.scan(ADOPTED_PREFIX)}

    def enable_snapshots(self, policy: SnapshotPolicy, sink: RawSink, writer: str,
                         executor: Executor | None = None) -> None:
        """Write each partition's snapshot to ``snapshots`` as ``policy`` says (``writer``: this worker's id).
        With ``executor``, snapshots are built there (see the module docstring); the caller owns it."""
        self.snapshot_policy, self._snapshot_sink, self.writer = policy, sink, writer
        self._executor = executor

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
        tail_read: dict[int, int] = {}
        timelines, publish_key, output_topic, values = self.timelines, self.publish_key, self.output_topic, self._values
        next_offsets, batch_offsets, adopted, partition_of = self._next, batch.offsets, self.adopted, self.partition_of
        event_ids = _EventIds()
        applied = batch._applied  # seen_in() and mark_applied(), inline: two calls less per record
        n_applied = n_emitted = 0  # counted into self.counters after the loop
        for rec in records:
            # admit(), inline (one call less per record): below the stored next offset -> skipped; else the offset
            # moves (in memory and in the batch), whatever becomes of the record; undecodable -> dead letter
            tp = (rec.topic, rec.partition)
            offset = rec.offset
            if offset < next_offsets.get(tp, -1):
                c.skipped += 1
                continue
            if adopted and rec.partition in adopted:
                tail_read[rec.partition] = tail_read.get(rec.partition, 0) + 1
            next_offsets[tp] = batch_offsets[tp] = offset + 1
            try:
                env = rec.decoded()
                if env.event.event_topic != SEGMENTS:
                    raise EventValidationError("event_type", env.event_type,
                                               f"belongs on topic {env.event.event_topic!r}, not {SEGMENTS!r}")
            except EventValidationError as e:
                self._dead_letter(rec, str(e))
                continue
            eid = env.event_id
            if eid in prior or eid in applied:
                c.duplicates += 1
                continue
            event = env.event
            if type(event) not in _UNSEALED:  # only the lockbox's publishes, the coordinator's marks (docs/security.md)
                refused = rec.refusal(env, publish_key)
                if refused is not None:
                    self._dead_letter(rec, refused)
                    continue
            try:
                sids, learned = ids_of(timelines, event)  # touched; the id texts whose stored entry changes
                changes = timelines.apply(event)
            except EventValidationError as e:
                self._dead_letter(rec, str(e))
                continue
            applied[eid] = rec.timestamp_ms or None  # batch.mark_applied(): eid is not in it (checked above)
            n_applied += 1
            for sid in learned:
                batch.put(id_entry_key(sid.data_source, str(sid)), self._facts.key(sid))
            partition = rec.partition
            noted = self.snapshot_policy is None
            for sid in sids:
                touched[sid] = None
                if partition_of.get(sid.data_source) != partition:
                    noted = False
            if not noted:  # (every id learned is among the touched ones)
                self._note_partition(batch, partition, env.event_id, sids)
            if not changes:
                continue
            if send_raw is not None:
                when = values.when(env.occurred_at, env.event_id)
            head = event_ids.head(rec.topic, partition)
            for i, change in enumerate(changes):  # (a segment's facts change only by an event naming it: no
                sid = change.segment_id               # touched entry for the others whose state changes)
                states[sid] = change.new
                event_id = blake2b(b"%b%d\x00%d" % (head, offset, i), digest_size=16).hexdigest()  # event_ids.of()
                if send_raw is not None:
                    ds, value = values.value(sid, change.old, change.new, event_id, when)
                    send_raw(output_topic, ds, value)
                else:
                    out = SegmentVisibilityChanged(segment_id=str(sid), data_source=sid.data_source,
                                                   interval=sid.interval, from_state=change.old, to_state=change.new)
                    self.sink.send(Envelope(out, event_id, env.occurred_at, sid.data_source, env.event_id))
            n_emitted += len(changes)
        c.applied += n_applied
        c.emitted += n_emitted
        self._stage_facts(batch, touched, states)
        for p, n in tail_read.items():  # how much of the log a partition adopted from a snapshot cost to read
            info = self.adopted[p] = {**self.adopted[p], "read": int(self.adopted[p]["read"]) + n}  # type: ignore[call-overload]
            batch.put(ADOPTED_PREFIX + str(p).encode(), orjson.dumps(info))
        self.sink.flush()
        self.store.commit(batch)
        c.batches += 1
        if self.snapshot_policy is not None:
            self.write_snapshots()

    def _note_partition(self, batch: StoreBatch, partition: int, event_id: str, sids: Sequence[SegmentId]) -> None:
        """Remember the partition of the event's data sources (``sids``: the segments it touches, which include those
        whose id it teaches the fold), its id among the partition's recent ones."""
        partition_of = self.partition_of
        for sid in sids:  # most events name one data source, already noted: no sets built
            ds = sid.data_source
            if partition_of.get(ds) != partition:
                partition_of[ds] = partition
                batch.put(PART_PREFIX + ds.encode(), str(partition).encode())
        if self.snapshot_policy is None:
            return
        recent = self._recent.get(partition)
        if recent is None:
            recent = self._recent[partition] = deque(maxlen=self.snapshot_policy.recent_ids)
            self._last_snapshot.setdefault(partition, self.clock())
        recent.append(event_id)
        self._since[partition] = self._since.get(partition, 0) + 1

    def snapshot(self, partition: int) -> PartitionSnapshot:
        """The committed state of ``partition``: its data sources' facts and ids after its stored next offset."""
        sources = {ds for ds, p in self.partition_of.items() if p == partition}
        return take_snapshot(self.timelines, sources, SEGMENTS, partition,
                             self._next.get((self.input_topic, partition), 0),
                             tuple(self._recent.get(partition, ())), self.writer)

    def write_snapshots(self, force: bool = False) -> int:
        """Send (and flush) the snapshot of every partition due (every one applied to, with ``force``); call it
        after a commit, so each covers only outputs already acknowledged. With an executor, a due partition's
        snapshot is started there and sent by a later call once built (:meth:`wait_snapshots` waits for them);
        a partition whose snapshot is being built is not due. Returns the number sent by this call.

        By count, a partition is due after ``every_records`` events or, when it held more segments at its last
        snapshot, after as many events as it held then: building a snapshot costs time in proportion to the
        partition, so this keeps that cost per event bounded (at most about one segment's worth of building per
        event), and a gaining worker's tail after the snapshot is never longer than the snapshot itself.

        A snapshot larger than ``MAX_SNAPSHOT_BYTES`` is not written (a gaining worker replays that partition's log
        instead). Its partition is then not snapshotted again, due or not, until it holds fewer segments than it
        did then: taking and compressing a snapshot costs time in proportion to the partition (about 140 ms at 23k
        segments, every ``every_records`` events) only to discard the result. A partition holding more than
        ``MAX_SNAPSHOT_SEGMENTS`` is not tried at all (it cannot fit)."""
        policy, sink = self.snapshot_policy, self._snapshot_sink
        if policy is None or sink is None:
            return 0
        built = self._built()
        now = self.clock()
        held_at = self._held_at
        due = [p for p, n in sorted(self._since.items()) if n > 0 and p not in self._building and (
            force or n >= max(policy.every_records, held_at.get(p, 0))
            or (now - self._last_snapshot.get(p, now)) * 1000 >= policy.every_ms)]
        for p in due:
            self._since[p], self._last_snapshot[p] = 0, now
            held = held_at[p] = sum(count_known(self.timelines, ds) for ds, q in self.partition_of.items() if q == p)
            if held >= self._oversized.get(p, held + 1) or held > MAX_SNAPSHOT_SEGMENTS:
                if held > MAX_SNAPSHOT_SEGMENTS and p not in self._oversized:
                    log.warning("timeline snapshot of partition %d not taken: it holds %d segments, more than fit "
                                "in one (%d at most); a worker gaining it replays the log", p, held,
                                MAX_SNAPSHOT_SEGMENTS)
                    self._oversized[p] = MAX_SNAPSHOT_SEGMENTS + 1
                self.snapshots_skipped += 1
                continue
            view = self.store.view()
            args = (view, {ds for ds, q in self.partition_of.items() if q == p}, p,
                    self._next.get((self.input_topic, p), 0), tuple(self._recent.get(p, ())), self.writer)
            if self._executor is None:
                built.append((p, _build_and_close(*args), held))
            else:
                self._building[p] = (self._executor.submit(_build_and_close, *args), held, self._epoch.get(p, 0))
        written = 0
        for p, data, held in built:
            if len(data) > MAX_SNAPSHOT_BYTES:
                self._oversized[p] = held
                log.warning("timeline snapshot of partition %d not written: %d bytes (limit %d); a worker gaining "
                            "it replays the log. Not tried again until it holds fewer than %d segments", p,
                            len(data), MAX_SNAPSHOT_BYTES, held)
                continue
            self._oversized.pop(p, None)
            sink.send_raw(self.topics.name(SNAPSHOTS), snapshot_key(p), data)
            written += 1
        if written:
            try:
                sink.flush()
            except Exception as e:  # a snapshot only saves work: the log stays the truth, a later one may go
                log.warning("timeline snapshots of partitions %s not written: %s", [p for p, _, _ in built], e)
                return 0
            self.snapshots_written += written
        return written

    def _built(self) -> list[tuple[int, bytes, int]]:
        """The snapshots the executor finished since the last call: ``(partition, record value, segments held)``,
        without those whose partition was adopted since they were started, or whose build failed (logged)."""
        out: list[tuple[int, bytes, int]] = []
        for p, (future, held, epoch) in sorted(self._building.items()):
            if not future.done():
                continue
            del self._building[p]
            if epoch != self._epoch.get(p, 0):
                continue
            try:
                out.append((p, future.result(), held))
            except Exception as e:  # a snapshot only saves work: a later one may go
                log.warning("timeline snapshot of partition %d not built: %s: %s", p, type(e).__name__, e)
        return out

    def wait_snapshots(self, timeout: float | None = None) -> bool:
        """Wait until no snapshot is being built (True) or ``timeout`` seconds passed (False); a later
        :meth:`write_snapshots` sends them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for future, _, _ in list(self._building.values()):
            try:
                future.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return False
            except Exception:  # reported by write_snapshots
                continue
        return True

    def adopt(self, snapshot: PartitionSnapshot) -> bool:
        """Install ``snapshot`` when it is ahead of the store for its partition (see the module docstring); the
        agent's store then resumes that partition at the snapshot's offset. Returns whether it was installed."""
        p, tp = snapshot.partition, (self.input_topic, snapshot.partition)
        if snapshot.next_offset <= self._next.get(tp, 0):
            return False
        self._epoch[p] = self._epoch.get(p, 0) + 1  # a snapshot of the partition being built is now stale
        old = {ds for ds, q in self.partition_of.items() if q == p} | snapshot.data_sources
        batch = self.store.batch()
        for sid in all_facts(self.timelines, old):  # what the store holds of them now goes
            batch.delete(SEG_PREFIX + id_key(sid))
            batch.delete(STATE_PREFIX + id_key(sid))
        for text, sid in known_ids(self.timelines, old):
            batch.delete(id_entry_key(sid.data_source, text))
        for ds in sorted(old):
            if self.partition_of.pop(ds, None) is not None:
                batch.delete(PART_PREFIX + ds.encode())
        restore_partition(self.timelines, snapshot, old)
        for sid, facts in snapshot.facts:
            batch.put(SEG_PREFIX + id_key(sid), facts.to_bytes())
            state = self.timelines.timeline(sid.data_source).state(sid)
            if state != "absent":
                batch.put(STATE_PREFIX + id_key(sid), state.encode())
        for text, sid in snapshot.known_ids:
            batch.put(id_entry_key(sid.data_source, text), id_key(sid))
        for ds in sorted(snapshot.data_sources):
            self.partition_of[ds] = p
            batch.put(PART_PREFIX + ds.encode(), str(p).encode())
        for event_id in snapshot.recent_ids:
            if not self.store.applied(event_id) and not batch.applied(event_id):
                batch.mark_applied(event_id)
        batch.set_offset(self.input_topic, p, snapshot.next_offset)
        info: dict[str, object] = {"offset": snapshot.next_offset, "writer": snapshot.writer, "read": 0}
        batch.put(ADOPTED_PREFIX + str(p).encode(), orjson.dumps(info))
        self.store.commit(batch)
        self._next[tp] = snapshot.next_offset
        if self.snapshot_policy is not None:
            self._recent[p] = deque(snapshot.recent_ids, maxlen=self.snapshot_policy.recent_ids)
        self._since[p], self._last_snapshot[p] = 0, self.clock()
        self.adopted[p] = info
        return True

    def _stage_facts(self, batch: StoreBatch, touched: dict[SegmentId, None],
                     states: dict[SegmentId, SegmentState]) -> None:
        """Put the facts of every touched segment (delete those the fold forgot), then the state of every changed
        one (delete the absent): ``seg/`` and ``state/`` entries as :func:`load_timelines` reads them.

        ``touched``: the segments the batch's events name. Only those can have new facts: the fold changes a
        segment's descriptor, used flag or servers only for an event naming it (``Timeline.publish``,
        ``mark_unused``, ``announce``, ``unannounce``), while a change of state reaches other segments too
        (overshadowed, back to visible); their stored facts are already the fold's, and are not written again."""
        stage, key_of, timelines = self._facts.stage, self._facts.key, self.timelines
        # batch.put(k, v) / batch.delete(k), inline: the write batch's own calls under the store's data prefix (one
        # Python call less per entry, two or three entries per event)
        put, delete = batch._batch.put, batch._batch.delete
        keys: dict[SegmentId, bytes] = {}  # a key encoded once when a segment is touched and changes state
        for sid in touched:
            key, facts = stage(timelines, sid)
            keys[sid] = key
            if facts is None:
                delete(_DATA_SEG + key)
            else:
                put(_DATA_SEG + key, facts)
        for sid, state in states.items():
            key = keys.get(sid) or key_of(sid)
            if state == "absent":
                delete(_DATA_STATE + key)
            else:
                put(_DATA_STATE + key, _STATE_BYTES.get(state) or state.encode())

    def _dead_letter(self, rec: InputRecord, reason: str) -> None:
        """As :class:`~streaming.consumer.EventConsumer` does: original bytes, position, reason; id from position."""
        self.sink.send(dead_letter_of(rec, reason))
        self.counters.dead_lettered += 1
        self.counters.last_reasons = [*self.counters.last_reasons[-9:], reason]


#: Event types :meth:`InputRecord.refusal` passes without a look (not :data:`~coordinator.locks.seal.Sealed`): the
#: agent does not call it for them (a call per announce and unannounce, most of ``segments``). By exact type, so
#: an instance of any other class, a subclass of these included, is still asked.
_UNSEALED: frozenset[type] = frozenset(t for t in (SegmentAnnounced, SegmentUnannounced) if not issubclass(t, Sealed))
_CHANGE_VERSION = SegmentVisibilityChanged.schema_version
_DATA_SEG, _DATA_STATE = DATA_PREFIX + SEG_PREFIX, DATA_PREFIX + STATE_PREFIX  # StoreBatch.put's full keys
_STATES: tuple[SegmentState, ...] = get_args(SegmentState)
_STATE_BYTES: dict[str, bytes] = {st: st.encode() for st in _STATES}
_STATE_JSON: dict[str, bytes] = {st: orjson.dumps(st) for st in _STATES}
_HEAD = b"".join((b'{"event_type":', orjson.dumps(SegmentVisibilityChanged.event_type), b',"schema_version":',
                  orjson.dumps(_CHANGE_VERSION), b',"event_id":'))


class ChangeValues:
    """The message values of the ``SegmentVisibilityChanged`` envelopes the agent emits, built straight from the
    changes: byte for byte ``encode(Envelope(SegmentVisibilityChanged(...), event_id, occurred_at,
    sid.data_source, cause))`` (unit-tested), i.e. orjson's compact JSON of that envelope's fields in order,
    spliced from pieces each encoded by orjson: the envelope's head (constant), its time and cause (once per
    input event, :meth:`when`), the segment's key and payload head (once per segment while remembered: the
    segment id text and ISO interval, a fifth of the cost of an output), and the two states.
    At most ``capacity`` segments are remembered, the oldest first out."""

    __slots__ = ("_by_sid", "capacity")

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._by_sid: OrderedDict[SegmentId, tuple[bytes, bytes, bytes]] = OrderedDict()

    @staticmethod
    def when(occurred_at: Instant, cause: str | None) -> tuple[bytes, bytes]:
        """The JSON of the input event's time and id (the outputs' ``occurred_at`` and ``causation_id``)."""
        return orjson.dumps(format_instant(occurred_at)), orjson.dumps(cause)

    def value(self, sid: SegmentId, old: SegmentState, new: SegmentState, event_id: str,
              when: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        """The output's Kafka key (the data source) and message value."""
        by_sid = self._by_sid
        got = by_sid.get(sid)
        if got is None:
            ds_json = orjson.dumps(sid.data_source)
            got = by_sid[sid] = (sid.data_source.encode(), ds_json, b"".join((
                b',"payload":{"segmentId":', orjson.dumps(str(sid)), b',"dataSource":', ds_json, b',"interval":',
                orjson.dumps(sid.interval.iso()), b',"from":')))
            if len(by_sid) > self.capacity:
                by_sid.popitem(last=False)
        key, ds_json, payload_head = got
        return key, b"".join((_HEAD, orjson.dumps(event_id), b',"occurred_at":', when[0], b',"key":', ds_json,
                              b',"causation_id":', when[1], payload_head,
                              _STATE_JSON.get(old) or orjson.dumps(old), b',"to":',
                              _STATE_JSON.get(new) or orjson.dumps(new), b"}}"))


class _EventIds:
    """``derived_event_id(topic, partition, offset, index)``, byte for byte (unit-tested), with the hash input's
    ``topic\\x00partition\\x00`` head encoded once per partition of a batch."""

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[tuple[str, int], bytes] = {}

    def head(self, topic: str, partition: int) -> bytes:
        """The hash input's head of ``topic[partition]``: :meth:`of` is ``blake2b(head + b"<offset>\\x00<index>")``
        (the agent hashes inline with it, once per output)."""
        head = self._heads.get((topic, partition))
        if head is None:
            head = self._heads[(topic, partition)] = f"{topic}\x00{partition}\x00".encode()
        return head

    def of(self, topic: str, partition: int, offset: int, index: int) -> str:
        return blake2b(b"%b%d\x00%d" % (self.head(topic, partition), offset, index), digest_size=16).hexdigest()


def change_value(sid: SegmentId, old: SegmentState, new: SegmentState, event_id: str, occurred_at: Instant,
                 cause: str) -> bytes:
    """The message value of the ``SegmentVisibilityChanged`` envelope the agent emits (:class:`ChangeValues`, with
    nothing remembered): the same bytes as ``encode(Envelope(SegmentVisibilityChanged(...), event_id,
    occurred_at, sid.data_source, cause))`` (tested)."""
    return ChangeValues(0).value(sid, old, new, event_id, ChangeValues.when(occurred_at, cause))[1]


def load_timelines(store: AgentStateStore) -> Timelines:
    """Rebuild the fold from the stored facts (empty store: empty timelines)."""
    facts = [(parse_id_key(k[len(SEG_PREFIX):]), SegmentFacts.from_bytes(v)) for k, v in store.scan(SEG_PREFIX)]
    known = [(id_text_of(k, sid.data_source), sid) for k, v in store.scan(ID_PREFIX) for sid in (parse_id_key(v),)]
    return restore(facts, known)


def build_snapshot(view: StoreView, data_sources: Collection[str], partition: int, next_offset: int,
                   recent_ids: Sequence[str], writer: str) -> bytes:
    """The snapshot record of ``partition`` as ``view`` holds it (its ``data_sources``, committed up to
    ``next_offset``): byte for byte ``encode_snapshot(take_snapshot(...))`` of the fold at that commit
    (unit-tested), since the store holds exactly the fold's facts (``seg/``, one entry per known segment, each
    ``facts.to_bytes()``) and learned id texts (``id/``). Per data source in name order, its facts in segment id
    order (interval, version, partition) and the ids by text: as :func:`all_facts` and :func:`known_ids`.
    Reads nothing but ``view``: it may run on another thread while the fold moves on."""
    facts: list[bytes] = []
    ids: list[tuple[str, bytes]] = []
    for ds in sorted(data_sources):
        prefix = SEG_PREFIX + source_prefix(ds)
        entries = [(tuple(orjson.loads(k[len(SEG_PREFIX):])[1:]), v) for k, v in view.scan(prefix)]
        entries.sort(key=itemgetter(0))  # (start, end, version, partition): the segment id order
        facts.extend(v for _, v in entries)
        ids.extend((id_text_of(k, ds), v) for k, v in view.scan(id_entry_key(ds, "")))
    ids.sort(key=itemgetter(0))  # a text names one id: no ties
    snap = PartitionSnapshot(SEGMENTS, partition, next_offset, (), (), tuple(recent_ids), writer)
    return encode_snapshot(snap, b"[" + b",".join(facts) + b"]",
                           b"[" + b",".join(b"[%b,%b]" % (orjson.dumps(t), v) for t, v in ids) + b"]")


def _build_and_close(view: StoreView, data_sources: Collection[str], partition: int, next_offset: int,
                     recent_ids: Sequence[str], writer: str) -> bytes:
    """:func:`build_snapshot`, then the view released (the store's close waits for it). Traced as
    ``hold:snapshot-build`` (it holds its own thread only, but shares the GIL with the event loop)."""
    with view, stage_trace.held("snapshot-build"):
        return build_snapshot(view, data_sources, partition, next_offset, recent_ids, writer)


def stored_states(store: AgentStateStore) -> dict[SegmentId, SegmentState]:
    return {parse_id_key(k[len(STATE_PREFIX):]): v.decode() for k, v in store.scan(STATE_PREFIX)}  # type: ignore[misc]


def stored_facts(store: AgentStateStore) -> dict[SegmentId, SegmentFacts]:
    return {parse_id_key(k[len(SEG_PREFIX):]): SegmentFacts.from_bytes(v) for k, v in store.scan(SEG_PREFIX)}
