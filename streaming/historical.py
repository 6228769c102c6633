"""A simulated Druid historical: executes its LoadSegment/DropSegment commands and announces what it serves.

The server reads ``commands`` (keyed by server name; it executes those naming
it), "loads" a segment by waiting ``load_ms``, then announces it on
``segments``; a drop unannounces. A load that would exceed ``max_size_bytes``
is refused with a ``SegmentLoadRefused`` on ``cluster``: the command is settled,
not lost. It announces itself with ``ServerJoined`` and, when stopped
gracefully, ``ServerLeft``. While it runs it heartbeats (``ServerHeartbeat`` every
``heartbeat_ms``); a server silent for ``serverTimeoutMillis`` is decided lost by the
coordinator, which unannounces what it held (docs/liveness.md).

**Coming back.** A server that reads its own ``ServerLost`` (it was alive, only silent)
joins again (``ServerJoined``); a server that reads the coordinator's unannounce of a
segment still on its disk (``reason`` set: not its own) announces it again, after the
unannounce in that partition, so the last word there is the announce. A restarted server
does the same for what it held: its disk is what it announced minus what *it* unannounced.

**The load queue.** Loads and drops run one at a time in command order (a load
takes ``load_ms``; a refusal and a drop take no time), as a Druid historical's
load queue. A ``CancelSegmentLoad`` does not queue: a load it names (by
``cancels``, or the queued load of its segment when ``cancels`` is absent) that
is still queued or loading is removed and answered with a ``SegmentLoadRefused``
of that load (reason ``cancelled: ...``, caused by the cancel; a move's target
refusing abandons the move's drop, as any refusal does). A load already announced
(or never seen) is left alone and the cancel gets no answer: dropping is the
coordinator's next decision, not the cancel's.

**Moves.** A DropSegment carrying a ``moveId`` is conditional: it waits until the
move's target (known from the LoadSegment with the same move id) announces the
segment, and is abandoned (the copy stays) if the target refuses that load.

**What it knows, and from where.** Two things, kept apart:

- ``view``: the coordinator's placement, a :class:`~coordinator.placement.state.PlacementState`
  fed with every event the server reads on ``segments``, ``cluster`` and ``commands`` (inputs once
  per event id, as the planner agent counts them). The server folds no placement event with code
  of its own: whether a move's target announced the segment (``view.held``), whether a move was
  refused (``view.move_abandoned``), and on start what it announced itself, all come from the fold.
- Commands from a deposed planner (an epoch below one this server's commands already carried) are void in the
  fold and are not executed (:mod:`coordinator.placement.fence`).
- ``disk`` (:class:`_Disk`): the data server's own state, which no fold of the log can give: what it
  has loaded *now* (it loads and announces at once; the coordinator learns it only when the
  announce is read back, and after a crash between load and announce the disk and the log
  differ), the commands it answered (its own answers' causation ids, and the loads it refused by
  command id; a consumer's record of what it already did, so a restart answers nothing twice),
  and its load queue. This is not a second copy of the coordinator fold: it is the
  other side of it, the historical's, which the fold learns from through the announces; on start
  it is seeded from its own announces and unannounces, then only the server changes it.
  Bad records it skips and counts: the worker's agents dead-letter them, once.
  ``move_targets`` pairs a move's drop half with its load half's server (the command protocol);
  whether that server holds the segment is the fold's.

**Invariants.** Never more than ``max_size_bytes`` loaded. Every answer (announce,
unannounce, refusal) carries the command's event id as its causation id and an
id derived from the command's (topic, partition, offset), so a restarted server
that re-reads a command emits an identical answer, which readers drop as a
duplicate. The log is the source of truth: on start the server rebuilds the view and
its disk from ``segments`` and ``cluster``, then follows ``commands``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from coordinator.placement.liveness import DEFAULT_HEARTBEAT_MS
from coordinator.placement.state import PlacementState
from events.cluster import SegmentLoadRefused, ServerHeartbeat, ServerJoined, ServerLeft, ServerLost
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import Envelope
from events.ids import derived_event_id
from events.registry import Event
from events.schema import Instant
from events.segment import SegmentDescriptor
from events.segments import SegmentAnnounced, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming.consumer import EventConsumer, Record
from streaming.producer import EventProducer

log = logging.getLogger("segcoord.historical")

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """'10GB', '512MiB', '1073741824' -> bytes (decimal units as Druid's HumanReadableBytes, binary with 'i')."""
    raw = text.strip().upper().replace(" ", "")
    digits = len(raw) - len(raw.lstrip("0123456789."))
    number, unit = raw[:digits], raw[digits:]
    if not number or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 10GB, 512MiB, 1073741824)")
    value = float(number) * _UNITS[unit]
    if value < 0 or value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


