"""The upsert agent: ``cluster`` + ``segments`` + ``timeline`` -> the pure upsert fold -> strategies, cleanup,
consolidation.

Transport-free like the other agents: :meth:`UpsertAgent.process` takes a batch
of raw input records, :meth:`UpsertAgent.tick` is the timer; the Faust worker of
:mod:`streaming.service.app` feeds both.

**What it folds** (:mod:`coordinator.upserts`): table definitions and
consolidation events from ``cluster``, the ``upsertPartitions`` of descriptors
from ``segments`` (and unused marks), and visibility from ``timeline``: a
version counts once its segment is *visible*, never from its publish.

**What it writes.**

- After every batch that changed a table's fresh keys, the table's
  :class:`~coordinator.upserts.strategy.Strategy` (latest append versions, the
  keys whose primary data is superseded, the Druid filter) on the compacted
  ``upsert-strategy`` topic, keyed by table name (``format`` 1, plus the
  ``causationId`` of the batch's last input and its ``eventTime``). Its strategy
  fields are a pure function of the state, so a re-emission after a crash says the same.
- ``segments_marked_unused`` for append segments stale for the table's
  ``upsertStaleGraceMillis`` and for rejected publishes (:func:`cleanup_due`);
  the planner then drops them.
- ``consolidation_requested`` when asked (``upsert_consolidation_asked``) or on
  the table's schedule (:func:`consolidation_due`).

Decisions are taken at ``now`` = the latest event time applied after a batch,
and by :meth:`tick` at the shell's clock (never earlier than that).

**Only for what this worker owns.** Several workers run this agent, each on its
partitions; a worker keeps the state of a partition it has lost (it resumes from
it if the partition comes back), so without a check its timer would go on
deciding cleanup and consolidations for tables another worker now owns. The
agent remembers the partition each input key last came from (``src/`` entries:
a data source on ``segments`` / ``timeline``, ``upserts/<table>`` on ``cluster``)
and, when ``owned`` is set (``segcoord run`` sets it to the consumer's current
assignment), decides a ``segments_marked_unused`` only while it owns the
``segments`` partition of its data source, and a ``consolidation_requested``
only while it owns the ``cluster`` partition of its table; the rest stays due
for the owner. Without ``owned`` (one process, the tests) it decides for all. The agent
folds each decision it emits at once and marks its id applied, so reading it
back changes nothing; replay folds the decision itself, never a clock.

**Ids.** After a batch: ``derived_event_id("upserts:" + topic, partition,
offset, index)`` of the batch's last applied input; a timer run:
``derived_event_id("upserts:timer" + salt, 0, run, index)`` with the run counter
stored before it emits (as the planner does). The run counter is per store and
several workers run this agent (each on its partitions), so ``segcoord run``
salts timer ids with the worker id (``timer_salt``): ids stay unique across
partitions (a worker dedupes by its own partitions' ids) and a restarted worker
re-emits under the same ones.

**Exactly-once effect.** Per batch: fold, decide, emit, flush, then ONE RocksDB
write batch with the changed entries, the next offsets and the applied ids.
After a crash the restart re-reads from the stored offsets and re-emits
identical records. Bad records on ``segments`` and ``timeline`` are the timeline
agent's to dead-letter (skipped here); a ``cluster`` event the fold refuses (an
upsert table that cannot hold) goes to ``deadletter`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import orjson

from coordinator.locks.seal import seal_event
from coordinator.upserts import Strategy, UpsertState, cleanup_due, consolidation_due
from coordinator.upserts.state import Entry, Held
from coordinator.upserts.table import canonical_key
from events.envelope import Envelope
from events.ids import derived_event_id
from events.instant import format_instant
from events.interval import Interval
from events.keys import partition_key
from events.registry import Event
from events.schema import Instant, decode_record, encode_record
from events.segments import SegmentsMarkedUnused
from events.topics import CLUSTER, SEGMENTS, TIMELINE, UPSERT_STRATEGY, Topics
from events.upserts import ConsolidationRequested, UpsertTableSet
from streaming import credentials
from streaming.service.intake import AgentCounters, InputRecord, admit, dead_letter_of, prior_ids, seen_in
from streaming.service.state import AgentStateStore, StoreBatch

FORMAT_VERSION = "upsert-agent/1"
STORE_NAME = "upserts"
STRATEGY_FORMAT = 1


class StrategySink(Protocol):
    """An :class:`~streaming.producer.EventProducer`: envelopes, raw records (strategies), flush."""

    def send(self, envelope: Envelope[Event]) -> None: ...

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None: ...

    def flush(self, timeout: float = 30.0) -> None: ...


def _k(family: str, key: str) -> bytes:
    return f"{family}/{key}".encode()


def _held_bytes(h: Held) -> bytes:
    return orjson.dumps({"ds": h.data_source, "interval": h.interval.iso(),
                         "entries": [[dict(e.key), e.version, e.rows, e.tombstone] for e in h.entries]})


def _held_of(raw: bytes) -> Held:
    o = orjson.loads(raw)
    return Held(o["ds"], Interval.parse(o["interval"]),
                tuple(Entry(canonical_key(k, "key"), v, r, t) for k, v, r, t in o["entries"]))


def load_state(store: AgentStateStore) -> tuple[UpsertState, dict[str, Any]]:
    """The fold as last committed, and the agent's meta (run counter)."""
    tables = []
    for _, raw in store.scan(b"table/"):
        o = orjson.loads(raw)
        tables.append((decode_record(UpsertTableSet, o["def"], "table"), int(o["last"]), bool(o["asked"])))
    meta_raw = store.get(_k("meta", ""))
    meta: dict[str, Any] = orjson.loads(meta_raw) if meta_raw else {}
    state = UpsertState.restore(
        tables,
        ((k[len(b"held/"):].decode(), _held_of(v)) for k, v in store.scan(b"held/")),
        (k[len(b"vis/"):].decode() for k, _ in store.scan(b"vis/")),
        ((k[len(b"rej/"):].decode(), tuple(orjson.loads(v))) for k, v in store.scan(b"rej/")),  # type: ignore[misc]
        ((k[len(b"stale/"):].decode(), int(v)) for k, v in store.scan(b"stale/")),
        int(meta.get("lastEventAt", 0)),
    )
    return state, meta


