"""The planner agent: ``segments`` + ``cluster`` + ``commands`` -> cluster view -> pure ``plan`` -> commands.

It is transport-free like the other agents: :meth:`PlannerAgent.process` takes a
batch of raw input records, :meth:`PlannerAgent.tick` is the timer; the Faust
worker of :mod:`streaming.service.app` feeds both (one event loop, so never at
the same time).

**The view** (what :func:`coordinator.planner.planner.plan` needs), folded from the log:

- servers from ``ServerJoined`` (tier, max size), ``ServerLeft`` (out of the
  view; what it announced is kept, as the timeline keeps it, so a server that
  comes back holds it again), ``ServerDecommissioned`` / ``ServerRecommissioned``;
- loaded segments from ``SegmentAnnounced`` / ``SegmentUnannounced``;
- used segments from ``SegmentsPublished`` minus ``SegmentsMarkedUnused``;
- rules per data source from ``RulesSet`` (a fresh cluster has Druid's default,
  ``loadForever`` 2 replicas on ``_default_tier``), the dynamic config from
  ``DynamicConfigSet`` (merged into the current one, as Druid merges a POST);
- load queues: commands sent and not answered yet. A command is answered by an
  announce / unannounce / ``SegmentLoadRefused`` whose causation id is the
  command's id (or by an announce/unannounce of the same server and segment);
  it times out ``load_timeout_ms`` after it was sent. The agent adds what it
  emits to the queues at once (the next plan must see it) and also reads
  ``commands`` back: the log's copy of a command wins over the in-memory one,
  and commands of others (the Spark balancer) join the queues.

**When it plans.** After every batch (the worker takes up to 1000 records
within 50 ms) holding an input that can change the plan (a publish, an unused
mark, an announce/unannounce, a server, rule or config change, a refusal), with
``now`` = the latest ``occurred_at`` applied (event time, never the wall clock),
so an input's commands go out at once; one plan per batch, not per record, keeps
a burst of 1000 publishes at one plan instead of 1000.
Also on the timer (:meth:`tick`), with ``now`` = the wall clock the shell passes
in (again never earlier than the latest event time), which retries timed-out
loads and marks overshadowed segments unused once ``millisToWaitBeforeDeleting``
has passed since the coordinator start (= the first event time the agent ever
applied, stored).

**Ids.** A plan triggered by input ``(topic, partition, offset)`` (the batch's
last triggering record) emits events with ids
``derived_event_id("planner:" + topic, partition, offset, index)``
(salted so they never equal the timeline agent's ids derived from the same
input). A timer run ``n`` emits ``derived_event_id("planner:timer:" + commands
topic, 0, n, index)``; the run counter is stored. A command's ``commandId`` is
its event id; a move's ``moveId`` is the id of its load half.

**Exactly-once effect.** Per batch: fold + plan + emit, flush, then ONE write
batch commits the touched facts, the queues, the run counter, the next offsets
and the applied input ids. A crash before the commit re-processes the same
inputs from the same stored state and, when the batch is cut the same way,
re-emits identical ids (consumers drop the copies). A timer run that has something to emit first commits its run
number (so no id is ever reused for other content), then emits and commits like
a batch; a crash in between loses that run's commands, which the next run plans
again (nothing was in flight). Known limits: batches are cut by
arrival, and Kafka orders nothing across the three topics, so a re-processing
after a crash may cut or interleave differently and plan under other ids (or
other content under the same ids). The log's copy of a command wins when it is
read back; a load repeated that way is answered again by the historical (it
announces what it already holds), so it costs a message, not correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from coordinator.planner.cluster import ClusterView, QueueItem, Server, ServerState
from coordinator.planner.planner import Plan, PlanCommand, plan
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet, parse_rules
from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerJoined,
    ServerLeft,
    ServerRecommissioned,
)
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.ids import derived_event_id
from events.registry import Event
from events.schema import EventValidationError, Instant, decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, seen
from streaming.service.state import AgentStateStore, StoreBatch
from streaming.service.timeline_facts import id_key, parse_id_key

FORMAT_VERSION = "planner-agent/1"
STORE_NAME = "planner"
DEFAULT_TIER = "_default_tier"
DEFAULT_LOAD_TIMEOUT_MS = 15 * 60_000  # Druid's druid.coordinator.load.timeout (PT15M); the audit's default

SEG_PREFIX = b"seg/"      # id key -> {"segment", "used"}
HELD_PREFIX = b"held/"    # server \x00 id key -> b""
SRV_PREFIX = b"srv/"      # server -> {"tier", "maxSizeBytes", "decommissioning", "joined"}
QUEUE_PREFIX = b"q/"      # command event id -> in-flight command JSON
ANSWERED_PREFIX = b"ans/"  # command event id -> b""
RULES_PREFIX = b"rules/"  # data source -> rules JSON
CONFIG_KEY = b"config"
META_KEY = b"meta"


@dataclass(frozen=True, slots=True)
class InFlight:
    """A command sent and not answered: a load (the target half of a move has ``move_id``/``source``) or a drop."""

    server: str
    action: str  # "load" | "drop"
    segment: SegmentId
    sent_at: int
    move_id: str | None = None
    source: str | None = None
    purpose: str = "loading"

    def to_bytes(self) -> bytes:
        return orjson.dumps({"server": self.server, "action": self.action, "segment": id_key(self.segment).decode(),
                             "sentAt": self.sent_at, "moveId": self.move_id, "source": self.source,
                             "purpose": self.purpose})

    @staticmethod
    def from_bytes(data: bytes) -> InFlight:
        o = orjson.loads(data)
        return InFlight(o["server"], o["action"], parse_id_key(o["segment"].encode()), o["sentAt"], o["moveId"],
                        o["source"], o["purpose"])


@dataclass
class ServerFacts:
    tier: str = DEFAULT_TIER
    max_size_bytes: int = 0
    decommissioning: bool = False
    joined: bool = True


@dataclass
class PlannerState:
    """Everything the view is made of, plus bookkeeping; ``dirty`` keys are written at the next commit."""

    segments: dict[SegmentId, SegmentDescriptor] = field(default_factory=dict)
    used: set[SegmentId] = field(default_factory=set)
    held: dict[str, set[SegmentId]] = field(default_factory=dict)
    servers: dict[str, ServerFacts] = field(default_factory=dict)
    queue: dict[str, InFlight] = field(default_factory=dict)
    rules_json: dict[str, Any] = field(default_factory=dict)
    config_json: dict[str, Any] = field(default_factory=dict)
    start: int | None = None
    last_event_at: int = 0
    runs: int = 0
    by_text: dict[str, SegmentId] = field(default_factory=dict)
    rules: RuleSet = field(default_factory=RuleSet.druid_default)
    config: DynamicConfig = field(default_factory=DynamicConfig)
    dirty: set[bytes] = field(default_factory=set)
    answered_now: set[str] = field(default_factory=set)

    # -- changes (each marks what it touched) --------------------------------------------
    def learn(self, seg: SegmentDescriptor, used: bool | None) -> None:
        sid = seg.id
        if sid not in self.segments or used:
            self.segments[sid] = seg
        self.by_text[str(sid)] = sid
        if used is True:
            self.used.add(sid)
        self.dirty.add(SEG_PREFIX + id_key(sid))

    def mark_unused(self, sid: SegmentId) -> None:
        self.used.discard(sid)
        self.dirty.add(SEG_PREFIX + id_key(sid))

    def hold(self, server: str, sid: SegmentId, held: bool) -> None:
        mine = self.held.setdefault(server, set())
        if held:
            mine.add(sid)
        else:
            mine.discard(sid)
        self.dirty.add(HELD_PREFIX + server.encode() + b"\x00" + id_key(sid))
        self.dirty.add(SEG_PREFIX + id_key(sid))

    def server(self, name: str) -> None:
        self.dirty.add(SRV_PREFIX + name.encode())

    def enqueue(self, command_id: str, item: InFlight) -> None:
        self.queue[command_id] = item
        self.dirty.add(QUEUE_PREFIX + command_id.encode())

    def settle(self, command_id: str) -> InFlight | None:
        item = self.queue.pop(command_id, None)
        self.answered_now.add(command_id)
        self.dirty.add(QUEUE_PREFIX + command_id.encode())
        return item

    def settle_matching(self, server: str, sid: SegmentId, action: str) -> None:
        for cid, item in sorted(self.queue.items()):
            if item.server == server and item.segment == sid and item.action == action:
                self.settle(cid)

    def forgettable(self, sid: SegmentId) -> bool:
        return sid not in self.used and not any(sid in h for h in self.held.values()) and \
            not any(q.segment == sid for q in self.queue.values())

    # -- the view ---------------------------------------------------------------------------
    def view(self, now: int, run: int, load_timeout_ms: int) -> ClusterView:
        for cid, item in sorted(self.queue.items()):
            if now - item.sent_at > load_timeout_ms:
                self.settle(cid)  # timed out: no longer in flight
        queues: dict[str, list[QueueItem]] = {}
        for _cid, item in sorted(self.queue.items(), key=lambda kv: (kv[1].sent_at, kv[0])):
            if item.action == "drop" and item.move_id is not None:
                continue  # the source half of a move: the view models it by the load's ``source``
            if any(q.segment == item.segment for q in queues.get(item.server, ())):
                continue  # at most one item per segment and server
            queues.setdefault(item.server, []).append(
                QueueItem(item.action, item.segment, item.purpose, item.move_id, item.source))  # type: ignore[arg-type]
        servers = {}
        for name, f in sorted(self.servers.items()):
            if not f.joined:
                continue
            loaded = frozenset(s for s in self.held.get(name, ()) if s in self.segments)
            servers[name] = ServerState(Server(name, f.tier, f.max_size_bytes, f.decommissioning), loaded,
                                        tuple(queues.get(name, ())))
        relevant = set(self.used)
        for state in servers.values():
            relevant |= state.loaded
            relevant |= {q.segment for q in state.queue}
        segments = {sid: self.segments[sid] for sid in sorted(relevant) if sid in self.segments}
        return ClusterView(now, servers, segments, frozenset(s for s in self.used if s in self.segments),
                           self.rules, self.config, self.start if self.start is not None else now, run)


class PlannerAgent:
    """The cluster view, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: Sink,
                 load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS) -> None:
        self.store = store
        self.topics = topics
        self.input_topics = (topics.name(SEGMENTS), topics.name(CLUSTER), topics.name(COMMANDS))
        self.sink = sink
        self.load_timeout_ms = load_timeout_ms
        self.counters = AgentCounters()
        self.state = load_state(store)
        self._next = store.offsets()
        self.batches_since_start = 0
        self.last_batch_size = 0
        self.last_plan: Plan | None = None

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    # -- input ------------------------------------------------------------------------------
    def process(self, records: Sequence[InputRecord]) -> None:
        """Fold a batch, plan once after it when any input can change the plan, emit, flush, commit once."""
        batch = self.store.batch()
        c = self.counters
        trigger: tuple[tuple[str, int, int], str] | None = None
        for rec in records:
            logical = self._logical(rec.topic)
            env = admit(rec, logical, self._next, batch, c, self._bad)
            if env is None:
                continue
            if logical == COMMANDS:
                self._command(env, rec)  # the log's copy wins; idempotent
                c.applied += 1
                continue
            if seen(env, batch, self.store, c):
                continue
            try:
                triggers = self._apply(env)
            except (EventValidationError, ValueError) as e:
                self._bad(rec, f"{env.event_type} {env.event_id}: {e}")
                continue
            batch.mark_applied(env.event_id)
            c.applied += 1
            st = self.state
            if st.start is None:
                st.start = env.occurred_at
            st.last_event_at = max(st.last_event_at, env.occurred_at)
            if triggers:
                trigger = (("planner:" + rec.topic, rec.partition, rec.offset), env.event_id)
        if trigger is not None and self._may_decide():
            self._plan_and_emit(self.state.last_event_at, *trigger)
        self.sink.flush()
        self._commit(batch)
        c.batches += 1
        self.batches_since_start += 1
        self.last_batch_size = len(records)

    def tick(self, wall_ms: int) -> int:
        """A timer run at the shell's clock: returns the number of events emitted."""
        st = self.state
        if st.start is None or not self._may_decide():
            return 0  # nothing ever happened, or nothing can be decided
        now = max(wall_ms, st.last_event_at)
        run = st.runs + 1
        result = plan(st.view(now, run, self.load_timeout_ms), compute_cost=False)
        if not result.commands and not result.mark_unused:
            return 0
        st.runs = run
        pre = self.store.batch()  # the run number first: its ids are never reused for other content
        pre.put(META_KEY, self._meta())
        self.store.commit(pre)
        emitted = self._emit(result, now, ("planner:timer:" + self.topics.name(COMMANDS), 0, run), None)
        self.sink.flush()
        self._commit(self.store.batch())
        return emitted

    # -- folding ------------------------------------------------------------------------------
    def _logical(self, topic: str) -> str:
        for logical in (SEGMENTS, CLUSTER, COMMANDS):
            if self.topics.name(logical) == topic:
                return logical
        return topic

    def _apply(self, env: Envelope[Event]) -> bool:
        """Fold one event; True when it can change the plan."""
        st, event = self.state, env.event
        cause = env.causation_id
        if isinstance(event, SegmentsPublished):
            for seg in event.segments:
                st.learn(seg, True)
            return True
        if isinstance(event, SegmentsMarkedUnused):
            for text in event.segment_ids:
                sid = st.by_text.get(text)
                if sid is not None:
                    st.mark_unused(sid)
            return True
        if isinstance(event, SegmentAnnounced):
            st.learn(event.segment, None)
            st.hold(event.server, event.segment.id, True)
            if cause is not None and cause in st.queue:
                st.settle(cause)
            st.settle_matching(event.server, event.segment.id, "load")
            return True
        if isinstance(event, SegmentUnannounced):
            sid = st.by_text.get(event.segment_id)
            if cause is not None and cause in st.queue:
                st.settle(cause)
            if sid is not None:
                st.hold(event.server, sid, False)
                st.settle_matching(event.server, sid, "drop")
            return True
        if isinstance(event, SegmentLoadRefused):
            st.settle(event.command_id)
            if cause is not None:
                st.settle(cause)
            if event.move_id is not None:  # the source keeps its copy: the drop half is abandoned
                for cid, item in sorted(st.queue.items()):
                    if item.move_id == event.move_id:
                        st.settle(cid)
            return True
        if isinstance(event, ServerJoined):
            f = st.servers.get(event.server) or ServerFacts()
            f.tier = event.tier or f.tier
            f.max_size_bytes = event.max_size_bytes if event.max_size_bytes is not None else f.max_size_bytes
            f.joined = True
            st.servers[event.server] = f
            st.server(event.server)
            return True
        if isinstance(event, ServerLeft):
            if event.server in st.servers:
                st.servers[event.server].joined = False
                st.server(event.server)
            for cid, item in sorted(st.queue.items()):
                if item.server == event.server:
                    st.settle(cid)  # a removed server's queue vanishes with it
            return True
        if isinstance(event, ServerDecommissioned | ServerRecommissioned):
            f = st.servers.setdefault(event.server, ServerFacts(joined=False))
            f.decommissioning = isinstance(event, ServerDecommissioned)
            st.server(event.server)
            return True
        if isinstance(event, RulesSet):
            rules = parse_rules(list(event.rules), f"payload.rules[{event.data_source}]")
            st.rules = st.rules.with_rules(event.data_source, rules)
            st.rules_json[event.data_source] = [dict(r) for r in event.rules]
            st.dirty.add(RULES_PREFIX + event.data_source.encode())
            return True
        if isinstance(event, DynamicConfigSet):
            st.config = st.config.updated(dict(event.config))
            st.config_json.update({k: v for k, v in event.config.items()})
            st.dirty.add(CONFIG_KEY)
            return True
        return False

    def _command(self, env: Envelope[Event], rec: InputRecord) -> None:
        event, st = env.event, self.state
        if not isinstance(event, LoadSegment | DropSegment):
            return
        if env.event_id in st.answered_now or self.store.get(ANSWERED_PREFIX + env.event_id.encode()) is not None:
            return  # answered before we read it back
        if isinstance(event, LoadSegment):
            st.learn(event.segment, None)
            purpose = "loading" if event.move_id is None else (
                "decommissioning" if event.reason.startswith("draining") else "balancing")
            source = None
            if event.move_id is not None:
                source = next((q.source for q in st.queue.values() if q.move_id == event.move_id and q.source), None)
            item = InFlight(event.server, "load", event.segment.id, env.occurred_at, event.move_id, source, purpose)
        else:
            sid = st.by_text.get(event.segment_id)
            if sid is None:
                return
            item = InFlight(event.server, "drop", sid, env.occurred_at, event.move_id)
            if event.move_id is not None:  # tell the load half where it moves from
                for cid, q in sorted(st.queue.items()):
                    if q.move_id == event.move_id and q.action == "load" and q.source is None:
                        st.enqueue(cid, InFlight(q.server, q.action, q.segment, q.sent_at, q.move_id,
                                                 event.server, q.purpose))
        known = st.queue.get(env.event_id)
        if known is not None:
            item = InFlight(item.server, item.action, item.segment, known.sent_at, item.move_id,
                            item.source or known.source, item.purpose)
        st.enqueue(env.event_id, item)

    # -- planning ------------------------------------------------------------------------------
    def _may_decide(self) -> bool:
        """False when a plan cannot decide anything: no server to command, and every rule loads replicas
        (no drop rule, no zero-replica load), so nothing can be marked unused either. Skipping those runs keeps
        a stream without servers (replays, crash tests) as fast as the timeline agent alone."""
        st = self.state
        if any(f.joined for f in st.servers.values()):
            return True
        return any(not rule.type.startswith("load") or sum(n for _, n in rule.replicants) == 0
                   for _, rules in st.rules.entries for rule in rules)

    def _plan_and_emit(self, now: int, position: tuple[str, int, int], cause: str | None) -> int:
        st = self.state
        st.runs += 1
        result = plan(st.view(now, st.runs, self.load_timeout_ms), compute_cost=False)
        self.last_plan = result
        return self._emit(result, now, position, cause)

    def _emit(self, result: Plan, now: int, position: tuple[str, int, int], cause: str | None) -> int:
        topic, partition, offset = position
        st = self.state
        index = 0

        def next_id() -> str:
            nonlocal index
            out = derived_event_id(topic, partition, offset, index)
            index += 1
            return out

        for cmd in result.commands:
            self._emit_command(cmd, now, next_id, cause)
        by_source: dict[str, list[tuple[SegmentId, str]]] = {}
        for sid, reason in result.mark_unused:
            by_source.setdefault(sid.data_source, []).append((sid, reason))
        for ds, marks in sorted(by_source.items()):
            texts = tuple(str(s) for s, _ in sorted(marks))
            reason = "; ".join(sorted({r for _, r in marks}))
            self.sink.send(Envelope(SegmentsMarkedUnused(segment_ids=texts, reason=reason), next_id(),
                                    Instant(now), ds, cause))
            for sid, _ in marks:
                st.mark_unused(sid)
        self.counters.emitted += index
        return index

    def _emit_command(self, cmd: PlanCommand, now: int, next_id: Any, cause: str | None) -> None:
        st = self.state
        seg = st.segments[cmd.segment]
        stage = str(cmd.stage)
        if cmd.type in ("load", "move"):
            load_id = next_id()
            move_id = load_id if cmd.type == "move" else None
            load = LoadSegment(command_id=load_id, server=cmd.server, segment=seg, stage=stage, reason=cmd.reason,
                               move_id=move_id)
            self.sink.send(Envelope(load, load_id, Instant(now), cmd.server, cause))
            purpose = "loading" if cmd.type == "load" else (
                "decommissioning" if cmd.reason.startswith("draining") else "balancing")
            st.enqueue(load_id, InFlight(cmd.server, "load", cmd.segment, now, move_id, cmd.source, purpose))
            if cmd.type == "move":
                assert cmd.source is not None
                drop_id = next_id()
                drop = DropSegment(command_id=drop_id, server=cmd.source, segment_id=str(cmd.segment), stage=stage,
                                   reason=cmd.reason, move_id=move_id)
                self.sink.send(Envelope(drop, drop_id, Instant(now), cmd.source, cause))
                st.enqueue(drop_id, InFlight(cmd.source, "drop", cmd.segment, now, move_id))
            return
        # drop, or cancel of a queued load: both a DropSegment (a historical drops what it has, or nothing)
        if cmd.type == "cancel":
            for cid, item in sorted(st.queue.items()):
                if item.server == cmd.server and item.segment == cmd.segment and item.action == "load":
                    st.settle(cid)
        drop_id = next_id()
        reason = cmd.reason if cmd.type == "drop" else f"cancel: {cmd.reason}"
        drop = DropSegment(command_id=drop_id, server=cmd.server, segment_id=str(cmd.segment), stage=stage,
                           reason=reason)
        self.sink.send(Envelope(drop, drop_id, Instant(now), cmd.server, cause))
        st.enqueue(drop_id, InFlight(cmd.server, "drop", cmd.segment, now))

    # -- persistence -----------------------------------------------------------------------------
    def _meta(self) -> bytes:
        st = self.state
        return orjson.dumps({"start": st.start, "lastEventAt": st.last_event_at, "runs": st.runs})

    def _commit(self, batch: StoreBatch) -> None:
        st = self.state
        for key in sorted(st.dirty):
            _stage(st, batch, key)
        for cid in sorted(st.answered_now):
            batch.put(ANSWERED_PREFIX + cid.encode(), b"")
        batch.put(META_KEY, self._meta())
        st.dirty.clear()
        st.answered_now.clear()
        self.store.commit(batch)

    def _bad(self, rec: InputRecord, reason: str) -> None:
        """Bad records on ``segments`` are the timeline agent's to dead-letter; the others go to ``deadletter``."""
        c = self.counters
        c.last_reasons = [*c.last_reasons[-9:], reason]
        if rec.topic == self.topics.name(SEGMENTS):
            c.skipped += 1
            return
        self.sink.send(dead_letter_of(rec, reason))
        c.dead_lettered += 1


