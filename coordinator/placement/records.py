"""The records the placement fold keeps: commands in flight and per-server facts.

**Invariants.** An :class:`InFlight` is a command sent and not answered yet: a load
(the target half of a move carries ``move_id`` and, once known, the ``source`` it
moves from) or a drop (the source half of a move carries ``move_id``). Its identity
is the command id it is stored under, never its fields. ``purpose`` is the command's
(``events.commands.CommandPurpose``: why it was issued); the queue share it counts against
follows from it (``decommissioning`` and ``balancing`` their own, every other ``loading``).
:class:`ServerFacts` of a server that left keep ``joined=False``; what it announced
is kept (as the timeline keeps it), so a server that comes back holds it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events.segment import SegmentId

DEFAULT_TIER = "_default_tier"
DEFAULT_LOAD_TIMEOUT_MS = 15 * 60_000  # Druid's druid.coordinator.load.timeout


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

    def to_json(self, segment_text: str | None = None) -> dict[str, Any]:
        """The stored form; the segment as ``segment_text`` (default: its Druid id text)."""
        return {"server": self.server, "action": self.action,
                "segment": str(self.segment) if segment_text is None else segment_text,
                "sentAt": self.sent_at, "moveId": self.move_id, "source": self.source, "purpose": self.purpose}

    @staticmethod
    def from_json(o: dict[str, Any], segment: SegmentId) -> InFlight:
        """Back from :meth:`to_json`, with the segment id the caller resolved from ``o["segment"]``."""
        return InFlight(o["server"], o["action"], segment, o["sentAt"], o["moveId"], o["source"], o["purpose"])


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the log says of one server. Immutable: a change assigns a new value."""

    tier: str = DEFAULT_TIER
    max_size_bytes: int = 0
    decommissioning: bool = False
    joined: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "maxSizeBytes": self.max_size_bytes, "decommissioning": self.decommissioning,
                "joined": self.joined}

    @staticmethod
    def from_json(o: dict[str, Any]) -> ServerFacts:
        return ServerFacts(o["tier"], o["maxSizeBytes"], o["decommissioning"], o["joined"])