class UpsertAgent:
    """The upsert fold, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: StrategySink,
                 publish_key: bytes | None = None) -> None:
        self.store = store
        self.publish_key = publish_key if publish_key is not None else credentials.publish_key()
        self.topics = topics
        self.sink = sink
        self.input_topics = (topics.name(CLUSTER), topics.name(SEGMENTS), topics.name(TIMELINE))
        self._logicals = {topics.name(logical): logical for logical in (CLUSTER, SEGMENTS, TIMELINE)}
        self.strategy_topic = topics.name(UPSERT_STRATEGY)
        self.counters = AgentCounters()
        self.state, meta = load_state(store)
        self.runs: int = int(meta.get("runs", 0))
        self.timer_salt = ""  # ":<worker id>" under segcoord run (module docstring: ids)
        self._next = store.offsets()
        self.batches_since_start = 0
        self.last_batch_size = 0
        self.strategies_written = 0
        #: (topic, key) -> the partition its last record came from (see "Only for what this worker owns")
        self.sources: dict[tuple[str, str], int] = {
            (t.decode(), k.decode(errors="surrogateescape")): int(v) for (t, _, k), v in
            ((raw[len(b"src/"):].partition(b"\x00"), v) for raw, v in store.scan(b"src/"))}
        #: the (topic, partition)s this worker owns now; None: all (one worker)
        self.owned: Callable[[], Collection[tuple[str, int]]] | None = None

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    def strategy(self, table: str) -> Strategy:
        st = self.state
        fresh = st.fresh(table)
        intervals = {s: iv for lt in fresh.values() for s in lt.segments if (iv := st.interval_of(s)) is not None}
        return Strategy.of(st.tables[table], fresh, intervals)

    # -- input ------------------------------------------------------------------------------------
    def process(self, records: Sequence[InputRecord]) -> None:
        """Fold a batch, write the changed strategies, decide, emit, flush, commit once."""
        batch = self.store.batch()
        c = self.counters
        changed: set[str] = set()
        last: tuple[InputRecord, str] | None = None
        prior = prior_ids(records, self._next, self.store)
        for rec in records:
            logical = self._logical(rec.topic)
            env = admit(rec, logical, self._next, batch, c, self._bad)
            if env is None or seen_in(env, batch, prior, c):
                continue
            refused = rec.refusal(env, self.publish_key)  # only sealed publishes and marks (docs/security.md)
            if refused is not None:
                self._bad(rec, refused)
                continue
            try:
                changed |= self.state.apply(env.event, env.occurred_at)
            except ValueError as e:
                self._bad(rec, f"{env.event_type} {env.event_id}: {e}")
                continue
            batch.mark_applied(env.event_id)
            c.applied += 1
            last = (rec, env.event_id)
            # any bytes: a valid event under a key that is not UTF-8 (a hostile producer) must not stop the agent
            source = None if rec.key is None else (rec.topic, rec.key.decode(errors="surrogateescape"))
            if rec.key is not None and source is not None and self.sources.get(source) != rec.partition:
                self.sources[source] = rec.partition
                batch.put(b"src/" + rec.topic.encode() + b"\x00" + rec.key, str(rec.partition).encode())
        if last is not None:
            rec, cause = last
            decided = self._decide(self.state.last_event_at)
            changed |= self._emit(decided, self.state.last_event_at,
                                  ("upserts:" + rec.topic, rec.partition, rec.offset), cause, batch)
            for table in sorted(changed):
                self._write_strategy(table, cause)
        self.sink.flush()
        self._commit(batch)
        c.batches += 1
        self.batches_since_start += 1
        self.last_batch_size = len(records)

    def tick(self, wall_ms: int) -> int:
        """A timer run at the shell's clock: cleanup past the grace period, scheduled consolidations. Returns
        the number of events emitted."""
        now = max(wall_ms, self.state.last_event_at)
        decided = self._decide(now)
        if not decided:
            return 0
        self.runs += 1
        pre = self.store.batch()  # the run number first: its ids are never reused for other content
        pre.put(_k("meta", ""), self._meta())
        self.store.commit(pre)
        batch = self.store.batch()
        changed = self._emit(decided, now, ("upserts:timer" + self.timer_salt, 0, self.runs), None, batch)
        for table in sorted(changed):
            self._write_strategy(table, None)
        self.sink.flush()
        self._commit(batch)
        return len(decided)

    def _logical(self, topic: str) -> str:
        return self._logicals.get(topic, topic)

    # -- decisions --------------------------------------------------------------------------------
    def _decide(self, now: int) -> list[Event]:
        st = self.state
        out: list[Event] = [req for t in sorted(st.tables) if (req := consolidation_due(st, t, now)) is not None]
        out.extend(cleanup_due(st, now))
        if self.owned is None or not out:  # (the assignment is asked through Faust's consumer thread: only if needed)
            return out
        owned = set(self.owned())
        return [e for e in out if self.owns(e, owned)]

    def owns(self, decision: Event, owned: Collection[tuple[str, int]]) -> bool:
        """Whether this worker owns the partition a decision belongs to: a ``segments_marked_unused`` the
        ``segments`` partition its data source's records came from, a ``consolidation_requested`` the ``cluster``
        partition of its table's records (a key whose source is not recorded, from a store older than the
        ``src/`` entries: owned, as before)."""
        key: str | None
        if isinstance(decision, SegmentsMarkedUnused):  # one per data source (cleanup_due)
            topic, first = self.topics.name(SEGMENTS), decision.segment_ids[0]
            held = self.state.held.get(first)
            key = held.data_source if held is not None else self.state.rejected.get(first, (None,))[0]
        elif isinstance(decision, ConsolidationRequested):
            topic, key = self.topics.name(CLUSTER), partition_key(decision)
        else:
            return True
        partition = None if key is None else self.sources.get((topic, key))
        # a key with no source recorded comes from a store written before sources were: decided as before
        return partition is None or (topic, partition) in owned

    def _emit(self, decided: list[Event], now: int, position: tuple[str, int, int], cause: str | None,
              batch: StoreBatch) -> set[str]:
        topic, partition, offset = position
        changed: set[str] = set()
        for i, event in enumerate(decided):
            key = partition_key(event) or "upserts"
            env: Envelope[Event] = Envelope(event, derived_event_id(topic, partition, offset, i), Instant(now), key,
                                            cause)
            if isinstance(event, SegmentsMarkedUnused):  # the stale cleanup: sealed as every mark (docs/security.md)
                env = seal_event(Envelope(event, env.event_id, env.occurred_at, key, cause), self.publish_key)
            self.sink.send(env)
            batch.mark_applied(env.event_id)
            changed |= self.state.apply(event, now)
            self.counters.emitted += 1
        return changed

    def _write_strategy(self, table: str, cause: str | None) -> None:
        if table not in self.state.tables:
            return
        record = {"format": STRATEGY_FORMAT, **self.strategy(table).to_json(), "causationId": cause,
                  "eventTime": format_instant(self.state.last_event_at)}
        self.sink.send_raw(self.strategy_topic, table.encode(), orjson.dumps(record))
        self.strategies_written += 1

    # -- persistence ------------------------------------------------------------------------------
    def _meta(self) -> bytes:
        return orjson.dumps({"runs": self.runs, "lastEventAt": self.state.last_event_at})

    def _commit(self, batch: StoreBatch) -> None:
        st = self.state
        for family, key in sorted(st.dirty):
            if family == "table":
                t = st.tables.get(key)
                if t is None:
                    batch.delete(_k("table", key))
                    continue
                definition = UpsertTableSet(name=t.name, append_data_source=t.append, primary_data_source=t.primary,
                                            key_columns=t.key_columns, version_column=t.version_column,
                                            table_type_column=t.table_type_column,
                                            stale_grace_millis=t.stale_grace_ms,
                                            consolidation_period_millis=t.consolidation_period_ms)
                batch.put(_k("table", key), orjson.dumps({"def": encode_record(definition),
                                                          "last": st.last_consolidation.get(key, 0),
                                                          "asked": key in st.asked}))
            elif family == "held":
                h = st.held.get(key)
                _put(batch, _k("held", key), None if h is None else _held_bytes(h))
            elif family == "visible":
                _put(batch, _k("vis", key), b"" if key in st.visible else None)
            elif family == "stale":
                since = st.stale.get(key)
                _put(batch, _k("stale", key), None if since is None else str(since).encode())
            elif family == "rejected":
                r = st.rejected.get(key)
                _put(batch, _k("rej", key), None if r is None else orjson.dumps(list(r)))
        st.dirty.clear()
        batch.put(_k("meta", ""), self._meta())
        self.store.commit(batch)

    def _bad(self, rec: InputRecord, reason: str) -> None:
        c = self.counters
        c.last_reasons = [*c.last_reasons[-9:], reason]
        if rec.topic != self.topics.name(CLUSTER):
            c.skipped += 1  # segments / timeline: the timeline agent dead-letters bad records
            return
        if reason.startswith("upsert_table_set "):
            self.sink.send(dead_letter_of(rec, reason))
            c.dead_lettered += 1
        else:
            c.skipped += 1  # undecodable cluster records: the planner dead-letters them


def _put(batch: StoreBatch, key: bytes, value: bytes | None) -> None:
    if value is None:
        batch.delete(key)
    else:
        batch.put(key, value)
