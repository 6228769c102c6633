"""The timeline agent's id bookkeeping: which learned id texts need a new ``id/`` entry.

What a user would notice when this fails: a restore that resolves an unannounce or mark to another segment
than the running fold did (an ``id/`` entry not written), or needless store writes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from events import Interval
from events.segment import SegmentId
from streaming.service.timeline_facts import _same

ids = st.builds(SegmentId, st.sampled_from(["a", "b", "a_b"]),
                st.builds(lambda s, n: Interval(s, s + n), st.sampled_from([0, 86_400_000]), st.sampled_from([1, 2])),
                st.sampled_from(["v1", "v2"]), st.sampled_from([0, 1]))


@given(ids, ids)
def test_same_is_equality(a: SegmentId, b: SegmentId) -> None:
    assert _same(a, b) == (a == b)
    assert _same(None, b) is False
    assert _same(b, b)