@dataclass
class _Disk:
    """The server's own state (see the module docstring): what it loaded, what it answered, what waits."""

    loaded: dict[str, SegmentDescriptor] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)  # event ids of the commands answered
    refused: set[str] = field(default_factory=set)  # command ids of own refused (or cancelled) loads
    move_targets: dict[str, str] = field(default_factory=dict)  # move id -> the server its load half names
    waiting_drops: dict[str, Record] = field(default_factory=dict)  # move id -> its DropSegment

    @property
    def used_bytes(self) -> int:
        return sum(s.size for s in self.loaded.values())


class Historical:
    def __init__(self, name: str, tier: str, max_size_bytes: int, bootstrap: str, topics: Topics,
                 load_ms: int = 0, heartbeat_ms: int = DEFAULT_HEARTBEAT_MS) -> None:
        if max_size_bytes < 0 or load_ms < 0 or heartbeat_ms <= 0:
            raise ValueError("max size and load time must be non-negative, the heartbeat period positive")
        self.heartbeat_ms = heartbeat_ms
        self._own: dict[str, SegmentDescriptor] = {}  # announced by this server and not unannounced by it
        self._live = False  # past the catch-up: what is read now is news
        self._rejoin = False  # read our own ServerLost: say ServerJoined again
        self._reannounce: dict[str, SegmentDescriptor] = {}  # unannounced by the coordinator, still on disk
        self.name, self.tier, self.max_size_bytes, self.load_ms = name, tier, max_size_bytes, load_ms
        self.bootstrap, self.topics = bootstrap, topics
        self.state = _Disk()
        self.view = PlacementState()  # the coordinator's placement, as the fold says
        self._seen: set[str] = set()  # segments/cluster event ids folded (the live consumer re-reads them)
        self._producer = EventProducer(bootstrap, topics)
        self._queue: deque[Record] = deque()  # loads and unconditional drops, in command order
        self._head_due: float | None = None  # monotonic time the head load completes (None: not started)
        self.ignored_deposed = 0  # commands to this server voided as a deposed planner's

    # -- the log ----------------------------------------------------------------------
    def _fold(self, record: Record) -> None:
        """Fold one event into the view (commands every copy, other inputs once per event id)."""
        env = record.envelope
        if record.topic != self.topics.name(COMMANDS):
            if env.event_id in self._seen:
                return
            self._seen.add(env.event_id)
        try:
            self.view.evolve(env)
        except ValueError:
            return  # rules or config the fold refuses (the planner agent dead-letters them)
        finally:
            self.view.dirty.clear()  # nothing is stored: the view is rebuilt from the log on start

    def _observe(self, record: Record) -> None:
        """A segments/cluster event: into the view; own answers into the disk's record; moves released."""
        fresh = record.envelope.event_id not in self._seen
        self._fold(record)
        event, st = record.envelope.event, self.state
        cause = record.envelope.causation_id
        if fresh and getattr(event, "server", None) == self.name:
            self._own_event(event)
        if not isinstance(event, SegmentAnnounced | SegmentUnannounced | SegmentLoadRefused):
            return
        if isinstance(event, SegmentLoadRefused) and event.server == self.name:
            st.refused.add(event.command_id)  # a cancelled load is answered by the refusal its cancel caused
        if cause is not None and event.server == self.name:
            st.answered.add(cause)
        self._release_drops()

    def _own_event(self, event: Event) -> None:
        """An event naming this server, read for the first time: its own announcements, and the coordinator's
        word that it was lost or unannounced (then, once live, it comes back: see the module docstring)."""
        if isinstance(event, SegmentAnnounced):
            self._own[str(event.segment.id)] = event.segment
            self._reannounce.pop(str(event.segment.id), None)
        elif isinstance(event, SegmentUnannounced) and event.reason is None:
            self._own.pop(event.segment_id, None)
        elif isinstance(event, SegmentUnannounced) and self._live and event.segment_id in self.state.loaded:
            self._reannounce[event.segment_id] = self.state.loaded[event.segment_id]
        elif isinstance(event, ServerLost) and self._live:
            self._rejoin = True

    def _load_disk(self) -> None:
        """What this server announced and did not unannounce itself: its disk on start. What the coordinator
        unannounced meanwhile (the server was lost) is announced again once it has joined."""
        self.state.loaded = dict(sorted(self._own.items()))
        held = {str(s) for s in self.view.held.get(self.name, ())}
        self._reannounce = {sid: seg for sid, seg in self.state.loaded.items() if sid not in held}

    def _come_back(self) -> None:
        """Join again after our own ServerLost; announce again what the coordinator unannounced."""
        now = Instant(int(time.time() * 1000))
        if self._rejoin:
            self._rejoin = False
            joined = ServerJoined(server=self.name, tier=self.tier, max_size_bytes=self.max_size_bytes)
            self._producer.send(Envelope(joined, uuid.uuid4().hex, now, self.name))
            log.warning("%s was decided lost by the coordinator; joining again", self.name)
        for sid, seg in sorted(self._reannounce.items()):
            if sid in self.state.loaded:
                self._producer.send(Envelope(SegmentAnnounced(server=self.name, segment=seg), uuid.uuid4().hex,
                                             now, seg.data_source))
                log.info("%s announces %s again", self.name, sid)
        self._reannounce = {}
        self._producer.flush()

    def _heartbeat(self) -> None:
        beat = ServerHeartbeat(server=self.name, tier=self.tier, max_size_bytes=self.max_size_bytes)
        self._producer.send(Envelope(beat, uuid.uuid4().hex, Instant(int(time.time() * 1000)), self.name))

    def _send(self, event: Event, command: Record, key: str) -> None:
        self._producer.send(Envelope(event, derived_event_id(command.topic, command.partition, command.offset, 0),
                                     Instant(int(time.time() * 1000)), key, command.envelope.event_id))

    # -- commands ---------------------------------------------------------------------
    def _command(self, record: Record) -> None:
        event, st = record.envelope.event, self.state
        if isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad) and not self.view.admits(event):
            self._fold(record)  # from a deposed planner: void in the fold and here (coordinator.placement.fence)
            if event.server == self.name:
                self.ignored_deposed += 1
                log.warning("%s ignores %s %s of deposed planner epoch %s", self.name, event.event_type,
                            record.envelope.event_id, event.planner_epoch)
            return
        self._fold(record)
        if isinstance(event, LoadSegment) and event.move_id is not None:
            st.move_targets[event.move_id] = event.server
            if event.move_id in st.waiting_drops:  # the drop half was read first
                self._release_drops()
        if not isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad) or event.server != self.name:
            return
        if record.envelope.event_id in st.answered or (isinstance(event, LoadSegment)
                                                       and event.command_id in st.refused):
            return  # answered before a restart: the log already says so
        if isinstance(event, CancelSegmentLoad):
            self._cancel(record, event)
        elif isinstance(event, LoadSegment) or event.move_id is None:
            self._queue.append(record)
            self._work()
        elif not self.view.move_abandoned(event.move_id):
            st.waiting_drops[event.move_id] = record
            self._release_drops()

    def _work(self) -> float | None:
        """Run the queue's due commands in order; the seconds until the head load completes (None: idle)."""
        st = self.state
        while self._queue:
            record = self._queue[0]
            event = record.envelope.event
            if isinstance(event, LoadSegment):
                sid = str(event.segment.id)
                takes_time = self.load_ms > 0 and sid not in st.loaded and \
                    st.used_bytes + event.segment.size <= self.max_size_bytes
                if takes_time:
                    now = time.monotonic()
                    if self._head_due is None:
                        self._head_due = now + self.load_ms / 1000
                    if now < self._head_due:
                        return self._head_due - now
                self._queue.popleft()
                self._head_due = None
                self._load(record, event)
            else:
                assert isinstance(event, DropSegment)
                self._queue.popleft()
                self._head_due = None
                self._drop(record, event)
        return None

    def _cancel(self, record: Record, event: CancelSegmentLoad) -> None:
        """Withdraw the named (or else the segment's) queued load; nothing when it already ran."""
        for i, queued in enumerate(self._queue):
            load = queued.envelope.event
            if not isinstance(load, LoadSegment):
                continue
            if event.cancels is not None and queued.envelope.event_id != event.cancels \
                    and load.command_id != event.cancels:
                continue
            if event.cancels is None and str(load.segment.id) != event.segment_id:
                continue
            del self._queue[i]
            if i == 0:
                self._head_due = None
            st = self.state
            refusal = SegmentLoadRefused(
                server=self.name, command_id=load.command_id, segment_id=str(load.segment.id),
                reason=f"cancelled: {event.reason}" if event.reason else "cancelled",
                used_bytes=st.used_bytes, max_size_bytes=self.max_size_bytes, move_id=load.move_id)
            self._send(refusal, record, self.name)
            log.info("%s cancelled its queued load of %s", self.name, load.segment.id)
            st.answered.add(queued.envelope.event_id)
            st.answered.add(record.envelope.event_id)
            st.refused.add(load.command_id)
            self._producer.flush()
            return

    def _load(self, record: Record, event: LoadSegment) -> None:
        seg, st = event.segment, self.state
        sid = str(seg.id)
        if sid not in st.loaded and st.used_bytes + seg.size > self.max_size_bytes:
            refusal = SegmentLoadRefused(
                server=self.name, command_id=event.command_id, segment_id=sid,
                reason=f"no room: {st.used_bytes} of {self.max_size_bytes} bytes used, segment needs {seg.size}",
                used_bytes=st.used_bytes, max_size_bytes=self.max_size_bytes, move_id=event.move_id)
            self._send(refusal, record, self.name)
            log.warning("%s refused %s: %s", self.name, sid, refusal.reason)
        else:
            st.loaded[sid] = seg
            self._send(SegmentAnnounced(server=self.name, segment=seg), record, seg.data_source)
            log.info("%s loaded %s (%d bytes; %d of %d bytes used)%s", self.name, sid, seg.size, st.used_bytes,
                     self.max_size_bytes, f" [move {event.move_id}]" if event.move_id else "")
        st.answered.add(record.envelope.event_id)
        self._producer.flush()

    def _drop(self, record: Record, event: DropSegment) -> None:
        st = self.state
        held = st.loaded.pop(event.segment_id, None)
        key = held.data_source if held is not None else event.segment_id.split("_", 1)[0]
        self._send(SegmentUnannounced(server=self.name, segment_id=event.segment_id), record, key)
        log.info("%s dropped %s (%d of %d bytes used)", self.name, event.segment_id, st.used_bytes,
                 self.max_size_bytes)
        st.answered.add(record.envelope.event_id)
        self._producer.flush()

    def _release_drops(self) -> None:
        """A move's drop half runs once the fold shows its target holding the segment; it is abandoned once the
        fold shows the move refused."""
        st, view = self.state, self.view
        for move_id, record in list(st.waiting_drops.items()):
            if view.move_abandoned(move_id):
                del st.waiting_drops[move_id]
                continue
            event = record.envelope.event
            assert isinstance(event, DropSegment)
            target = st.move_targets.get(move_id)
            sid = view.by_text.get(event.segment_id)
            if target is not None and sid is not None and sid in view.held.get(target, ()):
                del st.waiting_drops[move_id]
                self._drop(record, event)

    # -- running ----------------------------------------------------------------------
    def _catch_up(self) -> None:
        consumer = EventConsumer(self.bootstrap, self.topics, f"segcoord-historical-{self.name}-{uuid.uuid4().hex}",
                                 [SEGMENTS, CLUSTER], dead_letter=False, patient=True)
        try:
            # to the end, however long a pause: a catch-up cut short would leave answered commands unknown, and
            # the live consumer would execute them again and answer under their old ids (a 30-minute soak saw a
            # restarted historical re-announce loads it had answered and dropped minutes before)
            for record in consumer.until_end(idle_timeout=1.0):
                self._observe(record)
        finally:
            consumer.close()
        self._load_disk()

    def run(self, stop: threading.Event, poll_timeout: float = 0.2) -> None:
        """Serve until ``stop`` is set; then say ServerLeft."""
        self._catch_up()
        joined = ServerJoined(server=self.name, tier=self.tier, max_size_bytes=self.max_size_bytes)
        now = Instant(int(time.time() * 1000))
        self._producer.send(Envelope(joined, uuid.uuid4().hex, now, self.name))
        self._producer.flush()
        self._live = True
        self._come_back()
        consumer = EventConsumer(self.bootstrap, self.topics, f"segcoord-historical-{self.name}-{uuid.uuid4().hex}",
                                 [COMMANDS, SEGMENTS, CLUSTER], dead_letter=False, patient=True)
        try:
            wait: float | None = None
            beat_due = 0.0
            while not stop.is_set():
                if time.monotonic() >= beat_due:
                    self._heartbeat()
                    beat_due = time.monotonic() + self.heartbeat_ms / 1000
                for record in consumer.poll(timeout=poll_timeout if wait is None else min(poll_timeout, wait)):
                    if record.topic == self.topics.name(COMMANDS):
                        self._command(record)
                    else:
                        self._observe(record)
                if self._rejoin or self._reannounce:
                    self._come_back()
                wait = self._work()
        finally:
            consumer.close()
            left = ServerLeft(server=self.name, tier=self.tier, max_size_bytes=self.max_size_bytes)
            self._producer.send(Envelope(left, uuid.uuid4().hex, Instant(int(time.time() * 1000)), self.name))
            self._producer.close()
