"""Builders for the balancer's tests: a cluster as events, and a tiny executor that answers commands.

The executor does what a historical does with a command (see :mod:`streaming.historical`):
a LoadSegment is answered by an announce, a plain DropSegment by an unannounce, a move's
DropSegment by an unannounce once the move's load was announced. Answer ids are derived
from the command id, so the same commands always get the same answers; a command id
seen before is ignored (consumers drop duplicates).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.balancer.cost_cache import ServerCostCache
from events import Envelope, Interval, SegmentDescriptor
from events.cluster import DynamicConfigSet, RulesSet, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from tests.accepted import through_lockbox

H = 3_600_000
T0 = 1_795_219_200_000
TIER = "_default_tier"
SIZE = 1 << 20


def _id(*parts: object) -> str:
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()


def hourly(data_sources: int, hours: int) -> list[SegmentDescriptor]:
    return [SegmentDescriptor(f"ds{d}", Interval(T0 + h * H, T0 + (h + 1) * H), "v1", 0, SIZE)
            for d in range(data_sources) for h in range(hours)]


@dataclass
class ClusterSpec:
    servers: int = 20
    new_servers: int = 1
    data_sources: int = 5
    hours: int = 24 * 10
    seed: int = 7
    config: dict[str, object] = field(default_factory=lambda: {
        "smartSegmentLoading": False, "maxSegmentsToMove": 40, "maxSegmentsInNodeLoadingQueue": 50})

    def names(self) -> list[str]:
        return [f"h{i:02d}" for i in range(self.servers + self.new_servers)]

    def placement(self) -> dict[str, list[SegmentDescriptor]]:
        """Segments at random on the first ``servers`` servers; the new ones empty."""
        rng = random.Random(self.seed)
        names = self.names()
        out: dict[str, list[SegmentDescriptor]] = {n: [] for n in names}
        for seg in hourly(self.data_sources, self.hours):
            out[names[rng.randrange(self.servers)]].append(seg)
        return out

    def events(self) -> list[Envelope[Event]]:
        """Rules (1 replica), config, servers, publishes (sealed as the lockbox's), announces: ids and times fixed."""
        out: list[Envelope[Event]] = []

        def add(event: Event, key: str) -> None:
            out.append(through_lockbox(Envelope(event, _id("input", self.seed, len(out)), Instant(T0 + len(out)), key)))

        add(RulesSet(data_source="_default", rules=({"type": "loadForever", "tieredReplicants": {TIER: 1}},)),
            "rules/_default")
        add(DynamicConfigSet(config=self.config), "config")  # type: ignore[arg-type]
        for name in self.names():
            add(ServerJoined(server=name, tier=TIER, max_size_bytes=10**12), name)
        segs = hourly(self.data_sources, self.hours)
        for d in range(self.data_sources):
            add(SegmentsPublished(task_id=f"task{d}", segments=tuple(s for s in segs if s.data_source == f"ds{d}")),
                f"ds{d}")
        for name, held in self.placement().items():
            for seg in held:
                add(SegmentAnnounced(server=name, segment=seg), seg.data_source)
        return out


@dataclass
class Executor:
    """Answers commands as historicals would; ``held`` is the placement the answers say."""

    held: dict[str, dict[str, SegmentDescriptor]]
    seen: set[str] = field(default_factory=set)
    moves: dict[str, tuple[str, str]] = field(default_factory=dict)  # move id -> (target, segment id)
    waiting: dict[str, DropSegment] = field(default_factory=dict)  # move id -> drop

    @staticmethod
    def of(placement: dict[str, list[SegmentDescriptor]]) -> Executor:
        return Executor({n: {str(s.id): s for s in segs} for n, segs in placement.items()})

    def answer(self, commands: Iterable[Envelope[Event]]) -> list[Envelope[Event]]:
        out: list[Envelope[Event]] = []
        for env in commands:
            if env.event_id in self.seen:
                continue
            self.seen.add(env.event_id)
            e = env.event
            if isinstance(e, LoadSegment):
                self.held[e.server][str(e.segment.id)] = e.segment
                out.append(Envelope(SegmentAnnounced(server=e.server, segment=e.segment), _id("ans", env.event_id),
                                    env.occurred_at, e.segment.data_source, env.event_id))
                if e.move_id is not None:
                    self.moves[e.move_id] = (e.server, str(e.segment.id))
            elif isinstance(e, DropSegment):
                if e.move_id is not None and e.move_id not in self.moves:
                    self.waiting[e.move_id] = e  # the load is not announced yet
                    continue
                out.append(self._drop(env.event_id, e, env.occurred_at))
        for move_id in sorted(self.waiting):
            if move_id in self.moves:
                drop = self.waiting.pop(move_id)
                out.append(self._drop(drop.command_id, drop, Instant(T0)))
        return out

    def _drop(self, command_id: str, e: DropSegment, at: int) -> Envelope[Event]:
        self.held[e.server].pop(e.segment_id, None)
        return Envelope(SegmentUnannounced(server=e.server, segment_id=e.segment_id), _id("ans", command_id),
                        Instant(at), e.segment_id.split("_", 1)[0], command_id)

    def counts(self) -> dict[str, int]:
        return {n: len(h) for n, h in sorted(self.held.items())}

    def total_cost(self) -> float:
        total = 0.0
        for held in self.held.values():
            cache = ServerCostCache()
            cache.extend(held.values())
            total += sum(cache.cost_of(s) for s in held.values())
        return total / 2
