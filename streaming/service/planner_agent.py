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
  command's id (or by an announce/unannounce of the same server and segment),
  or withdrawn by a ``CancelSegmentLoad``; it times out ``load_timeout_ms``
  after it was sent. Every settled id is stored, also one answered before the
  agent read the command back (after a crash the answer can come first), so a
  late copy never re-enters the queue. The agent adds what it
  emits to the queues at once (the next plan must see it) and also reads
  ``commands`` back: the log's copy of a command wins over the in-memory one,
  and commands of others (the Spark balancer) join the queues.

**When it plans.** After every batch (the worker takes up to 1000 records
within 10 ms) holding an input that can change the plan (a publish, an unused
mark, an announce/unannounce, a server, rule or config change, a refusal), with
``now`` = the latest ``occurred_at`` applied (event time, never the wall clock),
so an input's commands go out at once; one plan per batch, not per record, keeps
a burst of 1000 publishes at one plan instead of 1000.
Also on the timer (:meth:`tick`), with ``now`` = the wall clock the shell passes
in (again never earlier than the latest event time), which retries timed-out
loads and marks overshadowed segments unused once ``millisToWaitBeforeDeleting``
has passed since the coordinator start (= the earliest event time the agent ever
applied, stored: a minimum, so it does not depend on how Kafka interleaved the
first inputs of its three topics).
An announce or unannounce that answers one of its own commands changes nothing
the plan would decide (the copy was already counted), so it triggers a run only
when the last run left loads undone for lack of queue room or by the
replication throttle (the answer frees room); other answers wait for the timer.
Balancing (stages 7, 10, 11) runs on the timer and after batches holding a
server, rule or config change, not after every publish or announce: those get
their loads and drops at once, their moves at the next timer run, as Druid
balances once per coordinator period. With ``balancing=False`` (the Spark
balancer makes the moves) it never balances. Per-server cost caches stay alive
across runs in a :class:`~coordinator.planner.cost_shelf.CostCacheShelf`
(reconciled to each run's placement; the plans are those of fresh caches).

**Commands.** ``load`` / ``move`` -> a ``LoadSegment`` (a move's also a
``DropSegment`` on the source sharing the ``moveId``), ``drop`` -> a
``DropSegment``, ``cancel`` -> a ``CancelSegmentLoad`` naming the queued load it
withdraws (``cancels``). A cancel leaves the queues at once, with the load it
names (and a move's drop half): if the server had not run the load it answers
with a ``SegmentLoadRefused`` of it; if it had, the announce arrives, the copy is
one too many, and a later plan drops it. The cancel itself needs no answer.

**Ids.** A command's id is a pure function of WHAT it commands, never of when or
why: ``command_id(kind, server, segment, n)`` (blake2b) with kind ``load``, or
``move`` with the source server added, or ``drop``, where ``n`` is the first
count whose id the agent does not know yet (known: in its queue, or settled
in its store or in the batch being built; every command the agent sends or reads
back on ``commands`` is one or the other until the end of time, as settled ids are
never forgotten). So the same decision gets the same id until a command with that
id has been sent and taken into the state, and after that a repeat of the
decision (a load after its copy was dropped, a retry after a timeout) gets the
next ``n``. A move's drop half is ``command_id("move-drop", moveId)``; a cancel is
``command_id("cancel", cancels)`` (one cancel per load), or counted like the
others when it names no load. The ``moveId`` is the id of the load half.
Stage, reason, ``occurred_at`` and causation are explanation, not identity:
two emissions under one id may differ in them (a re-plan after a crash can reach
the same decision in another stage); receivers keep the first copy. An id is
never reused for other content: it hashes the content itself. Unused marks
(``SegmentsMarkedUnused`` on ``segments``) keep ids from the position of the
plan's trigger, ``derived_event_id("planner:" + topic, partition, offset,
index)`` (salted so they never equal the timeline agent's ids of the same input),
or for a timer run ``n``, ``derived_event_id("planner:timer:" + commands topic,
0, n, index)`` with the run counter stored: a mark is idempotent, so a re-plan
that marks again under another id costs a duplicate that changes nothing.

**Exactly-once effect.** Per batch: fold + plan + emit, flush, then ONE write
batch commits the touched facts, the queues, the settled ids, the run counter,
the next offsets and the applied input ids. A crash before the commit
re-processes the same inputs from the same stored state. Batches are cut by
arrival and Kafka orders nothing across the three topics, so the re-processing
may cut or interleave differently and plan at other points; because ids are
content-derived, a decision taken again (before the agent has read its
pre-crash copy back from ``commands``) gets the id it had, and consumers drop the
copy. Once the pre-crash copy is read back it is in the queue (the log's copy
wins), so the plan counts it instead of deciding it again. What a re-plan may
still do is decide *differently* (another server for a replica): then both
commands stand, as any two decisions do, and the next plans trim the excess. A
timer run that has something to emit first commits its run number (so no mark id
is ever reused for other content), then emits and commits like a batch; a crash
in between loses that run's output, which the next run plans again. Crash tests
can make the process SIGKILL itself in the flush-to-commit window
(``SEGCOORD_PLANNER_FAULT``, see :func:`_fault_point`; unset, it costs one
environment lookup per emitting batch).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from coordinator.planner.cluster import ClusterView, QueueItem, Server, ServerState
from coordinator.planner.cost_shelf import CostCacheShelf
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
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import Envelope
from events.ids import derived_event_id
from events.registry import Event
from events.schema import EventValidationError, Instant, decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming.inflight import DEFAULT_LOAD_TIMEOUT_MS, InFlight, ServerFacts
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, seen
from streaming.service.state import AgentStateStore, StoreBatch
from streaming.service.timeline_facts import id_key, parse_id_key

FORMAT_VERSION = "planner-agent/1"
STORE_NAME = "planner"
FAULT_ENV = "SEGCOORD_PLANNER_FAULT"  # crash tests only: see _fault_point

SEG_PREFIX = b"seg/"      # id key -> {"segment", "used"}
HELD_PREFIX = b"held/"    # server \x00 id key -> b""
SRV_PREFIX = b"srv/"      # server -> {"tier", "maxSizeBytes", "decommissioning", "joined"}
QUEUE_PREFIX = b"q/"      # command event id -> in-flight command JSON
ANSWERED_PREFIX = b"ans/"  # command event id -> b""
RULES_PREFIX = b"rules/"  # data source -> rules JSON
CONFIG_KEY = b"config"
META_KEY = b"meta"


def command_id(*content: str) -> str:
    """A command's id: a pure function of what it commands (see the module docstring, **Ids**).

    >>> command_id("load", "h1", "wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1", "0")
    'b284393f2b6a345853b75188ea3b3387'
    >>> command_id("load", "h1", "s", "0") != command_id("load", "h1", "s", "1")
    True
    """
    text = "\x00".join(("planner-command", *content)).encode()
    return hashlib.blake2b(text, digest_size=16).hexdigest()


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
    # indexes of ``queue`` (kept by enqueue/settle/index): command ids per (server, segment) and per move id,
    # in-flight commands per segment; every lookup the agent makes per event is O(1), not a queue scan
    by_place: dict[tuple[str, SegmentId], set[str]] = field(default_factory=dict)
    by_move: dict[str, set[str]] = field(default_factory=dict)
    in_flight: dict[SegmentId, int] = field(default_factory=dict)

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
        self.index(command_id, item)
        self.dirty.add(QUEUE_PREFIX + command_id.encode())

    def index(self, command_id: str, item: InFlight) -> None:
        """Put ``item`` in the queue and its indexes (replacing an item of the same id)."""
        self._unindex(command_id)
        self.queue[command_id] = item
        self.by_place.setdefault((item.server, item.segment), set()).add(command_id)
        if item.move_id is not None:
            self.by_move.setdefault(item.move_id, set()).add(command_id)
        self.in_flight[item.segment] = self.in_flight.get(item.segment, 0) + 1

    def _unindex(self, command_id: str) -> InFlight | None:
        item = self.queue.pop(command_id, None)
        if item is None:
            return None
        place = (item.server, item.segment)
        self.by_place[place].discard(command_id)
        if not self.by_place[place]:
            del self.by_place[place]
        if item.move_id is not None:
            self.by_move[item.move_id].discard(command_id)
            if not self.by_move[item.move_id]:
                del self.by_move[item.move_id]
        left = self.in_flight[item.segment] - 1
        if left:
            self.in_flight[item.segment] = left
        else:
            del self.in_flight[item.segment]
        return item

    def settle(self, command_id: str) -> InFlight | None:
        item = self._unindex(command_id)
        self.answered_now.add(command_id)
        self.dirty.add(QUEUE_PREFIX + command_id.encode())
        return item

    def queued_at(self, server: str, sid: SegmentId, action: str | None = None) -> list[str]:
        """Ids of the commands in flight for ``sid`` on ``server`` (of ``action`` when given), sorted."""
        return sorted(cid for cid in self.by_place.get((server, sid), ())
                      if action is None or self.queue[cid].action == action)

    def of_move(self, move_id: str) -> list[str]:
        """Ids of the commands in flight of one move (its load and drop halves), sorted."""
        return sorted(self.by_move.get(move_id, ()))

    def settle_matching(self, server: str, sid: SegmentId, action: str) -> None:
        for cid in self.queued_at(server, sid, action):
            self.settle(cid)

    def forgettable(self, sid: SegmentId) -> bool:
        return sid not in self.used and not any(sid in h for h in self.held.values()) and \
            sid not in self.in_flight

    # -- the view ---------------------------------------------------------------------------
    def view(self, now: int, run: int, load_timeout_ms: int) -> ClusterView:
        for cid, item in sorted(self.queue.items()):
            if now - item.sent_at > load_timeout_ms:
                self.settle(cid)  # timed out: no longer in flight
        queues: dict[str, list[QueueItem]] = {}
        queued: set[tuple[str, SegmentId]] = set()
        for _cid, item in sorted(self.queue.items(), key=lambda kv: (kv[1].sent_at, kv[0])):
            if item.action == "drop" and item.move_id is not None:
                continue  # the source half of a move: the view models it by the load's ``source``
            if (item.server, item.segment) in queued:
                continue  # at most one item per segment and server
            queued.add((item.server, item.segment))
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
                 load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS, *, balancing: bool = True) -> None:
        self.store = store
        self.balancing = balancing  # False: the Spark balancer makes the moves (stages 7, 10, 11 skipped)
        self.shelf = CostCacheShelf()  # per-server cost caches kept across runs (plans as fresh ones would)
        # the last run left loads undone for lack of queue room or by the replication throttle: answers that
        # free room then trigger a run; otherwise an answer to our own command changes nothing to plan
        self.loading_blocked = True
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
        cluster_changed = False
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
            st.start = env.occurred_at if st.start is None else min(st.start, env.occurred_at)
            st.last_event_at = max(st.last_event_at, env.occurred_at)
            if triggers:
                trigger = (("planner:" + rec.topic, rec.partition, rec.offset), env.event_id)
                cluster_changed |= logical == CLUSTER
        emitted = 0
        if trigger is not None and self._may_decide():
            emitted = self._plan_and_emit(self.state.last_event_at, *trigger, balance=cluster_changed)
        self.sink.flush()
        if emitted:
            _fault_point(self._next)
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
        view = st.view(now, run, self.load_timeout_ms)
        self.shelf.forget(view.servers)
        result = plan(view, compute_cost=False, balance=self.balancing, shelf=self.shelf)
        self.loading_blocked = _loading_blocked(result)
        if not result.commands and not result.mark_unused:
            return 0
        st.runs = run
        pre = self.store.batch()  # the run number first: its ids are never reused for other content
        pre.put(META_KEY, self._meta())
        self.store.commit(pre)
        emitted = self._emit(result, now, ("planner:timer:" + self.topics.name(COMMANDS), 0, run), None)
        self.sink.flush()
        if emitted:
            _fault_point(self._next, run)
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
            expected = (cause is not None and cause in st.queue) or bool(
                st.queued_at(event.server, event.segment.id, "load"))
            if cause is not None:
                st.settle(cause)  # also when not read back yet: its copy is then known as answered
            st.settle_matching(event.server, event.segment.id, "load")
            return not expected or self.loading_blocked
        if isinstance(event, SegmentUnannounced):
            sid = st.by_text.get(event.segment_id)
            expected = (cause is not None and cause in st.queue) or (
                sid is not None and bool(st.queued_at(event.server, sid, "drop")))
            if cause is not None:
                st.settle(cause)
            if sid is not None:
                st.hold(event.server, sid, False)
                st.settle_matching(event.server, sid, "drop")
            return not expected or self.loading_blocked
        if isinstance(event, SegmentLoadRefused):
            st.settle(event.command_id)
            if cause is not None:
                st.settle(cause)
            if event.move_id is not None:  # the source keeps its copy: the drop half is abandoned
                for cid in st.of_move(event.move_id):
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
        if isinstance(event, CancelSegmentLoad):
            sid = st.by_text.get(event.segment_id)
            if event.cancels is not None or sid is not None:
                self._cancelled(env.event_id, event.server, sid, event.cancels)
            else:
                st.settle(env.event_id)
            return
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
                source = next((st.queue[c].source for c in st.of_move(event.move_id) if st.queue[c].source), None)
            item = InFlight(event.server, "load", event.segment.id, env.occurred_at, event.move_id, source, purpose)
        else:
            sid = st.by_text.get(event.segment_id)
            if sid is None:
                return
            item = InFlight(event.server, "drop", sid, env.occurred_at, event.move_id)
            if event.move_id is not None:  # tell the load half where it moves from
                for cid in st.of_move(event.move_id):
                    q = st.queue[cid]
                    if q.action == "load" and q.source is None:
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

    def _plan_and_emit(self, now: int, position: tuple[str, int, int], cause: str | None, *,
                       balance: bool) -> int:
        """An input-triggered run. It balances only after a server, rule or config change: publishes and
        announces (the bulk of the input) get their loads and drops at once, and the moves they may call for
        wait for the timer's run (Druid balances once per coordinator period too), which keeps a batch's
        planning cost at its loading work."""
        st = self.state
        st.runs += 1
        result = plan(st.view(now, st.runs, self.load_timeout_ms), compute_cost=False,
                      balance=balance and self.balancing, shelf=self.shelf)
        self.loading_blocked = _loading_blocked(result)
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
            self._emit_command(cmd, now, cause)
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
        self.counters.emitted += index + len(result.commands)
        return index + len(result.commands)

    def _known(self, command_id: str) -> bool:
        """Whether a command with this id was sent or read back: in flight, or settled (committed or not)."""
        st = self.state
        return command_id in st.queue or command_id in st.answered_now or \
            self.store.get(ANSWERED_PREFIX + command_id.encode()) is not None

    def _fresh_id(self, *content: str) -> str:
        """The id of the next command of this content: ``n`` is the first count no known command holds."""
        n = 0
        while self._known(command_id(*content, str(n))):
            n += 1
        return command_id(*content, str(n))

    def _emit_command(self, cmd: PlanCommand, now: int, cause: str | None) -> None:
        st = self.state
        seg = st.segments[cmd.segment]
        stage, sid_text = str(cmd.stage), str(cmd.segment)
        if cmd.type in ("load", "move"):
            if cmd.type == "move":
                assert cmd.source is not None
                load_id = self._fresh_id("move", cmd.server, cmd.source, sid_text)
            else:
                load_id = self._fresh_id("load", cmd.server, sid_text)
            move_id = load_id if cmd.type == "move" else None
            load = LoadSegment(command_id=load_id, server=cmd.server, segment=seg, stage=stage, reason=cmd.reason,
                               move_id=move_id)
            self.sink.send(Envelope(load, load_id, Instant(now), cmd.server, cause))
            purpose = "loading" if cmd.type == "load" else (
                "decommissioning" if cmd.reason.startswith("draining") else "balancing")
            st.enqueue(load_id, InFlight(cmd.server, "load", cmd.segment, now, move_id, cmd.source, purpose))
            if move_id is not None:
                assert cmd.source is not None
                drop_id = command_id("move-drop", move_id)  # one drop half per move
                drop = DropSegment(command_id=drop_id, server=cmd.source, segment_id=sid_text, stage=stage,
                                   reason=cmd.reason, move_id=move_id)
                self.sink.send(Envelope(drop, drop_id, Instant(now), cmd.source, cause))
                st.enqueue(drop_id, InFlight(cmd.source, "drop", cmd.segment, now, move_id))
            return
        if cmd.type == "cancel":
            loads = sorted((st.queue[cid].sent_at, cid) for cid in st.queued_at(cmd.server, cmd.segment, "load"))
            cancels = loads[0][1] if loads else None  # the one the view showed
            cancel_id = command_id("cancel", cancels) if cancels is not None else \
                self._fresh_id("cancel", cmd.server, sid_text)
            cancel = CancelSegmentLoad(command_id=cancel_id, server=cmd.server, segment_id=sid_text,
                                       reason=cmd.reason, cancels=cancels)
            self.sink.send(Envelope(cancel, cancel_id, Instant(now), cmd.server, cause))
            self._cancelled(cancel_id, cmd.server, cmd.segment, cancels)
            return
        drop_id = self._fresh_id("drop", cmd.server, sid_text)
        drop = DropSegment(command_id=drop_id, server=cmd.server, segment_id=sid_text, stage=stage,
                           reason=cmd.reason)
        self.sink.send(Envelope(drop, drop_id, Instant(now), cmd.server, cause))
        st.enqueue(drop_id, InFlight(cmd.server, "drop", cmd.segment, now))

    def _cancelled(self, cancel_id: str, server: str, sid: SegmentId | None, cancels: str | None) -> None:
        """A cancel is out of the queues at once: the load it names (else the server's queued loads of the
        segment), a move's drop half with it, and the cancel itself (it needs no answer)."""
        st = self.state
        targets = [cancels] if cancels is not None else (
            st.queued_at(server, sid, "load") if sid is not None else [])
        for cid in targets:
            item = st.settle(cid)
            if item is not None and item.move_id is not None:
                for other in st.of_move(item.move_id):
                    if st.queue[other].action == "drop":
                        st.settle(other)
        st.settle(cancel_id)

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


def _fault_point(offsets: dict[tuple[str, int], int], salt: int = 0) -> None:
    """Fault injection for crash tests, off unless ``SEGCOORD_PLANNER_FAULT=kill-after-flush:P:SEED``: then,
    with probability P (drawn from a generator seeded by SEED, the input position and ``salt``), the process
    SIGKILLs itself between the flush of what a plan emitted and the commit of the batch, the one window in
    which a crash makes the agent re-plan decisions whose commands already reached the log."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("kill-after-flush:"):
        return
    _, probability, seed = spec.split(":")
    position = ",".join(f"{t}/{p}/{o}" for (t, p), o in sorted(offsets.items()))
    if random.Random(f"{seed}|{position}|{salt}").random() < float(probability):
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


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
            batch.put(key, orjson.dumps(item.to_json(id_key(item.segment).decode())))
    elif key.startswith(RULES_PREFIX):
        batch.put(key, orjson.dumps(st.rules_json[key[len(RULES_PREFIX):].decode()]))
    elif key == CONFIG_KEY:
        batch.put(key, orjson.dumps(st.config_json))


def _loading_blocked(result: Plan) -> bool:
    return any(result.metrics.get(k) for k in ("segment/assignSkipped/count", "segment/replicationThrottled/count"))


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
        o = orjson.loads(v)
        st.index(k[len(QUEUE_PREFIX):].decode(), InFlight.from_json(o, parse_id_key(o["segment"].encode())))
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