def _stage(st: PlannerState, batch: StoreBatch, key: bytes) -> None:
    if key.startswith(SEG_PREFIX):
        sid = parse_id_key(key[len(SEG_PREFIX):])
        seg = st.segments.get(sid)
        if seg is None or st.forgettable(sid):
            st.segments.pop(sid, None)
            batch.delete(key)
        else:
            batch.put(key, orjson.dumps({"segment": encode_record(seg), "used": sid in st.used}))
    elif key.startswith(HELD_PREFIX):
        server, _, raw = key[len(HELD_PREFIX):].partition(b"\x00")
        if parse_id_key(raw) in st.held.get(server.decode(), ()):
            batch.put(key, b"")
        else:
            batch.delete(key)
    elif key.startswith(SRV_PREFIX):
        f = st.servers.get(key[len(SRV_PREFIX):].decode())
        if f is None:
            batch.delete(key)
        else:
            batch.put(key, orjson.dumps({"tier": f.tier, "maxSizeBytes": f.max_size_bytes,
                                         "decommissioning": f.decommissioning, "joined": f.joined}))
    elif key.startswith(QUEUE_PREFIX):
        item = st.queue.get(key[len(QUEUE_PREFIX):].decode())
        if item is None:
            batch.delete(key)
        else:
            batch.put(key, item.to_bytes())
    elif key.startswith(RULES_PREFIX):
        batch.put(key, orjson.dumps(st.rules_json[key[len(RULES_PREFIX):].decode()]))
    elif key == CONFIG_KEY:
        batch.put(key, orjson.dumps(st.config_json))


