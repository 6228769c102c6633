"""The dashboard's recent feeds: entries of commands and visibility changes, bounded, read by sequence."""

from __future__ import annotations

from events import Envelope, Interval, SegmentDescriptor, Topics
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.envelope import encode
from events.registry import Event
from events.topics import COMMANDS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming.dashboard.recent import RecentEvents, entry_of

T0 = 1_795_219_200_000
SEG = SegmentDescriptor("wiki", Interval(T0, T0 + 86_400_000), "v1", 0, 100)


def env(event: Event, n: int = 1) -> Envelope[Event]:
    return Envelope(event, f"e{n}", T0 + n, "k")


def test_entries_name_the_action_server_segment_and_states() -> None:
    load = entry_of(env(LoadSegment(command_id="c1", server="h1", segment=SEG, stage="assign", reason="first copy",
                                    purpose="loading")))
    assert load == {"at": T0 + 1, "type": "load_segment", "action": "load", "server": "h1", "segment": str(SEG.id),
                    "stage": "assign", "purpose": "loading", "reason": "first copy"}
    move = entry_of(env(DropSegment(command_id="c2", server="h2", segment_id=str(SEG.id), stage="balance",
                                    reason="", move_id="c3", purpose="balancing")))
    assert (move["action"], move["server"]) == ("move out", "h2")
    cancel = entry_of(env(CancelSegmentLoad(command_id="c4", server="h1", segment_id=str(SEG.id), reason="gone")))
    assert cancel["action"] == "cancel"
    vis = entry_of(env(SegmentVisibilityChanged(segment_id=str(SEG.id), data_source="wiki", interval=SEG.interval,
                                                from_state="offline", to_state="visible")))
    assert (vis["segment"], vis["dataSource"], vis["from"], vis["to"]) == (str(SEG.id), "wiki", "offline", "visible")


def test_feeds_keep_the_newest_and_answer_what_is_newer_than_a_sequence() -> None:
    topics = Topics("x.")
    recent = RecentEvents("127.0.0.1:1", topics, keep=3)  # never started: add() is what the thread calls
    for n in range(5):
        recent.add(topics.name(COMMANDS), encode(env(LoadSegment(command_id=f"c{n}", server="h1", segment=SEG,
                                                                 stage="assign", reason="", purpose="loading"), n)))
    recent.add(topics.name(TIMELINE), b"not json")
    doc = recent.since(0)
    assert doc["seq"] == 6 and [e["seq"] for e in doc["commands"]] == [3, 4, 5]
    assert [e["type"] for e in doc["visibility"]] == ["undecodable"]
    assert recent.since(5)["commands"] == [] and len(recent.since(5)["visibility"]) == 1
