"""Random placement histories for property tests: every event kind the placement fold reads, with
duplicates, early and late answers, refusals, moves, cancels, crashes (a server leaving with work queued)."""

from __future__ import annotations

from hypothesis import strategies as st

from events import Interval, SegmentDescriptor
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
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from tests.accepted import through_lockbox

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01
SERVERS = ["h1", "h2", "h3", "h4"]
TIERS = ["_default_tier", "hot"]
POOL = [SegmentDescriptor(ds, Interval(T0 + h * H, T0 + (h + 1) * H), "v1", 0, 100 + 10 * h)
        for ds in ("wiki", "koala") for h in range(4)]
COMMAND_IDS = [f"c{i}" for i in range(8)]

event_kinds = st.sampled_from([
    "join", "join", "leave", "lost", "heartbeat", "decommission", "recommission", "publish", "publish", "unused",
    "announce",
    "announce", "unannounce", "load", "load", "move", "drop", "cancel", "refuse", "rules", "config"])


@st.composite
def history(draw: st.DrawFn, size: int = 40) -> list[Envelope[Event]]:
    out: list[Envelope[Event]] = []
    n = draw(st.integers(1, size))
    for i in range(n):
        kind = draw(event_kinds)
        server = draw(st.sampled_from(SERVERS))
        seg = draw(st.sampled_from(POOL))
        cid = draw(st.sampled_from(COMMAND_IDS))
        at = T0 + draw(st.integers(0, 40)) * 60_000
        cause: str | None = draw(st.sampled_from([None, *COMMAND_IDS]))
        epoch = draw(st.sampled_from([None, 1, 2, 3]))  # the deciding planner's epoch: some commands are void
        event: Event
        key = server
        event_id = f"e{i}"
        if kind == "join":
            event = ServerJoined(server=server, tier=draw(st.sampled_from([None, *TIERS])),
                                 max_size_bytes=draw(st.sampled_from([None, 250, 10_000])))
        elif kind == "leave":
            event = ServerLeft(server=server)
        elif kind == "lost":
            event = ServerLost(server=server, last_heard_at=max(at - 60_000, 0), server_timeout_millis=30_000)
        elif kind == "heartbeat":
            event = ServerHeartbeat(server=server)
        elif kind == "decommission":
            event = ServerDecommissioned(server=server)
        elif kind == "recommission":
            event = ServerRecommissioned(server=server)
        elif kind == "publish":
            event = SegmentsPublished(task_id="t", segments=(seg,))
            key = seg.data_source
        elif kind == "unused":
            event = SegmentsMarkedUnused(segment_ids=(str(seg.id),), reason="test")
            key = seg.data_source
        elif kind == "announce":
            event = SegmentAnnounced(server=server, segment=seg)
            key = seg.data_source
        elif kind == "unannounce":
            event = SegmentUnannounced(server=server, segment_id=str(seg.id))
            key = seg.data_source
        elif kind == "load":
            event = LoadSegment(command_id=cid, server=server, segment=seg, stage="1", purpose="loading", reason="r",
                                planner_epoch=epoch)
            event_id, cause = cid, None
        elif kind == "move":
            source = draw(st.sampled_from(SERVERS))
            load = LoadSegment(command_id=cid, server=server, segment=seg, stage="7",
                               purpose="balancing", reason="cheaper",
                               move_id=cid, planner_epoch=epoch)
            out.append(Envelope(load, cid, Instant(at), server, None))
            event = DropSegment(command_id=cid + "-d", server=source, segment_id=str(seg.id), stage="7",
                                purpose="balancing",
                                reason="cheaper", move_id=cid, planner_epoch=epoch)
            event_id, cause, key = cid + "-d", None, source
        elif kind == "drop":
            event = DropSegment(command_id=cid, server=server, segment_id=str(seg.id), stage="12",
                                purpose="unloading", reason="r", planner_epoch=epoch)
            event_id, cause = cid, None
        elif kind == "cancel":
            event = CancelSegmentLoad(command_id="x" + cid, server=server, segment_id=str(seg.id), reason="r",
                                      cancels=draw(st.sampled_from([None, cid])), planner_epoch=epoch)
            event_id, cause = "x" + cid, None
        elif kind == "refuse":
            event = SegmentLoadRefused(server=server, command_id=cid, segment_id=str(seg.id), reason="full",
                                       move_id=draw(st.sampled_from([None, cid])))  # a move's load half: the move
        elif kind == "rules":
            tier = draw(st.sampled_from(TIERS))
            event = RulesSet(data_source=draw(st.sampled_from(["wiki", "_default"])),
                             rules=({"type": "loadForever", "tieredReplicants": {tier: draw(st.integers(0, 2))}},))
            key = "rules"
        else:
            event = DynamicConfigSet(config={"decommissioningNodes": draw(st.lists(st.sampled_from(SERVERS),
                                                                                   max_size=2, unique=True))})
            key = "config"
        out.append(through_lockbox(Envelope(event, event_id, Instant(at), key, cause)))
    return out