def load_state(store: AgentStateStore) -> PlannerState:
    """The planner's state as last committed (empty store: a fresh cluster)."""
    st = PlannerState()
    for k, v in store.scan(SEG_PREFIX):
        sid = parse_id_key(k[len(SEG_PREFIX):])
        obj = orjson.loads(v)
        st.segments[sid] = decode_record(SegmentDescriptor, obj["segment"], "segment")
        st.by_text[str(sid)] = sid
        if obj["used"]:
            st.used.add(sid)
    for k, _ in store.scan(HELD_PREFIX):
        server, _, raw = k[len(HELD_PREFIX):].partition(b"\x00")
        st.held.setdefault(server.decode(), set()).add(parse_id_key(raw))
    for k, v in store.scan(SRV_PREFIX):
        o = orjson.loads(v)
        st.servers[k[len(SRV_PREFIX):].decode()] = ServerFacts(o["tier"], o["maxSizeBytes"], o["decommissioning"],
                                                               o["joined"])
    for k, v in store.scan(QUEUE_PREFIX):
        st.queue[k[len(QUEUE_PREFIX):].decode()] = InFlight.from_bytes(v)
    for k, v in store.scan(RULES_PREFIX):
        ds = k[len(RULES_PREFIX):].decode()
        st.rules_json[ds] = orjson.loads(v)
    for ds, raw in sorted(st.rules_json.items()):
        st.rules = st.rules.with_rules(ds, parse_rules(raw, f"rules.{ds}"))
    config = store.get(CONFIG_KEY)
    if config is not None:
        st.config_json = orjson.loads(config)
        st.config = DynamicConfig().updated(st.config_json)
    meta = store.get(META_KEY)
    if meta is not None:
        m = orjson.loads(meta)
        st.start, st.last_event_at, st.runs = m["start"], m["lastEventAt"], m["runs"]
    return st
