"""The Spark balancer skips tombstones and undecodable values instead of crashing (issue 16: a tombstone on
``cluster`` raised TypeError in streaming/balancer/state.py, and every restart crashed again)."""

from __future__ import annotations

import math

from events import encode
from streaming.balancer.state import decode_rows
from streaming.examples import example_envelopes


def test_tombstones_nan_and_garbage_are_skipped_and_valid_values_kept_in_order() -> None:
    good = example_envelopes(1_795_219_200_000)[:2]
    values = [None, math.nan, encode(good[0]), b"\xff", "{", b'{"event_type": 1}', encode(good[1]).decode(), 7]
    assert decode_rows(values) == good
