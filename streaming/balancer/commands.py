"""The balancer's moves as commands on ``commands``: a LoadSegment to the target, a DropSegment from the source.

**Ids.** The load half of move ``i`` chosen for ``tier`` in its balancing run ``r`` (the
tier's run number, which advances once per micro-batch that balances it; see
:mod:`streaming.balancer.batch`) has the event id (= ``commandId`` = ``moveId``)
``derived_event_id("balancer/" + tier, 0, r, 2 i)``, its drop half ``... 2 i + 1``.
A micro-batch re-executed after a crash reads the same offsets (Spark's offset log)
from the same state version (run number included), picks the same moves and so sends
the same ids: consumers drop the copies (the historical by command id, the planner
agent by event id), so no move is applied twice. The deployment's topic prefix is not
part of the id (the same input under two prefixes gives the same ids, which the
restart test relies on).

>>> move_ids("hot", 3, 0) == move_ids("hot", 3, 0) != move_ids("hot", 4, 0)
True
"""

from __future__ import annotations

from coordinator.planner.planner import PlanCommand
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.ids import derived_event_id
from events.registry import Event
from events.schema import Instant
from events.segment import SegmentDescriptor
from streaming.balancer.placement import TierPlacement
from streaming.inflight import InFlight


def move_ids(tier: str, run: int, index: int) -> tuple[str, str]:
    """(load id = move id, drop id) of move ``index`` of ``tier`` in its balancing run ``run``."""
    salt = "balancer/" + tier
    return derived_event_id(salt, 0, run, 2 * index), derived_event_id(salt, 0, run, 2 * index + 1)


def move_envelopes(placement: TierPlacement, moves: list[PlanCommand], run: int) -> list[Envelope[Event]]:
    """The commands of a batch's moves, in move order; each is queued in ``placement`` (in flight at once)."""
    out: list[Envelope[Event]] = []
    now = Instant(placement.now)
    for index, cmd in enumerate(moves):
        assert cmd.type == "move" and cmd.source is not None
        seg: SegmentDescriptor = placement.segments[cmd.segment]
        load_id, drop_id = move_ids(placement.tier, run, index)
        stage, reason = str(cmd.stage), f"balancing: {cmd.reason}"
        out.append(Envelope(LoadSegment(command_id=load_id, server=cmd.server, segment=seg, stage=stage,
                                        purpose="balancing", reason=reason, move_id=load_id),
                            load_id, now, cmd.server))
        out.append(Envelope(DropSegment(command_id=drop_id, server=cmd.source, segment_id=str(cmd.segment),
                                        stage=stage, purpose="balancing", reason=reason, move_id=load_id),
                            drop_id, now, cmd.source))
        placement.enqueue(load_id, InFlight(cmd.server, "load", cmd.segment, placement.now, load_id, cmd.source,
                                            "balancing"))
        placement.enqueue(drop_id, InFlight(cmd.source, "drop", cmd.segment, placement.now, load_id, None,
                                            "balancing"))
    return out
