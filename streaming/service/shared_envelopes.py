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
- Off unless configured: with no ``readers`` (tests, CLI tools, replay) nothing is kept and every reader
  decodes, as before.
"""

from __future__ import annotations

import threading
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
        self._entries: dict[bytes, _Entry] = {}  # value -> its entry, in insertion (FIFO) order
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def configure(self, readers: Mapping[str, int]) -> None:
        """Share the records of these topics: ``readers[topic]`` readers in this process take each record."""
        with self._lock:
            self.readers = {t: n for t, n in readers.items() if n > 0}
            self._entries.clear()

    def taken(self, topic: str, value: bytes | bytearray | memoryview | str | None) -> Envelope[Event] | None:
        """The envelope a reader of ``topic`` would decode from ``value`` when this process has it (one read of
        the entry counted), else None."""
        if not self.readers or type(value) is not bytes or topic not in self.readers:
            return None
        with self._lock:
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
                envelope: Envelope[Event]) -> None:
        """A reader of ``topic`` decoded ``value`` to ``envelope``: kept for the topic's other readers."""
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
                del entries[next(iter(entries))]

    def __len__(self) -> int:
        return len(self._entries)


SHARED = SharedEnvelopes()  # the process's one instance (configured by ``segcoord run``)
