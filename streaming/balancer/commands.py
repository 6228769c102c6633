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

from coordinator.placement.state import PlacementState
from coordinator.planner.planner import PlanCommand
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.ids import derived_event_id
from events.registry import Event
from events.schema import Instant


def move_ids(tier: str, run: int, index: int) -> tuple[str, str]:
    """(load id = move id, drop id) of move ``index`` of ``tier`` in its balancing run ``run``."""
    salt = "balancer/" + tier
    return derived_event_id(salt, 0, run, 2 * index), derived_event_id(salt, 0, run, 2 * index + 1)


def move_envelopes(state: PlacementState, moves: list[PlanCommand], tier: str, run: int,
                   now: int) -> list[Envelope[Event]]:
    """The commands of a run's moves, in move order. The run folded each move into ``state`` under the planner's
    id; it is renamed to the ids sent here, so reading the commands back changes nothing."""
    out: list[Envelope[Event]] = []
    at = Instant(now)
    for index, cmd in enumerate(moves):
        assert cmd.type == "move" and cmd.source is not None and cmd.move_id is not None
        seg = state.segments[cmd.segment]
        load_id, drop_id = move_ids(tier, run, index)
        state.rename_move(cmd.move_id, load_id, drop_id)
        stage, reason = str(cmd.stage), f"balancing: {cmd.reason}"
        out.append(Envelope(LoadSegment(command_id=load_id, server=cmd.server, segment=seg, stage=stage,
                                        purpose="balancing", reason=reason, move_id=load_id), load_id, at, cmd.server))
        out.append(Envelope(DropSegment(command_id=drop_id, server=cmd.source, segment_id=str(cmd.segment),
                                        stage=stage, purpose="balancing", reason=reason, move_id=load_id),
                            drop_id, at, cmd.source))
    return out
