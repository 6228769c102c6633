"""``bench.service``'s placement preload writes the planner store a worker that placed the segments would have left:
the entries it writes out directly are the placement codec's entries of :func:`bench.incremental.build`'s state,
and a restore of them equals that state."""

from __future__ import annotations

import pytest

from bench.incremental import build
from bench.service import preload_entries
from coordinator.placement import codec
from coordinator.placement.projected import snapshot

NOW = 1_795_219_200_000


@pytest.mark.parametrize(("servers", "segments"), [(3, 40), (7, 250), (300, 1000)])
def test_written_entries_are_the_codec_entries_of_the_built_state(servers: int, segments: int) -> None:
    built = build(segments, servers, NOW)
    assert sorted(preload_entries(servers, segments, NOW)) == sorted(codec.entries(built, {"runs": 0}))
    restored, meta = codec.restore(list(preload_entries(servers, segments, NOW)))
    assert meta == {"runs": 0}
    assert snapshot(restored) == snapshot(built)
    assert restored.start == built.start and restored.last_event_at == built.last_event_at
