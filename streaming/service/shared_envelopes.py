"""Envelopes shared between the readers of one record in one process: each record decoded once per process.

A ``segcoord run`` worker reads ``segments`` twice (its Faust consumer for the timeline and upsert agents,
and the elected worker's planner feed, :mod:`streaming.service.planner_feed`, with a consumer of its own),
``cluster`` twice (upsert agent, planner feed), and it reads back on ``segments``, ``commands`` and
``timeline`` what its own agents produced. :class:`SharedEnvelopes` keeps the envelope of such a record, keyed
by the record's exact value bytes, from the first decode (or from the encode of its producer in this process)
until its last expected reader took it.

**Invariants.**

- Exact: an entry maps value bytes ``v`` to ``decode(v)``. A decode-side entry is the decode itself; a
  producer-side entry is the envelope ``e`` it encoded to ``v = encode(e)``, and ``decode(encode(e)) == e``
  for every valid envelope (``events/envelope.py``, property-tested in ``tests/unit/test_event_codec.py``).
  So a reader gets the envelope it would have decoded: the same log gives the same state and the same
  emitted events whether an entry was found or not (determinism, crash == replay).
- Envelopes are immutable (frozen dataclasses): sharing one between threads and agents is safe.
- Bounded: an entry leaves when its expected readers took it (``readers`` per physical topic, set by the
  service: the planner feed counts only while its worker leads; a reader that never comes, such as the
  consumer of another worker holding the partition, leaves it to the FIFO bound), and the oldest entries
  leave beyond :attr:`SharedEnvelopes.capacity` (4096: about 10 MB of values and envelopes at most).
- A reader behind another keeps nothing: a decode-side entry is made only when no reader of this process
  asked for a later offset of the record's partition (:meth:`SharedEnvelopes.taken` with the record's
  position). A reader that misses below that mark comes after the others (they decoded the record already,
  or took it from an entry that has left), so its entry would wait for nobody and push out, FIFO, the
  leader's entries that it may still reach (``bench.service``: with the planner feed more than the capacity
  behind, its entries had taken the whole table and 9 of 10 lookups missed). It only decides what is kept:
  a reader always gets the envelope it would decode.
- Off unless configured: with no ``readers`` (tests, CLI tools, replay) nothing is kept and every reader
  decodes, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from events.envelope import Envelope
from events.registry import Event

DEFAULT_CAPACITY = 4096


class _Entry:
    __slots__ = ("envelope", "reads")

    def __init__(self, envelope: Envelope[Event], reads: int) -> None:
        self.envelope = envelope
        self.reads = reads  # reads left before the entry leaves


class SharedEnvelopes:
    """Value bytes -> envelope, for the records more than one reader of this process takes (module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.readers: dict[str, int] = {}  # physical topic -> readers of its records in this process
        # value -> its entry, in insertion (FIFO) order. An OrderedDict, not a dict: the oldest leaves in O(1)
        # (``popitem(last=False)``); ``next(iter(d))`` on a plain dict skips every slot freed at its front since its
        # last resize, thousands at this capacity (py-spy of bench.service: 2.7% of the worker on that one line)
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._front: dict[tuple[str, int], int] = {}  # (topic, partition) -> highest offset a reader asked for
        self.hits = 0
        self.misses = 0

    def configure(self, readers: Mapping[str, int]) -> None:
        """Share the records of these topics: ``readers[topic]`` readers in this process take each record."""
        with self._lock:
            self.readers = {t: n for t, n in readers.items() if n > 0}
            self._entries.clear()
            self._front.clear()

    def taken(self, topic: str, value: bytes | bytearray | memoryview | str | None,
              position: tuple[int, int] | None = None) -> Envelope[Event] | None:
        """The envelope a reader of ``topic`` would decode from ``value`` when this process has it (one read of
        the entry counted), else None. ``position``: the record's (partition, offset), which :meth:`decoded`
        compares with the other readers' (see the module docstring)."""
        if not self.readers or type(value) is not bytes or topic not in self.readers:
            return None
        with self._lock:
            if position is not None:
                tp = (topic, position[0])
                if position[1] > self._front.get(tp, -1):
                    self._front[tp] = position[1]
            entry = self._entries.get(value)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            entry.reads -= 1
            if entry.reads <= 0:
                del self._entries[value]
            return entry.envelope

    def decoded(self, topic: str, value: bytes | bytearray | memoryview | str | None,
                envelope: Envelope[Event], position: tuple[int, int] | None = None) -> None:
        """A reader of ``topic`` decoded ``value`` to ``envelope``: kept for the topic's other readers, unless
        ``position`` (partition, offset; as given to :meth:`taken`) is below an offset another reader asked for."""
        if position is not None and position[1] < self._front.get((topic, position[0]), -1):
            return
        self._keep(topic, value, envelope, -1)

    def produced(self, topic: str, value: bytes, envelope: Envelope[Event]) -> None:
        """This process produced ``value = encode(envelope)`` on ``topic``: kept for the topic's readers."""
        self._keep(topic, value, envelope, 0)

    def _keep(self, topic: str, value: object, envelope: Envelope[Event], offset: int) -> None:
        if not self.readers or type(value) is not bytes:
            return
        reads = self.readers.get(topic, 0) + offset
        if reads <= 0:
            return
        with self._lock:
            entries = self._entries
            if value in entries:
                return
            entries[value] = _Entry(envelope, reads)
            while len(entries) > self.capacity:
                entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


SHARED = SharedEnvelopes()  # the process's one instance (configured by ``segcoord run``)
