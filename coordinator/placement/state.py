"""The placement fold: ``evolve(state, event) -> Touched`` over every event that changes placement.

**What each event does** (the one definition; every adapter calls it):

- ``SegmentsPublished``: its segments are known and used (the publish's descriptor wins);
  ``SegmentsMarkedUnused``: no longer used; ``SegmentsMarkedUsed``: used again, as a publish.
- ``SegmentAnnounced`` / ``SegmentUnannounced``: the server holds the segment or no longer
  does; the command it answers is settled: the one named by its causation id (also when
  that command was not read back yet: its copy is then known as answered and never
  enters the queue), and every load (announce) or drop (unannounce) in flight for the
  same server and segment.
- ``SegmentLoadRefused``: the load it names (and its causation) is settled, and with a
  move's load the move's drop half (the source keeps its copy); the move is abandoned for
  good (a drop half read after the refusal never enters the queue: :meth:`move_abandoned`).
- ``LoadSegment`` / ``DropSegment`` read back from ``commands``: in flight, unless already
  settled; the log's copy wins over one enqueued when the command was decided, keeping
  the time first sent and any ``source`` learnt. A move's drop half tells its load half
  the ``source``, whichever of the two is read first (they are on two partitions).
  ``CancelSegmentLoad``: the load it names (else the server's queued loads of the segment)
  leaves the queue with its move's drop half, and the cancel is settled (it needs no answer).
- A command from a deposed planner (its ``plannerEpoch`` below one its server was already commanded in:
  :mod:`coordinator.placement.fence`) changes nothing, except that a void move's load half abandons the move.
  ``epochs[server]``: the latest planner epoch the server was commanded in.
- ``ServerJoined`` (tier, max size; a rejoin keeps what is not given), ``ServerLeft`` and
  ``ServerLost`` (alike: out of the projection, its queue settled, with the drop halves of
  the moves it was loading: their sources keep their copies; what it announced stays held
  until the coordinator's ``SegmentUnannounced`` of each copy, which
  :func:`coordinator.placement.liveness.unannounce_departed` decides, is read back),
  ``ServerDecommissioned`` / ``ServerRecommissioned``. An announce by a known server that is
  not joined (it left or was lost and has not joined again) is not held (Druid: a server
  re-joins before its announces count); the coordinator unannounces it on ``segments``
  (:func:`coordinator.placement.liveness.unannounce_not_joined`) so the timeline agrees.
- ``last_heard[server]``: the latest event time of a ``ServerJoined``, ``ServerHeartbeat``,
  refusal, or announce / unannounce of the server's own (not the coordinator's, which
  carries a ``reason``); what :func:`coordinator.placement.liveness.silent_servers` reads.
  A heartbeat changes nothing else and triggers no plan.
- ``RulesSet``: that data source's rules are replaced, the others' kept; a fresh
  cluster has Druid's default (``loadForever`` 2 replicas on ``_default_tier``).
  ``DynamicConfigSet``: merged into the current config (keys not given keep their values).
- :meth:`PlacementState.expire`: commands sent more than the load timeout ago (event time)
  are settled.
- Settled ids name their segment; a segment's are kept while it is known and for the window after it is
  forgotten (``gone`` tombstones, :mod:`coordinator.placement.settled`), then forgotten.

**Touched** names what changed for planning: the segments whose projection or
used flag changed, the servers whose facts changed, the data sources whose rules
changed, and whether the dynamic config changed. ``trigger`` says whether the
event can change a plan at all.

No clock, no randomness, no unordered iteration in results: the same events in the
same order give the same state, the same :class:`Touched` and the same command ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sortedcontainers import SortedList

from coordinator.placement import fence
from coordinator.placement.projected import Projected, QueueItem, command_id
from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS, InFlight, ServerFacts
from coordinator.placement.settled import DEFAULT_WINDOW, SettledWindow
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet, parse_rules
from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerHeartbeat,
    ServerJoined,
    ServerLeft,
    ServerLost,
    ServerRecommissioned,
)
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.compiled import constructor
from events.envelope import Envelope
from events.registry import Event
from events.segment import SegmentDescriptor, SegmentId
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)


@dataclass(slots=True)
class Touched:
    """What one or more folded events changed, for planning (see the module docstring)."""

    segments: set[SegmentId] = field(default_factory=set)
    servers: set[str] = field(default_factory=set)
    data_sources: set[str] = field(default_factory=set)
    config: bool = False
    trigger: bool = False
    answered_own: bool = False  # an announce/unannounce answering a command in flight (nothing new to plan)

    def merge(self, other: Touched) -> None:
        self.segments |= other.segments
        self.servers |= other.servers
        self.data_sources |= other.data_sources
        self.config |= other.config
        if other.trigger:  # answered_own: every triggering event so far answered a command in flight
            self.answered_own = (self.answered_own or not self.trigger) and other.answered_own
        self.trigger |= other.trigger

    @property
    def cluster(self) -> bool:
        """A server, rule or config change (balancing runs after these)."""
        return bool(self.servers or self.data_sources or self.config)


def command_purpose(event: LoadSegment | DropSegment) -> str:
    """Why the command was issued: its ``purpose`` field (v1 payloads get one from the upcaster on decode; the
    reason text is never read). The queue share it counts against follows from it (see ``projected``)."""
    return event.purpose


_new_in_flight = constructor(InFlight)  # InFlight(...) with every field given, without the frozen __init__


def _abandoned(move_id: str) -> str:
    """The settled id that records a refused move (stored with the other settled ids)."""
    return command_id("move-abandoned", move_id)


# events that change segments, holdings and the queue only (never a server's membership, tier or draining)
_FACTS_ONLY = (SegmentAnnounced, SegmentUnannounced, SegmentLoadRefused, LoadSegment, DropSegment, CancelSegmentLoad,
               SegmentsPublished, SegmentsMarkedUsed, SegmentsMarkedUnused)


class PlacementState(Projected):
    """The placement fold's state; mutable, folded in place by :meth:`evolve` (see the module docstring)."""

    def __init__(self, load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
                 window: SettledWindow | None = DEFAULT_WINDOW) -> None:
        super().__init__()
        self.load_timeout_ms = load_timeout_ms
        self.window = window  # None: settled ids are never forgotten (coordinator.placement.settled)
        # segment id text -> event time it was forgotten: its settled ids are kept until it expires; the same
        # tombstones in expiry order, (time, text), so a restored state expires them in the same order
        self.gone: dict[str, int] = {}
        self.gone_order: SortedList = SortedList()
        self.rules: RuleSet = RuleSet.druid_default()
        self.rules_json: dict[str, Any] = {}
        self.config = DynamicConfig()
        self.config_json: dict[str, Any] = {}
        self.start: int | None = None  # the earliest event time applied (the coordinator's start)
        self.last_event_at = 0
        self.last_heard: dict[str, int] = {}  # server -> event time it was last heard of (see the docstring)
        self.epochs: dict[str, int] = {}  # server -> the latest planner epoch it was commanded in (fence.py)

    # -- the fold ---------------------------------------------------------------------------------
    def evolve(self, env: Envelope[Event]) -> Touched:
        """Fold one event (see the module docstring). Raises ValueError on rules or config that do not parse."""
        self.start = env.occurred_at if self.start is None else min(self.start, env.occurred_at)
        self.last_event_at = max(self.last_event_at, env.occurred_at)
        self.touched_segments, self.released = set(), set()
        touched = Touched()
        if isinstance(env.event, _FACTS_ONLY):  # one refresh per pair whose facts the event changed
            self.defer_refreshes()
            try:
                self._evolve(env, touched)
            finally:
                self.refresh_deferred()
        else:
            self._evolve(env, touched)
        touched.segments |= self.touched_segments
        self.touched_segments = set()
        # forgetting depends on the facts only, never on whether a projection changed (an unannounce by a server
        # that is not joined changes none), so the fold forgets the same segments whatever the order of events
        self._forget(touched.segments | self.released)
        self.released = set()
        self.expire_window()
        return touched

    def evolve_all(self, envelopes: Iterable[Envelope[Event]]) -> Touched:
        out = Touched()
        for env in envelopes:
            out.merge(self.evolve(env))
        return out

    def _evolve(self, env: Envelope[Event], t: Touched) -> None:
        event, cause = env.event, env.causation_id
        if isinstance(event, ServerJoined | ServerHeartbeat | SegmentAnnounced | SegmentLoadRefused) or (
                isinstance(event, SegmentUnannounced) and event.reason is None):
            self.heard(event.server, env.occurred_at)
        if isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad):
            self._command(env, t)
        elif isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
            for seg in event.segments:
                self.learn(seg, True)
            t.trigger = True
        elif isinstance(event, SegmentsMarkedUnused):
            for text in event.segment_ids:
                sid = self.by_text.get(text)
                if sid is not None:
                    self.mark_unused(sid)
            t.trigger = True
        elif isinstance(event, SegmentAnnounced):
            sid = event.segment.id
            self.learn(event.segment, None)
            expected = (cause is not None and cause in self.queue) or bool(self.queued_at(event.server, sid, "load"))
            if cause is not None:
                self.settle(cause, str(sid))
            if not self.announces_count(event.server):  # Druid: a server re-joins before its announces count
                t.trigger, t.answered_own = True, expected
                return
            self.hold(event.server, sid, True)
            self.settle_matching(event.server, sid, "load")
            t.trigger, t.answered_own = True, expected
        elif isinstance(event, SegmentUnannounced):
            found = self.by_text.get(event.segment_id)
            expected = (cause is not None and cause in self.queue) or (
                found is not None and bool(self.queued_at(event.server, found, "drop")))
            if cause is not None:
                self.settle(cause, event.segment_id)
            if found is not None:
                self.hold(event.server, found, False)
                self.settle_matching(event.server, found, "drop")
            t.trigger, t.answered_own = True, expected
        elif isinstance(event, SegmentLoadRefused):
            self.settle(event.command_id, event.segment_id)
            if cause is not None:
                self.settle(cause, event.segment_id)
            if event.move_id is not None:  # the source keeps its copy: the drop half is abandoned
                for cid in self.of_move(event.move_id):
                    self.settle(cid, event.segment_id)
                self.settle(_abandoned(event.move_id), event.segment_id)  # also a drop half not read yet
            t.trigger = True
        elif isinstance(event, ServerJoined):
            old = self.servers.get(event.server) or ServerFacts()
            self._server(event.server, ServerFacts(
                event.tier or old.tier, event.max_size_bytes if event.max_size_bytes is not None else
                old.max_size_bytes, old.decommissioning, True), t)
        elif isinstance(event, ServerLeft | ServerLost):
            left = self.servers.get(event.server)
            if left is not None:
                self._server(event.server, replace(left, joined=False), t)
            for cid, queued in sorted((c, self.queue[c]) for c in self._by_server.get(event.server, ())):
                item = self.settle(cid, str(queued.segment))  # a removed server's queue vanishes with it
                if item is not None and item.move_id is not None and item.action == "load":
                    for half in self.of_move(item.move_id):  # the move is off: its source keeps its copy
                        self.settle(half, str(item.segment))
            t.servers.add(event.server)
            t.trigger = True
        elif isinstance(event, ServerDecommissioned | ServerRecommissioned):
            old = self.servers.get(event.server) or ServerFacts(joined=False)
            self._server(event.server, replace(old, decommissioning=isinstance(event, ServerDecommissioned)), t)
        elif isinstance(event, RulesSet):
            self.set_rules(event.data_source, [dict(r) for r in event.rules], f"payload.rules[{event.data_source}]")
            t.data_sources.add(event.data_source)
            t.trigger = True
        elif isinstance(event, DynamicConfigSet):
            self.set_config(dict(event.config))
            t.config = t.trigger = True

    def announces_count(self, name: str) -> bool:
        """Whether an announce by ``name`` is held: not when the server is known and not joined (it left, was
        lost, or was only decommissioned): as in Druid, a server must (re-)join before what it announces counts.
        A server the fold never heard of still counts (announces with no ``server_joined`` at all)."""
        facts = self.servers.get(name)
        return facts is None or facts.joined

    def heard(self, name: str, at: int) -> None:
        """The server was heard of at ``at`` (event time; the latest wins)."""
        if at > self.last_heard.get(name, -1):
            self.last_heard[name] = at
            self.dirty.add(("heard", name))

    def _server(self, name: str, facts: ServerFacts, t: Touched) -> None:
        self.set_server(name, facts)
        t.servers.add(name)
        t.trigger = True

    def set_rules(self, data_source: str, raw: list[dict[str, Any]], path: str) -> None:
        """Replace one data source's rules (``_default``: the default chain); the others are kept."""
        self.rules = self.rules.with_rules(data_source, parse_rules(raw, path))
        self.rules_json[data_source] = raw
        self.dirty.add(("rules", data_source))

    def set_config(self, update: dict[str, Any]) -> None:
        """Merge a dynamic-config update into the current config (Druid's POST semantics)."""
        self.config = self.config.updated(update)
        self.config_json.update(update)
        self.dirty.add(("config", ""))
        self.set_config_decommissioning(self.config.decommissioning_nodes)

    def admits(self, event: LoadSegment | DropSegment | CancelSegmentLoad) -> bool:
        """Whether the command is acted on: not from a deposed planner (:mod:`coordinator.placement.fence`)."""
        return fence.admits(self.epochs, event.server, event.planner_epoch)

    def _command(self, env: Envelope[Event], t: Touched) -> None:
        event = env.event
        assert isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad)
        before = self.epochs.get(event.server)
        if not fence.admit(self.epochs, event.server, event.planner_epoch):
            if isinstance(event, LoadSegment) and event.move_id is not None:
                for cid in self.of_move(event.move_id):  # a void load half voids its move: the source keeps its copy
                    self.settle(cid, str(event.segment.id))
                self.settle(_abandoned(event.move_id), str(event.segment.id))
            return  # a deposed planner's command: nobody acts on it, it is never in flight
        if self.epochs.get(event.server) != before:
            self.dirty.add(("epoch", event.server))
        if isinstance(event, CancelSegmentLoad):
            sid = self.by_text.get(event.segment_id)
            if event.cancels is not None or sid is not None:
                self.cancelled(env.event_id, event.server, sid, event.cancels, event.segment_id)
            else:
                self.settle(env.event_id, event.segment_id)
            return
        assert isinstance(event, LoadSegment | DropSegment)
        known = self.queue.get(env.event_id)  # in flight: never settled (settling takes it out of flight)
        if (known is None and self.known_settled(env.event_id)) or (
                event.move_id is not None and self.move_abandoned(event.move_id)):
            return  # answered before we read it back, or a half of a move whose load was refused
        if isinstance(event, LoadSegment):
            self.learn(event.segment, None)
            source = None
            if event.move_id is not None:  # the source a copy of the load knew, else the server of its drop half
                source = next((self.queue[c].source for c in self.of_move(event.move_id) if self.queue[c].source),
                              None) or next((self.queue[c].server for c in self.of_move(event.move_id)
                                             if self.queue[c].action == "drop"), None)
            item = InFlight(event.server, "load", event.segment.id,
                            env.occurred_at if known is None else known.sent_at, event.move_id, source,
                            command_purpose(event))
            if item == known:
                return  # our own command read back: nothing new
        else:
            found = self.by_text.get(event.segment_id)
            if found is None:
                return
            item = InFlight(event.server, "drop", found, env.occurred_at, event.move_id, None, command_purpose(event))
            if event.move_id is not None:  # tell the load half where it moves from
                for cid in self.of_move(event.move_id):
                    q = self.queue[cid]
                    if q.action == "load" and q.source is None:
                        self.enqueue(cid, replace(q, source=event.server))
        known = self.queue.get(env.event_id)  # again: a move's drop half may have re-queued its load half
        if known is not None:
            item = replace(item, sent_at=known.sent_at, source=item.source or known.source)
            if item == known:
                return  # our own command read back: nothing new
        self.enqueue(env.event_id, item)
        t.trigger = True

    def move_abandoned(self, move_id: str) -> bool:
        """Whether a load of the move was refused (or cancelled and then refused): its source keeps the copy."""
        return self.known_settled(_abandoned(move_id))

    def cancelled(self, cancel_id: str, name: str, sid: SegmentId | None, cancels: str | None,
                  segment: str) -> None:
        """A cancel is out of the queues at once: the load it names (else the server's queued loads of the
        segment), a move's drop half with it, and the cancel itself (it needs no answer). ``segment``: the
        cancel's segment id text."""
        targets = [cancels] if cancels is not None else (self.queued_at(name, sid, "load") if sid is not None else [])
        for cid in targets:
            item = self.settle(cid, segment)
            if item is not None and item.move_id is not None:
                for other in self.of_move(item.move_id):
                    if self.queue[other].action == "drop":
                        self.settle(other, str(item.segment))
        self.settle(cancel_id, segment)

    def expire(self, now: int) -> Touched:
        """Settle the commands sent more than ``load_timeout_ms`` before ``now``: no longer in flight."""
        self.touched_segments = set()
        settled: set[SegmentId] = set()
        for cid, item in sorted(self.queue.items()):
            if now - item.sent_at > self.load_timeout_ms:
                self.settle(cid, str(item.segment))
                settled.add(item.segment)
        touched = Touched(segments=self.touched_segments, trigger=bool(self.touched_segments))
        self.touched_segments = set()
        self._forget(settled)  # as an answer's event would: an unused segment with nothing left in flight goes
        self.expire_window()
        return touched

    def _forget(self, sids: Iterable[SegmentId]) -> None:
        """Segments nothing needs any more leave memory (the store deletes them). In any order: each one is
        deleted or kept on its own (no sort: a server's departure touches all it held, and sorting 20k segment ids
        by their dataclass comparison took most of a worker's CPU in ``bench.service --only placement``)."""
        for sid in sids:
            if sid in self.segments and self.forgettable(sid):
                del self.segments[sid]
                self.dirty.add(("seg", str(sid)))
                self._tombstone(str(sid))

    # -- the settled-id window (coordinator.placement.settled) ------------------------------------
    def _tombstone(self, text: str) -> None:
        """The segment is gone (or was never known): its settled ids are kept for the window from now."""
        if self.window is not None and text not in self.gone:
            self.bury(text, self.last_event_at)
            self.dirty.add(("gone", text))

    def bury(self, text: str, at: int) -> None:
        """Keep a tombstone (see :meth:`_tombstone`; a restore puts the stored ones back)."""
        self.gone[text] = at
        self.gone_order.add((at, text))

    def settled_for(self, segment: str) -> None:
        """An id of ``segment`` was settled: a segment the fold does not know is tombstoned at once."""
        sid = self.by_text.get(segment)
        if sid is None or sid not in self.segments:
            self._tombstone(segment)

    def learn(self, seg: SegmentDescriptor, used: bool | None) -> None:
        """Know a segment (see :meth:`Projected.learn`); a gone segment known again keeps its settled ids."""
        if self.gone and seg.id not in self.segments:
            text = str(seg.id)
            at = self.gone.pop(text, None)
            if at is not None:
                self.gone_order.remove((at, text))
                self.dirty.add(("gone", text))
        super().learn(seg, used)

    def expire_window(self) -> None:
        """Expire the oldest tombstones past the window: their segments' settled ids are forgotten. The fold calls
        it after every event and timeout run, :func:`coordinator.placement.codec.changed` after a plan's decisions."""
        window, order = self.window, self.gone_order
        if window is None:
            return
        while order:
            at, text = order[0]
            if not window.expired(at, self.last_event_at, len(order)):
                return
            del order[0]
            del self.gone[text]
            self.dirty.add(("gone", text))
            # stored ids of the segment, unless this batch settled them for another one (then they stay)
            ids = {cid for cid in self.settled_of(text) if self.settled_seg.get(cid, text) == text}
            ids.update(self.settled_ids.get(text, ()))
            for cid in sorted(ids):
                self.forget_settled(cid)

    # -- decisions, folded as the commands they become ---------------------------------------------
    def plan_load(self, name: str, sid: SegmentId, purpose: str, now: int, source: str | None = None) -> str:
        """Queue a load (a move's load half when ``source`` is given, with its drop half on the source).
        Returns the load's command id, which is also the move id of a move."""
        text = str(sid)
        if source is None:
            cid = self.fresh_load_id(name, text)
            self.enqueue_load(cid, _new_in_flight(name, "load", sid, now, None, None, purpose))
            return cid
        cid = self.fresh_command_id("move", name, source, text)
        self.enqueue(cid, InFlight(name, "load", sid, now, cid, source, purpose))
        self.enqueue(command_id("move-drop", cid), InFlight(source, "drop", sid, now, cid, None, purpose))
        return cid

    def rename_move(self, move_id: str, load_id: str, drop_id: str) -> None:
        """Give a move planned by :meth:`plan_load` the ids its sender sends it under (the load half's id is also
        the move id). Nothing was sent under the old ids, so they are forgotten, not settled."""
        for cid in self.of_move(move_id):
            item = self._unindex(cid)
            assert item is not None
            self.dirty.add(("q", cid))
            self.enqueue(load_id if item.action == "load" else drop_id, replace(item, move_id=load_id))

    def plan_drop(self, name: str, sid: SegmentId, now: int) -> str:
        cid = self.fresh_command_id("drop", name, str(sid))
        self.enqueue(cid, InFlight(name, "drop", sid, now, None, None, "unloading"))
        return cid

    def plan_cancel(self, name: str, sid: SegmentId) -> tuple[str, str | None, QueueItem]:
        """Withdraw the server's queued load of ``sid`` (the one the projection shows): (cancel id, the id of the
        load it cancels, the withdrawn item)."""
        item = self.loading[name][sid]
        loads = sorted((self.queue[c].sent_at, c) for c in self.queued_at(name, sid, "load"))
        cancels = loads[0][1] if loads else None
        cancel_id = command_id("cancel", cancels) if cancels is not None else \
            self.fresh_command_id("cancel", name, str(sid))
        self.cancelled(cancel_id, name, sid, cancels, str(sid))
        self._forget([sid])  # as the cancel's event would (an unused segment with nothing left in flight)
        return cancel_id, cancels, item

    def mark_unused(self, sid: SegmentId) -> None:
        """No longer used; forgotten at once when nothing else needs it (a planner's mark, folded as its
        ``SegmentsMarkedUnused`` would be)."""
        super().mark_unused(sid)
        self._forget([sid])

    # -- building ---------------------------------------------------------------------------------
    @staticmethod
    def build(servers: Iterable[tuple[str, ServerFacts, Iterable[SegmentId], Iterable[QueueItem]]],
              segments: Iterable[SegmentDescriptor], used: Iterable[SegmentId], rules: RuleSet,
              config: DynamicConfig, now: int) -> PlacementState:
        """A state holding a snapshot: servers with what they hold and their queues (items sent at ``now``,
        in the order given; a move's drop half is added on its source), segments, used ids, rules, config."""
        st = PlacementState()
        st.rules, st.config = rules, config
        st.config_decommissioning = frozenset(config.decommissioning_nodes)
        for seg in segments:
            st.learn(seg, None)
        for sid in used:
            st.set_used(sid)
        queued: list[tuple[str, QueueItem]] = []
        for name, facts, loaded, queue in servers:
            st.set_server(name, facts)
            for sid in loaded:
                st.hold(name, sid, True)
            queued.extend((name, q) for q in queue)
        for n, (name, q) in enumerate(queued):
            cid = f"queued-{n:08d}"
            move_id = q.move_id
            st.enqueue(cid, InFlight(name, q.action, q.segment, now, move_id, q.source, q.purpose))
            if q.action == "load" and move_id is not None and q.source is not None:
                st.enqueue(f"{cid}-drop", InFlight(q.source, "drop", q.segment, now, move_id, None, q.purpose))
        st.touched_segments = set()
        st.dirty = set()
        st.stored_settled()
        return st
