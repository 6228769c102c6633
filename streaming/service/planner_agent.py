"""The planner agent: ``segments`` + ``cluster`` + ``commands`` -> cluster view -> pure ``plan`` -> commands.

It is transport-free like the other agents: :meth:`PlannerAgent.process` takes a
batch of raw input records, :meth:`PlannerAgent.tick` is the timer; the Faust
worker of :mod:`streaming.service.app` feeds both (one event loop, so never at
the same time).

**The view** (what :func:`coordinator.planner.planner.plan` needs), folded from the log:

- servers from ``ServerJoined`` (tier, max size), ``ServerLeft`` and ``ServerLost`` (out of
  the view at once, so the plan re-replicates what it held), ``ServerDecommissioned`` /
  ``ServerRecommissioned``, and when each was last heard of (``ServerHeartbeat`` and the
  server's own events);
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
balancer makes the moves) it never balances.
The timer's look at every segment (its first tick, then every ``FULL_RUN_EVERY_MS``) is a
:class:`~coordinator.planner.sweep.Sweep`: the tick begins it and takes its first slice, the shell takes
the others between batches (:meth:`next_slice`, in turns with a balancing run's), each a scoped run of
``sweep_chunk`` segments; its cursor and drains are committed with every slice and resumed after a restart
(``sweep_chunk`` 0, or ``incremental=False``: the timer's run is one full run, as before).
Per-server cost caches stay alive across runs in a :class:`~coordinator.planner.cost_shelf.CostCacheShelf`
(reconciled to each run's placement; the plans are those of fresh caches).

**Liveness** (:mod:`coordinator.placement.liveness`, docs/liveness.md). Folding a
``ServerLeft`` or ``ServerLost`` emits a ``SegmentUnannounced`` (reason: the departure) of
every segment the fold still shows the server holding, in the same batch (folded at once and
marked applied, so reading it back changes nothing), so the timeline,
the feed, the queryable view and replay unannounce them too. A timer run first decides
``ServerLost`` for every joined server silent for more than ``server_timeout_ms`` (event
time of its last heartbeat against the shell's clock), but only once the agent itself has
run that long (before, it may not have read the heartbeats yet); the decision is not folded
until read back from ``cluster``, like any other server event. While catching up
(:attr:`catching_up`, a newly elected worker folding a log its predecessor already acted on)
these unannounces, and those of announces by servers not joined, are deferred: one the rest
of the log settles (its original, or a later announce or unannounce of the same server and
segment) is dropped, and :meth:`finish_catch_up` sends the others, and unannounces whatever the
fold still shows a server that is not joined holding (what a catch-up cut short left undecided).

**Commands.** ``load`` / ``move`` -> a ``LoadSegment`` (a move's also a
``DropSegment`` on the source sharing the ``moveId``), ``drop`` -> a
``DropSegment``, each with the ``purpose`` the planner gave the decision (a move's two
halves share it), ``cancel`` -> a ``CancelSegmentLoad`` naming the queued load it
withdraws (``cancels``). A cancel leaves the queues at once, with the load it
names (and a move's drop half): if the server had not run the load it answers
with a ``SegmentLoadRefused`` of it; if it had, the announce arrives, the copy is
one too many, and a later plan drops it. The cancel itself needs no answer.

**Ids.** A command's id is a pure function of WHAT it commands, never of when or
why: ``command_id(kind, server, segment, n)`` (blake2b) with kind ``load``, or
``move`` with the source server added, or ``drop``, where ``n`` is the first
count whose id the agent does not know yet (known: in its queue, or settled
in its store or in the batch being built; every command the agent sends or reads
back on ``commands`` is one or the other while its segment is known and for the
settled-id window after, :mod:`coordinator.placement.settled`). So the same
decision gets the same id until a command with that id has been sent and taken
into the state, and after that a repeat of the decision (a load after its copy
was dropped, a retry after a timeout) gets the next ``n``. A move's drop half is
``command_id("move-drop", moveId)``; a cancel is ``command_id("cancel", cancels)``
(one cancel per load), or counted like the others when it names no load. The ``moveId`` is the id of the load half.
Stage, reason, ``occurred_at`` and causation are explanation, not identity:
two emissions under one id may differ in them (a re-plan after a crash can reach
the same decision in another stage); receivers keep the first copy. An id is
never reused for other content: it hashes the content itself. Unused marks
(``SegmentsMarkedUnused`` on ``segments``) keep ids from the position of the
plan's trigger, ``derived_event_id("planner:" + topic, partition, offset,
index)`` (salted so they never equal the timeline agent's ids of the same input),
or for a timer run ``n``, ``derived_event_id("planner:timer:" + salt + commands topic,
0, n, index)`` with the run counter stored: a mark is idempotent, so a re-plan
that marks again under another id costs a duplicate that changes nothing.

**Exactly-once effect.** Per batch: fold + plan + emit, flush, then ONE write
batch commits the touched facts, the queues, the settled ids, the run counter,
the next offsets and the applied input ids. A crash before the commit
re-processes the same inputs from the same stored state. A batch that sent nothing and changed no stored
entry (its own commands read back, each already in its queue as stored, or already settled; the fold marked
nothing dirty and its event times did not move) is not committed on its own: its offsets go with the next commit
(the next batch's, or the next timer run's, or once ``PENDING_MAX`` records wait). A crash before that commit
re-reads those records from the stored offsets and folds them to the same state (each is a no-op again). At low
rates a publish reaches the planner in about three batches (the publish, its loads read back, the announces):
one write batch less per publish. (Deferring every batch that sends nothing, the announces too, would save
another; it was tried and left out, as the store would then lag the fold by design, which the tests that read
the store after each batch pin.) Batches are cut by
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

import logging
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

from coordinator.balancer.cost_index import ClusterCostIndex, build_index
from coordinator.locks.seal import seal_event
from coordinator.placement import codec, fence
from coordinator.placement.liveness import (
    DEFAULT_SERVER_TIMEOUT_MS,
    server_lost,
    silent_servers,
    unannounce_departed,
    unannounce_held_not_joined,
    unannounce_not_joined,
)
from coordinator.placement.projected import command_id
from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS
from coordinator.placement.settled import DEFAULT_WINDOW, SettledWindow
from coordinator.placement.state import PlacementState, Touched
from coordinator.planner.balancing import DEFAULT_PERIOD_MS, DEFAULT_SLICE_DRAWS, BalancingRun
from coordinator.planner.planner import FULL_RUN_EVERY_MS, Plan, PlanCommand, plan_state
from coordinator.planner.sweep import SWEEP_CHUNK, Sweep
from events.cluster import ServerLeft, ServerLost
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.compiled import constructor, trusted_constructor
from events.envelope import Envelope
from events.ids import derived_event_id
from events.schema import EventValidationError, Instant
from events.segment import SegmentId
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming import credentials
from streaming.service import stage_trace
from streaming.service.heap import collector_paused
from streaming.service.intake import AgentCounters, InputRecord, Sink, admit, dead_letter_of, prior_ids, seen_in
from streaming.service.state import AgentStateStore, StoreBatch

# entries of coordinator.placement.codec (v5: "ans" values name their segment, + "ans-of" index, + "gone";
# v4: + "epoch", v3: + "heard")
FORMAT_VERSION = "planner-agent/5"
SETTLED_INDEX = "ans-of"  # ans-of/<segment id text>\x00<command id> -> "": a segment's settled ids, for the window
STORE_NAME = "planner"
FAULT_ENV = "SEGCOORD_PLANNER_FAULT"  # crash tests only: see _fault_point
# A run's loads and drops are built from the planner's own values (content-derived ids, a server and a descriptor of
# the state, one of the planner's purposes) without their validating __init__ (10 -> 3 us each here); what they
# encode to is decoded and validated by every other reader, and unit-tested to decode back to the same event.
_load_segment = trusted_constructor(LoadSegment)
_drop_segment = trusted_constructor(DropSegment)
_envelope = constructor(Envelope)  # Envelope's __init__ only stores its fields
SWEEP_FAULT_SALT = 1 << 40  # sweep slices' kill points (_fault_point), apart from timer runs' and balancing's
PENDING_MAX = 2000  # records of batches that sent nothing kept uncommitted at most (a catch-up commits this often)
log = logging.getLogger("segcoord.service")

__all__ = ["FORMAT_VERSION", "STORE_NAME", "PlannerAgent", "command_id", "load_state"]


def _key(family: str, key: str) -> bytes:
    return f"{family}/{key}".encode()


def load_state(store: AgentStateStore, load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
               window: SettledWindow | None = DEFAULT_WINDOW) -> PlacementState:
    """The placement state as last committed (empty store: a fresh cluster)."""
    return _load(store, load_timeout_ms, window)[0]


def _load(store: AgentStateStore, load_timeout_ms: int,
          window: SettledWindow | None) -> tuple[PlacementState, dict[str, Any]]:
    with collector_paused():  # millions of objects that all stay: collections would scan them and free nothing
        entries = []
        for family in codec.FAMILIES:
            if family == "ans":
                continue  # looked up when needed, never loaded
            prefix = f"{family}/".encode()
            entries.extend((family, k[len(prefix):].decode(), v) for k, v in store.scan(prefix))
        return codec.restore(entries, load_timeout_ms,
                             settled_before=lambda cid: store.get(_key("ans", cid)) is not None,
                             settled_of=lambda text: settled_of(store, text), window=window)


def settled_of(store: AgentStateStore, text: str) -> list[str]:
    """The stored settled ids of one segment (id text): its ``ans-of`` index entries whose ``ans`` entry still
    names it (an id settled again for another segment is that one's)."""
    prefix = _key(SETTLED_INDEX, text + "\x00")
    out = []
    for key, _ in store.scan(prefix):
        cid = key[len(prefix):].decode()
        if store.get(_key("ans", cid)) == text.encode():
            out.append(cid)
    return out


class PlannerAgent:
    """The placement fold, its store and its sink; one instance per process, single-threaded."""

    def __init__(self, store: AgentStateStore, topics: Topics, sink: Sink,
                 load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS, *, balancing: bool = True,
                 incremental: bool = True, server_timeout_ms: int = DEFAULT_SERVER_TIMEOUT_MS,
                 period_ms: int = DEFAULT_PERIOD_MS, slice_draws: int = DEFAULT_SLICE_DRAWS,
                 publish_key: bytes | None = None, settled_window: SettledWindow | None = DEFAULT_WINDOW) -> None:
        if period_ms < 1 or slice_draws < 1:
            raise ValueError(f"period_ms and slice_draws: at least 1, got {period_ms} and {slice_draws}")
        self.store = store
        self.publish_key = publish_key if publish_key is not None else credentials.publish_key()
        self.server_timeout_ms = server_timeout_ms
        self._first_tick: int | None = None  # the shell's clock at the first timer run of this process
        self._lost_sent: dict[str, int] = {}  # server -> last heard, of the ServerLost sent and not read back yet
        self.balancing = balancing  # False: the Spark balancer makes the moves (stages 7, 10, 11 skipped)
        self._index_builder: Executor | None = None  # where tier cost index rebuilds are built (see its setter)
        self._index_jobs: dict[str, tuple[Future[ClusterCostIndex], ClusterCostIndex]] = {}  # tier -> its rebuild
        self.period_ms = period_ms  # druid.coordinator.period: one balancing run per period (event/timer time)
        self.slice_draws = slice_draws  # candidates one balancing slice may draw
        self.incremental = incremental  # False: every run looks at every segment (the reference)
        self.topics = topics
        self.input_topics = (topics.name(SEGMENTS), topics.name(CLUSTER), topics.name(COMMANDS))
        self._logical_of = {topics.name(t): t for t in (SEGMENTS, CLUSTER, COMMANDS)}
        self._commands_topic = topics.name(COMMANDS)
        self.sink = sink
        self.load_timeout_ms = load_timeout_ms
        self.counters = AgentCounters()
        self.state, meta = _load(store, load_timeout_ms, settled_window)
        self.runs: int = meta.get("runs", 0)
        self.balanced_at: int | None = meta.get("balancedAt")  # when the last balancing run began
        self.balancing_runs: int = meta.get("balancingRuns", 0)  # balancing runs begun (their seeds' run numbers)
        self.balance_requested: bool = meta.get("balanceRequested", False)  # a server, rule or config change
        self.balancing_run: BalancingRun | None = None  # the run in progress (slices left)
        resumed = meta.get("balancingRun")
        if resumed is not None and balancing and self.state.start is not None:
            # resumed under its run number: the same seeded draws, the moves already made count against its budget
            self.balancing_run = BalancingRun(self.state, now=resumed["started"], run=resumed["run"],
                                              start=self.state.start)
            self.balancing_run.moves.update(resumed["moved"])
        self.last_full_run: int | None = None  # event time of the last full run in this process (None: none yet)
        self.sweeps: int = meta.get("sweeps", 0)  # sweeps begun (the periodic full run in slices)
        self.sweep: Sweep | None = None  # the sweep in progress (slices left)
        resumed_sweep = meta.get("sweep")
        if resumed_sweep is not None and incremental:  # its cursor and drains as committed with its last slice
            self.sweep = Sweep.resume(resumed_sweep)
            # its marking starts over: the changes noted for the sources it judged before the restart were not
            # stored (a restored state asks for a whole-cluster marking, mark_all)
            self.sweep.marked = None
        self.sweep_chunk = SWEEP_CHUNK  # segments per sweep slice
        self._sweep_turn = True  # next_slice alternates between a sweep in progress and a balancing run
        self.deferred: set[SegmentId] = set()  # segments the last runs left short: in every next run's scope
        self._next = store.offsets()
        # the offsets and applied ids of batches that sent nothing, not committed yet: the next commit writes them
        # with the state (see "Exactly-once effect" in the module docstring); how many records they hold
        self._pending: StoreBatch | None = None
        self._pending_records = 0
        self.batches_since_start = 0
        self.catching_up = False  # True: fold only, never plan (a new leader reading up to the log's end)
        # (server, segment id) -> the coordinator's unannounce decided while catching up, not sent yet (finish_catch_up)
        self._deferred: dict[tuple[str, str], Envelope[SegmentUnannounced]] = {}
        # the elected planner's epoch ("<epoch>:"): run counters are per store, so two leaders' timer-run marks
        # would otherwise share ids for other content (streaming/service/planner_feed.py)
        self.timer_salt = ""
        # the elected planner's epoch, stamped on every command (``plannerEpoch``); None: no election (tests,
        # single-process tools). Once the fold reads a later epoch, this planner is deposed and decides nothing.
        self.epoch: int | None = None
        self.last_batch_size = 0
        self.last_plan: Plan | None = None
        # (plan, state, duration ms, the run's time, whether it looked at every segment)
        self.on_run: Callable[[Plan, PlacementState, float, int, bool], None] | None = None

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    # -- input ------------------------------------------------------------------------------
    def process(self, records: Sequence[InputRecord]) -> None:
        """Fold a batch, plan once after it when any input can change the plan, emit, flush, commit once."""
        carried = self._pending_records
        batch = self._batch()
        c = self.counters
        trigger: tuple[tuple[str, int, int], str] | None = None
        touched = Touched()
        causes: dict[SegmentId, str] = {}  # segment -> the last input of the batch that touched it
        logical_of = self._logical_of
        commands = self._commands_topic
        # commands are never looked up as applied (the log's copy of a command is always folded)
        others = [r for r in records if r.topic != commands]
        prior = prior_ids(others, self._next, self.store) if others else set()
        before = (c.emitted, c.dead_lettered, self.state.start, self.state.last_event_at)
        for rec in records:
            logical = logical_of.get(rec.topic) or self._logical(rec.topic)
            env = admit(rec, logical, self._next, batch, c, self._bad)
            if env is None:
                continue
            if logical != COMMANDS and seen_in(env, batch, prior, c):
                continue
            refused = rec.refusal(env, self.publish_key)  # only sealed publishes and marks (docs/security.md)
            if refused is not None:
                self._bad(rec, refused)
                continue
            try:
                t = self.state.evolve(env)
            except (EventValidationError, ValueError) as e:
                self._bad(rec, f"{env.event_type} {env.event_id}: {e}")
                continue
            c.applied += 1
            if isinstance(env.event, ServerLeft | ServerLost):
                self._lost_sent.pop(env.event.server, None)
                for unannounce in unannounce_departed(self.state, env):  # type: ignore[arg-type]
                    if self.catching_up:
                        self._defer(unannounce)
                        continue
                    self.sink.send(unannounce)  # folded at once, as the commands it decides; read back: a duplicate
                    touched.merge(self.state.evolve(unannounce))
                    batch.mark_applied(unannounce.event_id)
                    c.emitted += 1
            stale = unannounce_not_joined(self.state, env)  # an announce by a server that has not (re-)joined
            if stale is not None and self.catching_up:
                self._defer(stale)
            elif stale is not None:
                self.sink.send(stale)
                touched.merge(self.state.evolve(stale))
                batch.mark_applied(stale.event_id)
                c.emitted += 1
            elif self._deferred and isinstance(env.event, SegmentAnnounced | SegmentUnannounced):
                self._supersede(env.event)
            if logical == COMMANDS:
                continue  # the log's copy of a command: folded, never a trigger (it was planned already)
            batch.mark_applied(env.event_id, rec.timestamp_ms)
            touched.merge(t)
            if t.trigger:
                trigger = (("planner:" + rec.topic, rec.partition, rec.offset), env.event_id)
                causes.update(dict.fromkeys(t.segments, env.event_id))
        emitted = 0
        if touched.cluster and self.balancing:
            self.balance_requested = True  # balance again now, from the new cluster (the run in progress is stale)
        if trigger is not None and self._may_decide() and not (touched.answered_own and not self.deferred):
            emitted = self._plan_and_emit(self.state.last_event_at, touched, *trigger, causes)
        if self.balance_requested:  # the batch's own plan went out first; the balancing run's first slice follows
            emitted += self._balance_slice(self.state.last_event_at, start=True)
        st = self.state
        if (c.emitted, c.dead_lettered, st.start, st.last_event_at) == before and not st.dirty \
                and carried + len(records) < PENDING_MAX:
            # nothing sent and no stored entry changed (commands read back already in the state): the offsets wait
            self._pending, self._pending_records = batch, carried + len(records)
        else:
            self.sink.flush()
            if emitted:
                _fault_point(self._next)
            self._commit(batch)
        st.flush_index_deltas()  # a batch's changes into the tier cost indexes now, not a minute's at a balancing run
        self._tend_index_rebuilds()
        c.batches += 1
        self.batches_since_start += 1
        self.last_batch_size = len(records)

    def _defer(self, unannounce: Envelope[SegmentUnannounced]) -> None:
        self._deferred[(unannounce.event.server, unannounce.event.segment_id)] = unannounce

    def _supersede(self, event: SegmentAnnounced | SegmentUnannounced) -> None:
        """A later announce or unannounce of the pair read while catching up: the log has its own last word on it
        (the predecessor's unannounce, or the server's announce after it joined again), so the deferred one goes."""
        text = str(event.segment.id) if isinstance(event, SegmentAnnounced) else event.segment_id
        self._deferred.pop((event.server, text), None)

    def finish_catch_up(self) -> int:
        """End a catch-up: send, fold and commit the liveness unannounces deferred while it lasted that the rest of
        the log did not settle, and plan again from here. Returns how many were sent.

        While catching up, the agent folds a log its predecessor already acted on. The unannounces that folding a
        ``server_left`` / ``server_lost`` decides (:func:`unannounce_departed`), and those of an announce by a server
        not joined (:func:`unannounce_not_joined`), were mostly sent by the predecessor, under the same ids, minutes
        or days ago; sending them again at once reached consumers after their applied-id window had let the
        originals go (the soak's run 4: a timeline took a segment offline that its server had announced again since
        it rejoined). So they are deferred: one is dropped when the log shows a later word on its (server, segment)
        (the original unannounce, a later announce or unannounce), or when its id was applied (read back), and the
        rest, the decisions nobody sent (the predecessor died before it folded the departure), go out here.

        A catch-up that ends without finishing (deposed, or killed after it committed batches past a departure)
        loses what it deferred, so this also unannounces whatever the fold still shows a server that is not joined
        holding (:func:`~coordinator.placement.liveness.unannounce_held_not_joined`): after the deferred ones are
        folded that is exactly what such a cut-short catch-up left undecided, and it is called each time the feed
        has caught up after an election, with or without a catch-up."""
        self.catching_up = False
        deferred, self._deferred = list(self._deferred.values()), {}
        batch = self._batch()
        fresh = [u for u in deferred if not self.store.applied(u.event_id) and not batch.applied(u.event_id)]
        for unannounce in fresh:
            self.sink.send(unannounce)
            self.deferred |= self.state.evolve(unannounce).segments  # in the next run's scope (re-replication)
            batch.mark_applied(unannounce.event_id)
        left = [u for u in unannounce_held_not_joined(self.state)
                if not self.store.applied(u.event_id) and not batch.applied(u.event_id)]
        for unannounce in left:
            self.sink.send(unannounce)
            self.deferred |= self.state.evolve(unannounce).segments
            batch.mark_applied(unannounce.event_id)
        if not fresh and not left:
            self._commit(batch)  # what batches before it left uncommitted: the catch-up is over
            return 0
        self.sink.flush()
        self._commit(batch)
        self.counters.emitted += len(fresh) + len(left)
        return len(fresh) + len(left)

    def abandon_catch_up(self) -> None:
        """A catch-up cut short (deposed, stopped): its deferred unannounces are the next leader's to decide."""
        self.catching_up = False
        self._deferred = {}

    def tick(self, wall_ms: int) -> int:
        """A timer run at the shell's clock: returns the number of events emitted. It settles timed-out commands,
        plans what they and earlier runs left short, balances, marks overshadowed segments unused, and looks at
        every segment on its first tick and then every ``FULL_RUN_EVERY_MS`` (period rules move segments between
        rules as time passes). An incremental planner looks at every segment in a :class:`Sweep`: the tick begins
        it and takes its first slice, :meth:`next_slice` the others, between batches (a publish never waits for a
        whole full run); without ``incremental``, the tick's run is the full run."""
        st = self.state
        if st.start is None:
            return 0  # nothing ever happened
        now = max(wall_ms, st.last_event_at)
        self.decide_lost(wall_ms, now)
        expired = st.expire(now)
        if not self._may_decide():  # nothing can be decided: keep what timed out
            if st.dirty or self._pending is not None:
                self._commit(self._batch())
            return 0
        due = self.last_full_run is None or now - self.last_full_run >= FULL_RUN_EVERY_MS
        full = not self.incremental or (due and self.sweep_chunk <= 0)
        sweeping = self.incremental and self.sweep_chunk > 0
        # a whole-cluster marking (mark_all: the first after a start, or after the wait for deleting passed) is a
        # sweep's, in slices: the timer's own run then leaves marking to it
        wide = sweeping and st.mark_all and now >= st.start + st.config.millis_to_wait_before_deleting
        if sweeping and (due or wide) and self.sweep is None:
            self.sweeps += 1
            self.sweep = Sweep(run=self.sweeps, started=now)
        scope = None if full else expired.segments | self.deferred
        with stage_trace.held("timer-run" if scope is not None else "timer-full-run"):
            result = self._run(now, scope, balance=False, mark=not (sweeping and st.mark_all))
        emitted = 0
        if result.commands or result.mark_unused:
            self._commit_run_number()
            emitted = self._emit(result, now, ("planner:timer:" + self.timer_salt + self.topics.name(COMMANDS), 0,
                                               self.runs), None)
        swept = self.sweep is not None
        if swept:
            emitted += self._sweep_slice(now)
        emitted += self._balance_slice(now, start=True)
        self.sink.flush()
        if emitted:
            _fault_point(self._next, self.runs)
        # or timed-out commands settled (a move's drop half touches no projection), or batches left uncommitted, or
        # a sweep's progress
        if emitted or swept or st.dirty or self._pending is not None:
            self._commit(self._batch())
        return emitted

    def _commit_run_number(self, sweep: dict[str, Any] | None = None) -> None:
        """Commit the run counter before a run's marks go out: their ids are never reused for other content.
        ``sweep``: the progress to store with it (a sweep slice's: its cursor before the chunk, which a crash before
        the slice's own commit must plan again), else the sweep's as it is."""
        meta = self._meta()
        if sweep is not None:
            meta["sweep"] = sweep
        pre = self.store.batch()
        pre.put(_key("meta", ""), codec.value(self.state, "meta", "", meta) or b"")
        self.store.commit(pre)

    @property
    def slicing(self) -> bool:
        """Whether a sweep or a balancing run has slices left (the shell keeps calling :meth:`next_slice`)."""
        return self.sweep is not None or self.balancing_run is not None

    def next_slice(self, wall_ms: int) -> int:
        """One slice of the sweep or of the balancing run in progress (in turns when both are), at the shell's
        clock (never earlier than the latest event time), emitted, flushed and committed with its progress.
        Returns the events emitted (0 with nothing in progress)."""
        if self.sweep is not None and (self.balancing_run is None or self._sweep_turn):
            self._sweep_turn = False
            emitted = self._sweep_slice(max(wall_ms, self.state.last_event_at))
            self.sink.flush()
            if emitted:
                _fault_point(self._next, SWEEP_FAULT_SALT + self.runs)  # salted apart from the other kill points
            self._commit(self._batch())
            return emitted
        self._sweep_turn = True
        return self.balance_slice(wall_ms)

    def _sweep_slice(self, now: int) -> int:
        """Plan the sweep's next slice (a scoped run of its chunk of segments, or a marking slice judging whole data
        sources for overshadowed segments), emit what it decided; the caller flushes and commits. A sweep that
        cannot decide anything (no server, no rule that needs none) is given up: the next timer run begins
        another."""
        sweep = self.sweep
        if sweep is None:
            return 0
        if not self._may_decide():
            self.sweep = None
            if sweep.tail and sweep.judged:
                self.state.mark_all = True  # its marking did not judge every data source
            return 0
        before = sweep.progress()
        st = self.state
        part = sweep.next_slice(st, self.sweep_chunk)
        marking = part.mark_sources is not None
        if marking:
            if st.start is not None and now < st.start + st.config.millis_to_wait_before_deleting:
                sweep.judged = False  # too early to mark: a whole-cluster marking stays to do (mark_all)
            elif sweep.judged:
                # the whole-cluster marking is under way, source by source: from here on what changes is judged
                # around the change (mark_pending), by this sweep's next slices or by the timer's runs
                st.mark_all = False
        if part.final:
            self.sweep = None
            # (a full run after a server, rule or config change may have come since it began: the later counts)
            self.last_full_run = max(sweep.started, self.last_full_run or sweep.started)
        with stage_trace.held("sweep-marking" if marking else "sweep-slice"):
            result = self._run(now, part.scope, balance=False, mark=marking, drained=sweep.drained,
                               mark_sources=part.mark_sources)
        if not result.commands and not result.mark_unused:
            return 0
        if result.mark_unused:
            self._commit_run_number(before)
        return self._emit(result, now, ("planner:sweep:" + self.timer_salt + self.topics.name(COMMANDS), 0,
                                        self.runs), None)

    def decide_lost(self, wall_ms: int, now: int) -> int:
        """Send (and flush) a ``ServerLost`` for every server silent longer than ``server_timeout_ms`` at ``now``,
        once per silence; nothing before this process has run for ``server_timeout_ms`` by ``wall_ms``."""
        if self._first_tick is None:
            self._first_tick = wall_ms
        if self.superseded:
            return 0  # deposed: liveness is the next leader's to decide
        if wall_ms - self._first_tick < self.server_timeout_ms:
            return 0
        sent = 0
        for name, heard in silent_servers(self.state, now, self.server_timeout_ms):
            if self._lost_sent.get(name) == heard:
                continue  # decided, not read back yet
            self.sink.send(server_lost(self.state, name, now, self.server_timeout_ms))
            self._lost_sent[name] = heard
            sent += 1
        if sent:
            self.sink.flush()
            self.counters.emitted += sent
        return sent

    @property
    def balancing_in_progress(self) -> bool:
        """Whether a balancing run has slices left (the shell keeps calling :meth:`balance_slice` meanwhile)."""
        return self.balancing_run is not None

    def balance_slice(self, wall_ms: int) -> int:
        """One slice of the balancing run in progress, at the shell's clock (never earlier than the latest event
        time): at most ``slice_draws`` candidates, its moves emitted, flushed and committed with the run's
        progress. Returns the events emitted (0 with no run in progress). Between two slices the shell feeds
        batches to :meth:`process`, which plans them first: a publish never waits for a whole balancing run."""
        if self.balancing_run is None:
            return 0
        emitted = self._balance_slice(max(wall_ms, self.state.last_event_at), start=False)
        self._tend_index_rebuilds()
        self.sink.flush()
        if emitted:
            _fault_point(self._next, -self.balancing_runs)  # salted apart from the timer runs' kill points
        self._commit(self._batch())
        return emitted

    def build_index_rebuilds_on(self, executor: Executor) -> None:
        """Build the tier cost indexes' rebuilds on ``executor`` (a thread of the shell's), not on the planner's
        thread: an index only notes a rebuild that pays (``deferred_rebuilds``), :meth:`_tend_index_rebuilds` takes
        what it needs and hands it over, and adopts the result at a later batch, with the changes made meanwhile.
        At 100k segments a rebuild held the planner's thread 195 ms (a batch of publishes waited behind it); at
        1M, seconds."""
        self._index_builder = executor
        self.state.defer_index_rebuilds = True
        for index in self.state.tier_indexes.values():
            index.deferred_rebuilds = True

    def _tend_index_rebuilds(self) -> None:
        """Adopt the rebuilds built since, and hand over those due (one per tier at a time). On the planner's
        thread, between batches."""
        if self._index_builder is None:
            return
        indexes = self.state.tier_indexes
        for tier, (future, index) in list(self._index_jobs.items()):
            if indexes.get(tier) is not index or not index.rebuilding:
                del self._index_jobs[tier]  # the index was dropped or replaced since: what was built is of no use
            elif future.done():
                del self._index_jobs[tier]
                try:
                    index.adopt(future.result())
                except Exception as e:  # the index stays as it was, exact; the rebuild is due again
                    log.warning("tier %s: cost index rebuild failed: %s: %s", tier, type(e).__name__, e)
                    index.abandon_rebuild()
        for tier, index in indexes.items():
            if index.rebuild_due and tier not in self._index_jobs:
                self._index_jobs[tier] = (self._index_builder.submit(build_index, index.begin_rebuild()), index)

    def _balance_slice(self, now: int, *, start: bool) -> int:
        """Start a balancing run when one is due (``start``: a server, rule or config change asked for one, or a
        period passed since the last began; a stale run in progress is replaced), then take one slice of the run
        in progress. Balancing runs are numbered apart from plan runs (their seeds are never reused; the plan-run
        counter, which salts unused marks' ids, counts what it counted before)."""
        if not self.balancing or not self._may_decide():
            return 0
        st = self.state
        if start and st.start is not None:
            stale = self.balancing_run is not None and self.balancing_run.stale()
            due = self.balance_requested or stale or (
                self.balancing_run is None and (self.balanced_at is None or now - self.balanced_at >= self.period_ms))
            if due:
                self.balancing_runs += 1
                with stage_trace.held("balancing-start"):
                    self.balancing_run = BalancingRun(st, now=now, run=self.balancing_runs, start=st.start)
                self.balanced_at, self.balance_requested = now, False
        run = self.balancing_run
        if run is None:
            return 0
        began = time.perf_counter()
        with stage_trace.held("balancing-step"):
            result = run.step(now, self.slice_draws)
        if run.done:
            self.balancing_run = None
        if self.on_run is not None:
            self.on_run(result, st, (time.perf_counter() - began) * 1000, now, False)
        return self._emit(result, now, ("planner:balance:" + self.timer_salt + self.topics.name(COMMANDS), 0,
                                           run.run_number), None)

    def _logical(self, topic: str) -> str:
        for logical in (SEGMENTS, CLUSTER, COMMANDS):
            if self.topics.name(logical) == topic:
                return logical
        return topic

    # -- planning ------------------------------------------------------------------------------
    @property
    def superseded(self) -> bool:
        """Whether the commands read show a later planner epoch than this one's: it was deposed (fence.py)."""
        return fence.superseded(self.state.epochs, self.epoch)

    def _may_decide(self) -> bool:
        """False when a plan cannot decide anything: no server to command, and every rule loads replicas
        (no drop rule, no zero-replica load), so nothing can be marked unused either. Skipping those runs keeps
        a stream without servers (replays, crash tests) as fast as the timeline agent alone."""
        st = self.state
        if self.catching_up or self.superseded:
            return False
        if st.tier_of:
            return True
        return any(not rule.type.startswith("load") or sum(n for _, n in rule.replicants) == 0
                   for _, rules in st.rules.entries for rule in rules)

    def _run(self, now: int, scope: set[SegmentId] | None, *, balance: bool, mark: bool,
             drained: Counter[str] | None = None, mark_sources: tuple[str, ...] | None = None) -> Plan:
        self.runs += 1
        st = self.state
        start = st.start if st.start is not None else now
        began = time.perf_counter()
        result = plan_state(st, now, self.runs, start, False, balance=balance, scope=scope, mark_overshadowed=mark,
                            drained=drained, mark_sources=mark_sources)
        if self.on_run is not None:
            self.on_run(result, st, (time.perf_counter() - began) * 1000, now, scope is None)
        marked = {sid for sid, _ in result.mark_unused}  # their copies are dropped by the next run
        if scope is None:
            self.last_full_run = now
            self.deferred = set(result.deferred) | marked
        else:
            self.deferred = (self.deferred - scope) | set(result.deferred) | marked
        self.last_plan = result
        return result

    def _plan_and_emit(self, now: int, touched: Touched, position: tuple[str, int, int], cause: str | None,
                       causes: dict[SegmentId, str]) -> int:
        """An input-triggered run. Publishes, announces, unannounces and refusals plan the segments they touched
        (plus those earlier runs left short); a server, rule or config change runs in full and balances (Druid
        balances once per coordinator period: publishes and announces get their loads and drops at once, the
        moves they may call for wait for the timer's run)."""
        if touched.cluster or not self.incremental:
            result = self._run(now, None, balance=False, mark=False)
        else:
            result = self._run(now, touched.segments | self.deferred, balance=False, mark=False)
        return self._emit(result, now, position, cause, causes)

    def _emit(self, result: Plan, now: int, position: tuple[str, int, int], cause: str | None,
              causes: dict[SegmentId, str] | None = None) -> int:
        """Send a run's commands and marks. A command's causation is the input of the batch that last touched
        its segment (a publish for its loads, even when a rule change on another topic came after it in the
        same batch), else the batch's last trigger (the timer run's: none)."""
        topic, partition, offset = position
        index = 0

        def next_id() -> str:
            nonlocal index
            out = derived_event_id(topic, partition, offset, index)
            index += 1
            return out

        sent = 0
        for cmd in result.commands:
            sent += self._emit_command(cmd, now, causes.get(cmd.segment, cause) if causes else cause)
        by_source: dict[str, list[tuple[SegmentId, str]]] = {}
        for sid, reason in result.mark_unused:
            by_source.setdefault(sid.data_source, []).append((sid, reason))
        for ds, marks in sorted(by_source.items()):
            texts = tuple(str(s) for s, _ in sorted(marks))
            reason = "; ".join(sorted({r for _, r in marks}))
            self.sink.send(seal_event(Envelope(SegmentsMarkedUnused(segment_ids=texts, reason=reason), next_id(),
                                               Instant(now), ds, cause), self.publish_key))
        self.counters.emitted += index + sent
        return index + sent

    def _emit_command(self, cmd: PlanCommand, now: int, cause: str | None) -> int:
        """The envelopes of one decision (already folded into the state under its ids by the run)."""
        st = self.state
        assert cmd.command_id is not None
        sid_text, stage, purpose = str(cmd.segment), str(cmd.stage), cmd.purpose
        if cmd.type in ("load", "move"):
            assert purpose is not None
            seg = st.segments[cmd.segment]
            move_id = cmd.command_id if cmd.type == "move" else None
            load = _load_segment(cmd.command_id, cmd.server, seg, stage, purpose, cmd.reason, move_id, self.epoch)
            self.sink.send(_envelope(load, cmd.command_id, Instant(now), cmd.server, cause))
            if move_id is None:
                return 1
            assert cmd.source is not None
            drop_id = command_id("move-drop", move_id)  # one drop half per move
            drop = _drop_segment(drop_id, cmd.source, sid_text, stage, purpose, cmd.reason, move_id, self.epoch)
            self.sink.send(_envelope(drop, drop_id, Instant(now), cmd.source, cause))
            return 2
        if cmd.type == "cancel":
            cancel = CancelSegmentLoad(command_id=cmd.command_id, server=cmd.server, segment_id=sid_text,
                                       reason=cmd.reason, cancels=cmd.cancels, planner_epoch=self.epoch)
            self.sink.send(Envelope(cancel, cmd.command_id, Instant(now), cmd.server, cause))
            return 1
        assert purpose is not None
        drop = _drop_segment(cmd.command_id, cmd.server, sid_text, stage, purpose, cmd.reason, None, self.epoch)
        self.sink.send(_envelope(drop, cmd.command_id, Instant(now), cmd.server, cause))
        return 1

    # -- persistence -----------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        run = self.balancing_run
        progress = None if run is None else {"run": run.run_number, "started": run.started,
                                             "moved": dict(sorted(run.moves.items()))}
        return {"runs": self.runs, "balancingRuns": self.balancing_runs, "balancedAt": self.balanced_at,
                "balanceRequested": self.balance_requested,
                "balancingRun": progress, "sweeps": self.sweeps,
                "sweep": None if self.sweep is None else self.sweep.progress()}

    def _batch(self) -> StoreBatch:
        """The write batch to add to: the one batches that sent nothing left uncommitted, else a new one."""
        batch, self._pending, self._pending_records = self._pending or self.store.batch(), None, 0
        return batch

    def _commit(self, batch: StoreBatch) -> None:
        for family, key, value in codec.changed(self.state, self._meta()):
            if family == "ans":  # a settled id and its segment's index entry; None: the window forgot it
                if value is None:
                    old = self.store.get(_key("ans", key))
                    if old is not None:
                        batch.delete(_key(SETTLED_INDEX, old.decode() + "\x00" + key))
                else:
                    batch.put(_key(SETTLED_INDEX, value.decode() + "\x00" + key), b"")
            if value is None:
                batch.delete(_key(family, key))
            else:
                batch.put(_key(family, key), value)
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
